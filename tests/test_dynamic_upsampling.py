"""Upsampling along dynamic axes: ``repeat_interleave`` by one count and nearest
interpolation by a whole ``scale_factor`` are each element repeated r times
(``Graph.repeat_each``), so they follow the axis at run time (and stream, see
test_streaming.py). Each archive is checked at the example size and at another size."""

import pytest
import torch
import torch.nn.functional as F

from t2n.errors import UnsupportedOperatorsError
from t2n.testing import FunctionModule as Fn
from t2n.testing import assert_exports

CASES = {
    "repeat_interleave_last": (lambda x: x.repeat_interleave(2, dim=-1), {2: "S"}),
    "repeat_interleave_mid": (lambda x: x.repeat_interleave(3, dim=1), {1: "C", 2: "S"}),
    "nearest_x2": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), {2: "S"}),
    "nearest_exact_x3": (lambda x: F.interpolate(x, scale_factor=3.0, mode="nearest-exact"),
                         {2: "S"}),
    "nearest_2d": (lambda x: F.interpolate(x.unsqueeze(1), scale_factor=(2, 3),
                                           mode="nearest").squeeze(1), {1: "H", 2: "W"}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_upsampling_follows_the_dynamic_axes(name):
    fn, axes = CASES[name]
    other = [1, 4, 7]
    for axis in axes:
        other[axis] += 4
    r = assert_exports(Fn(fn), torch.randn(1, 4, 7), input_names=["x"],
                       dynamic_axes={"x": axes}, more_args=[(torch.randn(*other),)])
    assert "tract_core_gather" not in r.op_histogram


def test_int_tensor_repeats_and_fractional_scales_stay_refused():
    for fn in (lambda x: x.repeat_interleave(torch.tensor([2]), dim=2),
               lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest"),
               lambda x: F.interpolate(x, scale_factor=2, mode="linear")):
        with pytest.raises(UnsupportedOperatorsError, match="dynamic"):
            assert_exports(Fn(fn), torch.randn(1, 4, 8), input_names=["x"],
                           dynamic_axes={"x": {2: "S"}})
