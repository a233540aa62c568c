"""Max pooling with indices, adaptive max pooling, max unpooling: torch eager vs tract.

Indices are flat positions in each (N, C) plane of the input; ties keep the first maximum in
the window's scan order; NaN windows give NaN and the last NaN's position (PyTorch's rule)."""

import torch
import torch.nn.functional as F

from opcases import Fn, assert_cases
from t2n.testing import assert_exports


def _ties(*shape):
    """Small integers as floats: many equal values inside a window."""
    return torch.randint(-2, 3, shape).float()


MAX2D_IDX = {
    "k2": lambda x: F.max_pool2d(x, 2, return_indices=True),
    "k3 s2 p1": lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
    "k3 s2 ceil": lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True, return_indices=True),
    "k3 s2 p1 ceil": lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True),
    "k2 s2 p1 ceil drops last window": lambda x: F.max_pool2d(x, 2, 2, 1, ceil_mode=True,
                                                              return_indices=True),
    "k3 dilation 2 p1": lambda x: F.max_pool2d(x, 3, 1, 1, 2, return_indices=True),
    "rect k (2,3) s (1,2) ceil": lambda x: F.max_pool2d(x, (2, 3), (1, 2), ceil_mode=True,
                                                        return_indices=True),
    "overlapping s1": lambda x: F.max_pool2d(x, 3, 1, return_indices=True),
    "unbatched": lambda x: F.max_pool2d(x[0], 3, 2, 1, return_indices=True),
}


def test_max_pool2d_with_indices_random():
    assert_cases(MAX2D_IDX, (torch.randn(2, 3, 7, 8),))


def test_max_pool2d_with_indices_ties_first_in_scan_order():
    assert_cases(MAX2D_IDX, (_ties(2, 3, 7, 8),))


def test_max_pool2d_with_indices_negative_values_and_all_minus_inf():
    x = -torch.rand(1, 2, 6, 6) - 0.5
    x[0, 0, :3, :3] = float("-inf")  # a window (and a padded one) holding only -inf
    assert_cases(MAX2D_IDX, (x,))


def test_max_pool1d_3d_with_indices():
    assert_cases({
        "1d k3": lambda x, v: F.max_pool1d(x, 3, return_indices=True),
        "1d k2 s3 p1 ceil": lambda x, v: F.max_pool1d(x, 2, 3, 1, ceil_mode=True,
                                                       return_indices=True),
        "1d k3 s2 p1 dilation 2": lambda x, v: F.max_pool1d(x, 3, 2, 1, 2, return_indices=True),
        "1d unbatched": lambda x, v: F.max_pool1d(x[0], 2, return_indices=True),
        "3d k2": lambda x, v: F.max_pool3d(v, 2, return_indices=True),
        "3d k3 s2 p1 ceil": lambda x, v: F.max_pool3d(v, 3, 2, 1, ceil_mode=True,
                                                       return_indices=True),
        "3d k (1,2,3) dilation (1,1,2)": lambda x, v: F.max_pool3d(v, (1, 2, 3), 1, 0,
                                                                   (1, 1, 2),
                                                                   return_indices=True),
    }, (_ties(2, 3, 11), torch.randn(1, 2, 4, 5, 6)))


def test_max_pool_with_indices_int_dtypes():
    assert_cases({
        "int64 ceil": lambda x: F.max_pool2d(x, 2, ceil_mode=True, return_indices=True),
        "int32 padded": lambda x: F.max_pool2d(x.int(), 3, 2, 1, return_indices=True),
        "f64 adaptive": lambda x: F.adaptive_max_pool2d(x.double(), (2, 3),
                                                        return_indices=True),
        "f64 k2": lambda x: F.max_pool2d(x.double(), 2, return_indices=True),
    }, (torch.randint(-50, 50, (1, 2, 5, 5)),))


def test_max_pool_with_indices_nan_propagates():
    x = torch.randn(1, 2, 6, 6)
    x[0, 0, 1, 1] = float("nan")
    x[0, 0, 1, 2] = float("nan")  # two NaN in one window: the last one's index
    x[0, 1, 4, 4] = float("nan")
    assert_cases({
        "max_pool2d k2": lambda x: F.max_pool2d(x, 2, return_indices=True),
        "max_pool2d k3 s1 p1": lambda x: F.max_pool2d(x, 3, 1, 1, return_indices=True),
        "adaptive 4x4": lambda x: F.adaptive_max_pool2d(x, 4, return_indices=True),
    }, (x,))


ADAPTIVE_MAX = {
    "2d global": lambda x: F.adaptive_max_pool2d(x, 1, return_indices=True),
    "2d divisible": lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True),
    "2d uneven 5x3": lambda x: F.adaptive_max_pool2d(x, (5, 3), return_indices=True),
    "2d None keeps axis": lambda x: F.adaptive_max_pool2d(x, (None, 5), return_indices=True),
    "2d larger than input": lambda x: F.adaptive_max_pool2d(x, (10, 11), return_indices=True),
    "2d unbatched": lambda x: F.adaptive_max_pool2d(x[0], (4, 5), return_indices=True),
    "2d values only": lambda x: F.adaptive_max_pool2d(x, (4, 3)),
    "1d uneven": lambda x: F.adaptive_max_pool1d(x[:, 0], 5, return_indices=True),
    "1d unbatched": lambda x: F.adaptive_max_pool1d(x[0, 0], 4, return_indices=True),
    "3d uneven": lambda x: F.adaptive_max_pool3d(x.reshape(2, 1, 6, 6, 6), (4, 5, 4),
                                                 return_indices=True),
}


