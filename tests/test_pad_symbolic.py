"""``F.pad`` by amounts computed from a dynamic axis (``(k - S % k) % k``, ``S // 2``, an
amount that crops at some lengths and pads at others), in every mode and dtype PyTorch
allows: one archive, run in tract at several lengths (amount 0 included) against torch.

PyTorch's bounds hold at every length checked: reflect pads by less than the axis,
circular by at most the axis."""

import pytest
import torch
import torch.nn.functional as F

from opcases import assert_cases

# both captures: under torch.export circular padding is t2n's leaf (t2n/capture/leaf_ops.py)
pytestmark = pytest.mark.usefixtures("capture")

# (case, pad list of x.shape -> amounts): the last axis is S (dynamic), axis 1 static
AMOUNTS = {
    "to whole chunks of 4": lambda s: (0, (4 - s % 4) % 4),
    "half before, chunks after": lambda s: (s // 2, (3 - s % 3) % 3),
    "static before, symbolic after": lambda s: (2, s % 3),
}
CROPS = {  # constant mode: negative amounts crop
    "crop a third": lambda s: (-(s // 3), 1),
    "pads or crops (5 - S)": lambda s: (5 - s, 0),
}
LENGTHS = (3, 6, 8, 11)  # remainders mod 4: 3, 2, 0, 3; mod 3: 0, 0, 2, 2


def _case(mode, amounts, value=None):
    def f(x):
        pad = amounts(x.shape[-1])
        if mode == "constant":
            return F.pad(x, pad, value=value) if value is not None else F.pad(x, pad)
        return F.pad(x, pad, mode=mode)
    return f


def _two_axes(mode):
    # a symbolic amount on the last axis, a static one on axis 1
    return lambda x: F.pad(x, ((4 - x.shape[-1] % 4) % 4, 1, 1, 2), mode=mode)


def _check(cases, x, more):
    s = x.shape[-1]
    assert_cases(cases, (x,), input_names=["x"], dynamic_axes={"x": {x.dim() - 1: "S"}},
                 more_args=[(m,) for m in more if m.shape[-1] != s])


def _data(dtype, n):
    g = torch.Generator().manual_seed(n)
    if dtype == torch.bool:
        return torch.rand(2, 3, n, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(2, 3, n, generator=g) * 3).to(dtype)
    lo = 0 if dtype == torch.uint8 else -50
    return torch.randint(lo, 50, (2, 3, n), generator=g).to(dtype)


FLOATS = [torch.float32, torch.float64, torch.float16]
INTS = [torch.int64, torch.int32, torch.int8, torch.uint8]


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_pad_symbolic_amounts(mode, dtype):
    cases = {name: _case(mode, fn) for name, fn in AMOUNTS.items()}
    cases["two axes"] = _two_axes(mode)
    if mode == "constant":
        cases.update({name: _case(mode, fn) for name, fn in CROPS.items()})
        cases["value"] = _case(mode, AMOUNTS["to whole chunks of 4"], value=3)
    _check(cases, _data(dtype, 6), [_data(dtype, n) for n in LENGTHS])


@pytest.mark.parametrize("mode", ["constant", "circular"])
def test_pad_symbolic_amounts_bool(mode):
    cases = {name: _case(mode, fn) for name, fn in AMOUNTS.items()}
    if mode == "constant":
        cases["value true"] = _case(mode, AMOUNTS["to whole chunks of 4"], value=True)
    _check(cases, _data(torch.bool, 6), [_data(torch.bool, n) for n in LENGTHS])


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_symbolic_ranks(mode):
    """2-d (unbatched 1-d pads), 4-d (2-d pads) and 5-d (3-d pads) inputs, the symbolic
    amount on the last axis, static ones on the others."""
    def case(rank):
        def f(x):
            x = x[0] if rank == 2 else x.reshape(x.shape[:1] + (1,) * (rank - 3) + x.shape[1:])
            p = (4 - x.shape[-1] % 4) % 4
            pads = {2: (p, 1), 4: (p, 0, 1, 1), 5: (1, p, 0, 1, 0, 0)}[rank]
            return F.pad(x, pads, mode=mode)
        return f

    cases = {f"rank {r}": case(r) for r in (2, 4, 5)}
    _check(cases, _data(torch.float32, 6), [_data(torch.float32, n) for n in LENGTHS])


def test_pad_symbolic_axis_static_amounts():
    """Static amounts on a dynamic axis: circular and crops (refused before), the others as
    one tract ``pad``."""
    cases = {"circular": lambda x: F.pad(x, (2, 3), mode="circular"),
             "crop both ends": lambda x: F.pad(x, (-1, -2)),
             "reflect": lambda x: F.pad(x, (2, 1), mode="reflect"),
             "replicate": lambda x: F.pad(x, (0, 4), mode="replicate")}
    _check(cases, _data(torch.float32, 6), [_data(torch.float32, n) for n in LENGTHS])
