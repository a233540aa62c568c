"""Indices on ties, exactly PyTorch's wherever its CPU kernel decides them by a rule of the
input (tests/tie_order.py lists the rules): sorts of up to 16 elements and stable sorts,
topk of up to 3 and the first extreme of 64 or more, kthvalue of 2, medians, mode of up to
16, first/last positions of max/min/argmax/cummax, the radix sort of a long 1-D integer
tensor; NaN above every number, in every dtype. Strict comparison (no tie acceptance)."""

import torch

from opcases import assert_cases
from tie_order import equivalent_tie_indices, left_to_internals

# every integer dtype sorts through the same tract kernel (int32 is the radix case below);
# f16/f32 share one float64 key, f64 takes two passes
DTYPES = (torch.int64, torch.uint8, torch.bool, torch.float16, torch.float32, torch.float64)


def _inputs(dtype, g):
    short = torch.randint(0, 3, (3, 16), generator=g).to(dtype)  # sorts of <= 16
    long = torch.randint(0, 3, (70, 3), generator=g).to(dtype)  # > 64 along dim 0
    if dtype.is_floating_point:
        for t, spots in ((short, [(0, 3), (1, 5), (1, 9), (2, 0)]),
                         (long, [(4, 0), (9, 0), (30, 1), (69, 2)])):
            for r, c in spots:
                t[r, c] = float("nan")
        short[0, 7], short[1, 1], short[2, 2] = float("inf"), float("-inf"), -0.0
        long[5, 0], long[6, 1] = float("inf"), -0.0
        long[:, 2] = float("nan")  # an all-NaN slice at its end: nanmedian/median/topk
        long[0, 2] = 1.0
    return short, long


def _cases(dtype):
    b, f = dtype == torch.bool, dtype.is_floating_point
    c = {
        "sort 16": lambda s, l: torch.sort(s, dim=1),
        "sort 16 descending": lambda s, l: torch.sort(s, dim=1, descending=True),
        "argsort 3 dim 0": lambda s, l: torch.argsort(s, dim=0, descending=True),
        "sort stable 70": lambda s, l: torch.sort(l, dim=0, stable=True),
        "sort stable 70 descending": lambda s, l: torch.sort(l, dim=0, stable=True,
                                                             descending=True),
        "msort": lambda s, l: torch.msort(l),
        "max dim": lambda s, l: (torch.max(s, 1), torch.max(l, 0)),
        "min dim keepdim": lambda s, l: (torch.min(s, 1, True), torch.min(l, 0)),
        "cummax": lambda s, l: (torch.cummax(s, 1), torch.cummax(l, 0)),
        "cummin": lambda s, l: (torch.cummin(s, 1), torch.cummin(l, 0)),
    }
    if not b:
        c.update({
            "topk 3": lambda s, l: [torch.topk(s[:, :3], k, dim=1, largest=lg)
                                    for k in (1, 2, 3) for lg in (True, False)],
            "topk k=1 of 70": lambda s, l: (torch.topk(l, 1, dim=0),
                                            torch.topk(l, 1, dim=0, largest=False)),
            "kthvalue 2": lambda s, l: (torch.kthvalue(s[:, 4:6], 1, 1),
                                        torch.kthvalue(s[:, 4:6], 2, 1, True)),
            "median": lambda s, l: (torch.median(s, 1), torch.median(l, 0)),
            "nanmedian": lambda s, l: (torch.nanmedian(s, 1), torch.nanmedian(l[:, :2], 0)),
            "argmax argmin": lambda s, l: (torch.argmax(s, 1), torch.argmin(l, 0),
                                           torch.argmax(l)),
        })
    if not f:
        c["mode 16"] = lambda s, l: (torch.mode(s, 1), torch.mode(s[:, :5], 1, True))
    else:  # (PyTorch's mode comparison does not order NaN: the columns without)
        c["mode 6"] = lambda s, l: torch.mode(s[:, 10:], 1)
    return c


def test_tie_indices_are_pytorchs():
    g = torch.Generator().manual_seed(0)
    cases, inputs = {}, []
    for j, dtype in enumerate(DTYPES):
        inputs += _inputs(dtype, g)
        for name, fn in _cases(dtype).items():
            cases[f"{name} {dtype}"] = (lambda fn, j: lambda *a: fn(a[2 * j], a[2 * j + 1]))(
                fn, j)
    # a 1-D ascending sort of >= 32768 integers is fbgemm's radix sort: stable
    big = torch.randint(0, 5, (32768,), generator=g, dtype=torch.int32)
    cases["radix sort 32768"] = lambda *a: torch.sort(a[-1])
    assert_cases(cases, (*inputs, big))


class _Sample:
    def __init__(self, x, *args, **kwargs):
        self.input, self.args, self.kwargs = x, args, kwargs


def test_harness_accepts_tie_permutations_only_where_pytorch_leaves_them():
    x = torch.tensor([1, 0, 1, 1] * 5)
    stable = torch.sort(x, stable=True)[1]
    swapped = stable.clone()
    swapped[[-2, -1]] = swapped[[-1, -2]]  # two of the equal 1s exchanged
    # 20 elements, stable=False: introsort internals, a tie permutation is right ...
    assert equivalent_tie_indices("sort", _Sample(x), 1, stable, swapped)
    # ... but not with stable=True, nor in 16 elements (insertion sort: stable)
    assert not equivalent_tie_indices("sort", _Sample(x, stable=True), 1, stable, swapped)
    assert not equivalent_tie_indices("argsort", _Sample(x, 0, False, True), 0, stable,
                                      swapped)
    short = x[:16]
    s16 = torch.sort(short, stable=True)[1]
    w16 = s16.clone()
    w16[[-2, -1]] = w16[[-1, -2]]
    assert not equivalent_tie_indices("sort", _Sample(short), 1, s16, w16)
    # anything but a tie permutation fails where ties are free too
    wrong = stable.clone()
    wrong[[0, -1]] = wrong[[-1, 0]]
    assert not equivalent_tie_indices("sort", _Sample(x), 1, stable, wrong)
    # topk: decided for n <= 3 and for k = 1 of >= 64; a position twice never passes
    assert left_to_internals("topk", x, {"dim": -1, "k": 2})
    assert not left_to_internals("topk", x[:3], {"dim": -1, "k": 2})
    assert not left_to_internals("topk", torch.zeros(64), {"dim": -1, "k": 1})
    assert not equivalent_tie_indices("topk", _Sample(x, 2), 1, torch.tensor([0, 2]),
                                      torch.tensor([0, 0]))
    assert equivalent_tie_indices("topk", _Sample(x, 2), 1, torch.tensor([0, 2]),
                                  torch.tensor([0, 3]))
    assert not left_to_internals("kthvalue", x[:2], {"dim": -1})
    assert not left_to_internals("mode", x[:16], {"dim": -1})
    assert left_to_internals("sort", x[:16].repeat(2048), {"dim": -1, "stable": False,
                                                           "descending": True})
    assert not left_to_internals("sort", x[:16].repeat(2048), {"dim": -1, "stable": False,
                                                               "descending": False})