def test_adaptive_max_pool():
    assert_cases(ADAPTIVE_MAX, (torch.randn(2, 3, 9, 8),))


def test_adaptive_max_pool_ties():
    assert_cases(ADAPTIVE_MAX, (_ties(2, 3, 9, 8),))


def test_max_pool_with_indices_dynamic_batch():
    """The batch axis stays symbolic; the window table only needs the spatial sizes."""
    model = torch.nn.MaxPool2d(3, 2, 1, return_indices=True)
    assert_exports(model, (torch.randn(2, 3, 7, 7),), input_names=["x"],
                   dynamic_axes={"x": {0: "B"}}, more_args=[(torch.randn(5, 3, 7, 7),)])


def test_window_op_count_does_not_grow_with_the_input():
    small = assert_exports(Fn(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True)),
                           (torch.randn(1, 2, 6, 6),))
    large = assert_exports(Fn(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True)),
                           (torch.randn(1, 2, 40, 40),))
    assert small.op_count == large.op_count


def test_max_unpool():
    def roundtrip2d(x, v, w):
        y, i = F.max_pool2d(x, 2, return_indices=True)
        return F.max_unpool2d(y, i, 2, output_size=(7, 8))

    def roundtrip1d(x, v, w):
        y, i = F.max_pool1d(w, 3, 2, 1, return_indices=True)
        return F.max_unpool1d(y, i, 3, 2, 1, output_size=(11,))

    def roundtrip3d(x, v, w):
        y, i = F.max_pool3d(v, 2, return_indices=True)
        return F.max_unpool3d(y, i, 2, output_size=(4, 5, 6))

    assert_cases({
        "2d roundtrip odd size": roundtrip2d,
        "1d roundtrip padded": roundtrip1d,
        "3d roundtrip": roundtrip3d,
        "2d larger output": lambda x, v, w: F.max_unpool2d(*F.max_pool2d(x, 2, 2,
                                                                        return_indices=True),
                                                           2, output_size=(7, 9)),
        "2d overlapping windows (duplicate indices, equal values)":
            lambda x, v, w: F.max_unpool2d(*F.max_pool2d(x, 3, 1, return_indices=True), 3, 1,
                                           output_size=(7, 8)),
    }, (torch.randn(2, 3, 7, 8), torch.randn(1, 2, 4, 5, 6), torch.randn(2, 3, 11)))


def test_max_unpool_runtime_indices():
    """Indices are a runtime input, in any order. (Duplicate indices with different values
    are not tested: PyTorch declares that result nondeterministic; tract keeps the last.)"""
    idx = torch.tensor([[[[7, 5], [0, 15]]]])
    vals = torch.randn(1, 1, 2, 2)
    assert_cases({
        "i64": lambda v, i: torch.ops.aten.max_unpool2d(v, i, [4, 4]),
        "unbatched": lambda v, i: torch.ops.aten.max_unpool2d(v[0], i[0], [4, 5]),
        "3d": lambda v, i: torch.ops.aten.max_unpool3d(v.unsqueeze(2), i.unsqueeze(2),
                                                       [2, 2, 4], [1, 1, 1], [0, 0, 0]),
    }, (vals, idx))


def test_max_pool_with_indices_backward():
    """Gradients of overlapping windows that picked the same input add up."""
    aten = torch.ops.aten

    def back2d(x, v, go2, go3):
        _, i = aten.max_pool2d_with_indices(x, [3, 3], [1, 1], [1, 1], [1, 1], True)
        return aten.max_pool2d_with_indices_backward(go2, x, [3, 3], [1, 1], [1, 1], [1, 1],
                                                     True, i)

    def back3d(x, v, go2, go3):
        _, i = aten.max_pool3d_with_indices(v, [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1],
                                            True)
        return aten.max_pool3d_with_indices_backward(go3, v, [2, 2, 2], [2, 2, 2], [0, 0, 0],
                                                     [1, 1, 1], True, i)

    assert_cases({"2d k3 s1 p1 ceil": back2d, "3d k2 ceil": back3d},
                 (_ties(2, 3, 5, 6), torch.randn(1, 2, 3, 4, 5), torch.randn(2, 3, 5, 6),
                  torch.randn(1, 2, 2, 2, 3)))


def test_max_unpool_dynamic_batch():
    def roundtrip(x):
        y, i = F.max_pool2d(x, 2, return_indices=True)
        return F.max_unpool2d(y, i, 2, output_size=(5, 6))

    assert_exports(Fn(roundtrip), (torch.randn(2, 3, 5, 6),), input_names=["x"],
                   dynamic_axes={"x": {0: "B"}}, more_args=[(torch.randn(4, 3, 5, 6),)])
