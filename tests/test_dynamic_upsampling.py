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


RESAMPLING = {  # (function of x [N, C, H, W] and y [1, 1, P, Q], modes PyTorch computes)
    "nearest to y's size": lambda x, y: F.interpolate(x, size=y.shape[-2:], mode="nearest"),
    "nearest-exact to y's size": lambda x, y: F.interpolate(x, size=y.shape[-2:],
                                                            mode="nearest-exact"),
    "bilinear to y's size": lambda x, y: F.interpolate(x, size=y.shape[-2:], mode="bilinear"),
    "bilinear align_corners": lambda x, y: F.interpolate(x, size=y.shape[-2:], mode="bilinear",
                                                         align_corners=True),
    "bicubic to y's size": lambda x, y: F.interpolate(x, size=y.shape[-2:], mode="bicubic"),
    "bilinear by 1.5, nearest by 0.5": lambda x, y: (
        F.interpolate(x, scale_factor=1.5, mode="bilinear"),
        F.interpolate(x, scale_factor=0.5, mode="nearest")),
    "bilinear to a fixed size": lambda x, y: F.interpolate(x, size=(6, 5), mode="bilinear"),
    # a size that is an expression (ceil(H/2)): PyTorch's own shape function would pin it
    "nearest x2 of a pooled size": lambda x, y: F.interpolate(
        F.avg_pool2d(x, 2, ceil_mode=True), scale_factor=2, mode="nearest"),
}


@pytest.mark.parametrize("name", sorted(RESAMPLING))
def test_resampling_along_dynamic_axes(name):
    """Sizes known at run time only: PyTorch's float32 coordinates computed in the graph.
    Checked at sizes that upsample, downsample, keep the size and resample to 1 x 1."""
    def xy(h, w, p, q):
        return torch.randn(2, 3, h, w), torch.randn(1, 1, p, q)

    assert_exports(Fn(RESAMPLING[name]), xy(5, 6, 9, 13), input_names=["x", "y"],
                   dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}, "y": {2: "P", 3: "Q"}},
                   more_args=[xy(7, 4, 7, 4), xy(12, 9, 3, 5), xy(4, 9, 1, 1)])


def test_resamplings_to_the_same_size_share_their_indices():
    """Two resamplings of one geometry compute their index and weight vectors once: the
    op count does not grow with the number of such layers (GhostNetV2's gates)."""
    def two(x, y):
        a = F.interpolate(x, size=y.shape[-2:], mode="bilinear")
        return a + F.interpolate(x * 2, size=y.shape[-2:], mode="bilinear")

    r = assert_exports(Fn(two), (torch.randn(1, 3, 5, 6), torch.randn(1, 1, 9, 13)),
                       input_names=["x", "y"],
                       dynamic_axes={"x": {2: "H", 3: "W"}, "y": {2: "P", 3: "Q"}},
                       more_args=[(torch.randn(1, 3, 8, 3), torch.randn(1, 1, 4, 7))])
    assert r.op_histogram["floor"] == 2  # one per axis, not one per axis and layer


def test_int_tensor_repeats_and_inexact_scales_stay_refused():
    with pytest.raises(UnsupportedOperatorsError, match="dynamic"):
        assert_exports(Fn(lambda x: x.repeat_interleave(torch.tensor([2]), dim=2)),
                       torch.randn(1, 4, 8), input_names=["x"], dynamic_axes={"x": {2: "S"}})
    # floor(S * 1.3) in double is not exactly a rational size of S
    with pytest.raises(UnsupportedOperatorsError, match=r"scale_factor: 1.3 over a dynamic"):
        assert_exports(Fn(lambda x: F.interpolate(x, scale_factor=1.3, mode="linear")),
                       torch.randn(1, 4, 8), input_names=["x"], dynamic_axes={"x": {2: "S"}})
