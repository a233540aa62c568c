"""Pooling: torch eager vs tract (ceil_mode incl. a dropped last window, padding, dilation,
stride None, count_include_pad, divisor_override, adaptive windows that overlap)."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from t2n.testing import assert_exports


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


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


@pytest.mark.parametrize("name", list(MAX2D))
def test_max_pool2d(name):
    # all-negative values: padding must never win the max
    x = -torch.rand(2, 3, 7, 8) - 0.5
    assert_exports(nn.MaxPool2d(**MAX2D[name]), (x,))


def test_max_pool1d_variants_and_unbatched():
    m = Fn(lambda x: (F.max_pool1d(x, 3), F.max_pool1d(x, 2, 3, 1, ceil_mode=True),
                      F.max_pool1d(x, 3, 2, 1, 2), F.max_pool1d(x[0], 2),
                      F.max_pool2d(x, 2)))
    assert_exports(m, (torch.randn(2, 3, 11),))


def test_max_pool_int():
    m = Fn(lambda x: F.max_pool2d(x, 2, ceil_mode=True))
    assert_exports(m, (torch.randint(-50, 50, (1, 2, 5, 5)),))


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


@pytest.mark.parametrize("name", list(AVG2D))
def test_avg_pool2d(name):
    assert_exports(nn.AvgPool2d(**AVG2D[name]), (torch.randn(2, 3, 7, 8),))


def test_avg_pool1d_variants():
    m = Fn(lambda x: (F.avg_pool1d(x, 3), F.avg_pool1d(x, 3, 2, 1, ceil_mode=True),
                      F.avg_pool1d(x, 3, 2, 1, True, False), F.avg_pool1d(x, 4, None, 2),
                      F.avg_pool1d(x[0], 2)))
    assert_exports(m, (torch.randn(2, 3, 10),))


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


@pytest.mark.parametrize("name", list(ADAPTIVE))
def test_adaptive_avg_pool(name):
    assert_exports(Fn(ADAPTIVE[name]), (torch.randn(2, 3, 9, 8),))
