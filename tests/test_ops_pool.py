"""Pooling: torch eager vs tract (ceil_mode incl. a dropped last window, padding, dilation,
stride None, count_include_pad, divisor_override, adaptive windows that overlap)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
import torch.nn as nn
import torch.nn.functional as F

import t2n
from opcases import assert_cases
from t2n.testing import assert_exports


MAX2D = {
    "k2": dict(kernel_size=2),
    "k3 s2 p1": dict(kernel_size=3, stride=2, padding=1),
    "k3 s2 ceil": dict(kernel_size=3, stride=2, ceil_mode=True),
    "k3 s2 p1 ceil": dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    "k2 s2 p1 ceil drops last window": dict(kernel_size=2, stride=2, padding=1,
                                            ceil_mode=True),
    "k3 dilation 2 p1": dict(kernel_size=3, dilation=2, padding=1, stride=1),
    "rect k (2,3) s (1,2) ceil": dict(kernel_size=(2, 3), stride=(1, 2), ceil_mode=True),
}


def test_max_pool2d():
    # all-negative values: padding must never win the max
    x = -torch.rand(2, 3, 7, 8) - 0.5
    assert_cases({name: nn.MaxPool2d(**kw) for name, kw in MAX2D.items()}, (x,))


def test_max_pool1d_variants_and_unbatched():
    assert_cases({
        "max_pool1d k3": lambda x: F.max_pool1d(x, 3),
        "max_pool1d k2 s3 p1 ceil": lambda x: F.max_pool1d(x, 2, 3, 1, ceil_mode=True),
        "max_pool1d k3 s2 p1 dilation 2": lambda x: F.max_pool1d(x, 3, 2, 1, 2),
        "max_pool1d unbatched": lambda x: F.max_pool1d(x[0], 2),
        "max_pool2d on 3-d input is unbatched": lambda x: F.max_pool2d(x, 2),
    }, (torch.randn(2, 3, 11),))


def test_max_pool_int():
    assert_cases({"max_pool2d int64 ceil": lambda x: F.max_pool2d(x, 2, ceil_mode=True)},
                 (torch.randint(-50, 50, (1, 2, 5, 5)),))


AVG2D = {
    "k2": dict(kernel_size=2),
    "k3 s2 p1 include pad": dict(kernel_size=3, stride=2, padding=1),
    "k3 s2 p1 exclude pad": dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    "k3 s2 ceil": dict(kernel_size=3, stride=2, ceil_mode=True),
    "k3 s2 p1 ceil include pad": dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    "k3 s2 p1 ceil exclude pad": dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                      count_include_pad=False),
    "k2 s2 p1 ceil drops last": dict(kernel_size=2, stride=2, padding=1, ceil_mode=True),
    "divisor_override 3": dict(kernel_size=3, stride=2, padding=1, divisor_override=3),
    "divisor_override ceil": dict(kernel_size=2, stride=3, ceil_mode=True,
                                  divisor_override=5),
    "rect (3,2) p (1,0)": dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0)),
}


def test_avg_pool2d():
    assert_cases({name: nn.AvgPool2d(**kw) for name, kw in AVG2D.items()},
                 (torch.randn(2, 3, 7, 8),))


def test_avg_pool1d_variants():
    assert_cases({
        "avg_pool1d k3": lambda x: F.avg_pool1d(x, 3),
        "avg_pool1d k3 s2 p1 ceil": lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True),
        "avg_pool1d ceil exclude pad": lambda x: F.avg_pool1d(x, 3, 2, 1, True, False),
        "avg_pool1d stride None p2": lambda x: F.avg_pool1d(x, 4, None, 2),
        "avg_pool1d unbatched": lambda x: F.avg_pool1d(x[0], 2),
    }, (torch.randn(2, 3, 10),))


ADAPTIVE = {
    "2d global": lambda x: F.adaptive_avg_pool2d(x, 1),
    "2d divisible": lambda x: F.adaptive_avg_pool2d(x, (3, 4)),
    "2d uneven 5x3": lambda x: F.adaptive_avg_pool2d(x, (5, 3)),
    "2d None keeps axis": lambda x: F.adaptive_avg_pool2d(x, (None, 5)),
    "2d larger than input": lambda x: F.adaptive_avg_pool2d(x, (10, 11)),
    "2d unbatched": lambda x: F.adaptive_avg_pool2d(x[0], (4, 5)),
    "1d uneven": lambda x: F.adaptive_avg_pool1d(x[:, 0], 5),
    "1d global": lambda x: F.adaptive_avg_pool1d(x[:, :, 0], 1),
}


def test_adaptive_avg_pool():
    assert_cases(ADAPTIVE, (torch.randn(2, 3, 9, 8),))


@settings(max_examples=12, deadline=None, derandomize=True)
@given(data=st.data())
def test_pool_geometry_property(data):
    """Random kernel/stride/padding/dilation/ceil_mode/count_include_pad combinations that
    PyTorch accepts: max and avg pooling match, including partial last windows."""
    k = data.draw(st.integers(1, 4), label="kernel")
    s = data.draw(st.integers(1, 3), label="stride")
    p = data.draw(st.integers(0, k // 2), label="padding")
    d = data.draw(st.integers(1, 2), label="dilation")
    ceil = data.draw(st.booleans(), label="ceil_mode")
    include = data.draw(st.booleans(), label="count_include_pad")
    n = data.draw(st.integers(max(d * (k - 1) + 1 - 2 * p, 1), 9), label="length")
    if p > (d * (k - 1) + 1) // 2:
        return
    x = torch.randn(1, 2, n, n + 1)
    assert_cases({
        "max_pool2d": lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil),
        "avg_pool2d": lambda x: F.avg_pool2d(x, k, s, p, ceil_mode=ceil,
                                             count_include_pad=include),
    }, (x,))


@pytest.mark.parametrize("pool, rank", [
    (torch.nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False), 2),  # ResNet-D
    (torch.nn.AvgPool2d(3, 2, padding=1, ceil_mode=True), 2),
    (torch.nn.MaxPool2d(3, 2, padding=1, ceil_mode=True), 2),
    (torch.nn.MaxPool1d(4, 3, padding=1, ceil_mode=True), 1),
], ids=["avg2-2-resnet_d", "avg3-2-p1-include_pad", "max3-2-p1", "max1d-4-3-p1"])
def test_ceil_mode_on_symbolic_spatial_axes(pool, rank):
    """ceil_mode on dynamic H/W: one archive gives PyTorch's sizes and values for odd and
    even lengths (the rounded-up last window is partial for some, absent for others)."""
    spatial = {2: "H", 3: "W"} if rank == 2 else {2: "L"}
    sizes = [(9, 10), (8, 8), (13, 7)] if rank == 2 else [(11,), (8,), (9,), (10,)]
    args = [(torch.randn(2, 3, *n),) for n in sizes]
    assert_exports(pool, args[0], input_names=["x"], more_args=args[1:],
                   dynamic_axes={"x": {0: "B", **spatial}})


def test_ceil_mode_refused_where_the_last_window_depends_on_the_length(tmp_path):
    """Kernel 3, stride 3, padding 1: PyTorch drops a rounded-up window that would start in
    the end padding, which depends on H modulo 3; refused, naming the op and the geometry."""
    with pytest.raises(t2n.UnsupportedOperatorsError, match=r"max_pool2d[\s\S]*ceil_mode.*"
                       r"kernel 3, stride 3, padding 1"):
        t2n.export(torch.nn.MaxPool2d(3, 3, padding=1, ceil_mode=True),
                   (torch.randn(1, 3, 9, 9),), tmp_path / "m.nnef.tar", input_names=["x"],
                   dynamic_axes={"x": {2: "H"}})
    assert not (tmp_path / "m.nnef.tar").exists()
