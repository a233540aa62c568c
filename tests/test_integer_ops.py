"""Integer ops tract has no kernel for, exact as PyTorch computes them (wrap-around, the CPU
kernel's rules for out-of-range shifts, negative powers, gcd of the minimum): shifts,
gcd/lcm, pow with a tensor exponent, one_hot, bincount, vander; and integer sums past the
32-bit range (tract's integer sum_reduce saturates in i32). Bool tensors through the ops
whose tract kernels take numbers only (pad, scatters, sort): or/and as PyTorch reduces."""

import torch

from opcases import assert_cases, output_names

MIN = -(2 ** 63)


def test_integer_ops_exact(capture):
    x = torch.tensor([5, -5, 7, -8, 2 ** 62, -1, MIN, 0])
    s = torch.tensor([-1, 0, 1, 3, 63, 64, 70, 2])
    u8 = torch.tensor([5, 200, 255, 1, 128, 7, 0, 3], dtype=torch.uint8)
    su8 = torch.tensor([0, 1, 7, 8, 9, 3, 2, 1], dtype=torch.uint8)
    i32 = torch.tensor([3, -3, 2 ** 30, -(2 ** 31), 7, 1, -1, 9], dtype=torch.int32)
    assert_cases({
        "lshift i64": lambda x, s, u, su, i: x << s,
        "rshift i64": lambda x, s, u, su, i: x >> s,
        "lshift scalar": lambda x, s, u, su, i: torch.bitwise_left_shift(x, 3),
        "rshift u8": lambda x, s, u, su, i: u >> su,
        "lshift u8": lambda x, s, u, su, i: u << su,
        "rshift i32 by i64": lambda x, s, u, su, i: i >> (s % 40),
        "gcd": lambda x, s, u, su, i: torch.gcd(x, s * 6),
        "gcd 2-d broadcast": lambda x, s, u, su, i: torch.gcd(x.reshape(2, 4), s[:4] * 4),
        "lcm": lambda x, s, u, su, i: torch.lcm(x % 1000, s),
        "lcm wraps": lambda x, s, u, su, i: torch.lcm(x, s + 2 ** 40),
        "gcd u8": lambda x, s, u, su, i: torch.gcd(u, su * 2),
        "pow tensor exponent": lambda x, s, u, su, i: torch.pow(x % 7 - 3, s % 9 - 2),
        "pow wraps": lambda x, s, u, su, i: torch.pow(x % 5 + 3, s + 30),
        "pow base -1, 1, 0 negative": lambda x, s, u, su, i: torch.pow(s % 3 - 1, -s - 1),
        "scalar ** tensor": lambda x, s, u, su, i: 3 ** (s % 50),
        "pow i32": lambda x, s, u, su, i: torch.pow(i, i % 5),
        "pow u8": lambda x, s, u, su, i: torch.pow(u, su),
        "one_hot static": lambda x, s, u, su, i: torch.nn.functional.one_hot(su.long(), 10),
        "one_hot from data": lambda x, s, u, su, i: torch.nn.functional.one_hot(
            (s % 5).reshape(2, 4)),
        "bincount": lambda x, s, u, su, i: torch.bincount(su.long()),
        "bincount weights minlength": lambda x, s, u, su, i: torch.bincount(
            su.long(), weights=x.double() / 3, minlength=12),
        "vander": lambda x, s, u, su, i: torch.linalg.vander(s % 11, N=6),
        "linspace int": lambda x, s, u, su, i: torch.linspace(s[0] * 7, s[4] * 3, 9,
                                                              dtype=torch.int64),
        "sum past i32": lambda x, s, u, su, i: (x.reshape(2, 4) // 4).sum(1),
        "sum wraps": lambda x, s, u, su, i: x.sum(),
        "sum u8 wraps": lambda x, s, u, su, i: u.sum(dtype=torch.uint8),
    }, (x, s, u8, su8, i32))


def test_bool_ops():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(4, 5, generator=g) > 0.5
    idx = torch.randint(0, 4, (3, 5), generator=g)
    src = torch.rand(3, 5, generator=g) > 0.5
    cases = {
        "scatter_add": lambda x, i, s: x.scatter_add(0, i, s),
        "scatter reduce add": lambda x, i, s: x.scatter(0, i, s, reduce="add"),
        "index_put accumulate": lambda x, i, s: x.index_put((i[0],), s[0], accumulate=True),
        "index_put mask accumulate": lambda x, i, s: x.index_put((x,), s[0, 0], accumulate=True),
        "pad True": lambda x, i, s: torch.nn.functional.pad(x, (1, 2, 0, 1), value=True),
        "block_diag": lambda x, i, s: torch.block_diag(x, s),
        "diag_embed": lambda x, i, s: torch.diag_embed(x, offset=1),
        "sort": lambda x, i, s: torch.sort(x[:, :4], dim=1, stable=True),
        "argsort descending": lambda x, i, s: torch.argsort(x, dim=0, descending=True,
                                                            stable=True),
        "cummax cummin": lambda x, i, s: (torch.cummax(x, 1), torch.cummin(x, 0)),
        "sum_to_size": lambda x, i, s: x.sum_to_size(1, 5),
        "nonzero of 0-dim": lambda x, i, s: (torch.nonzero(x[1, 1]),
                                             torch.nonzero_static(x[0, 1], size=2)),
    }
    for r in ("sum", "prod", "amax", "amin"):
        for inc in (True, False):
            cases[f"scatter_reduce {r} {inc}"] = (
                lambda r, inc: lambda x, i, s: x.scatter_reduce(0, i, s, r, include_self=inc))(
                    r, inc)
    assert_cases(cases, (x, idx, src))


def test_integer_logspace():
    """PyTorch's integer logspace: start/end truncated to the dtype, exponents and power in
    double, each value truncated; past the range the x86 conversion's minimum (int64,
    int32; the narrower types keep the low bits of the int32 conversion)."""
    cases = {}
    for dt in (torch.int64, torch.int32, torch.int16, torch.uint8):
        cases[f"base 2 past the range {dt}"] = (lambda dt: lambda a, b, c, d: torch.logspace(
            a, b, 8, base=2, dtype=dt))(dt)
        cases[f"negative base {dt}"] = (lambda dt: lambda a, b, c, d: torch.logspace(
            a, b // 2 + 1, 6, base=-2.0, dtype=dt))(dt)
        cases[f"truncated ends {dt}"] = (lambda dt: lambda a, b, c, d: torch.logspace(
            c, d, 5, dtype=dt))(dt)
        cases[f"base 1.5 {dt}"] = (lambda dt: lambda a, b, c, d: torch.logspace(
            0.5 if dt == torch.uint8 else -2.5, 11.9, 13, base=1.5, dtype=dt))(dt)
        cases[f"one step {dt}"] = (lambda dt: lambda a, b, c, d: torch.logspace(
            d - 2.7, d, 1, dtype=dt))(dt)
    args = (torch.tensor(0), torch.tensor(70), torch.tensor(-3), torch.tensor(4.7))
    # the base-1.5 cases take literal ends: constant outputs, on purpose
    assert_cases(cases, args, constant_outputs=[n for n in output_names(cases, args)
                                                if "base_1_5" in n])
