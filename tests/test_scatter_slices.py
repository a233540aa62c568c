"""slice_scatter (any step, negative and clamped bounds), select_scatter, diagonal_scatter."""

import pytest
import torch

from t2n.testing import assert_exports
from t2n.testing import FunctionModule as Fn


X = torch.randn(5, 7)


def _slice_case(dim, start, end, step, x=X):
    n = x.shape[dim]
    length = len(range(*slice(start, end, step).indices(n)))
    src_shape = list(x.shape)
    src_shape[dim] = length
    fn = lambda x, s: torch.slice_scatter(x, s, dim, start, end, step)  # noqa
    return fn, (x, torch.randn(src_shape))


SLICE_CASES = {
    "step1": (1, 2, 5, 1), "step2": (1, 0, None, 2), "step3_offset": (1, 1, 7, 3),
    "negative_bounds": (1, -5, -1, 2), "negative_dim": (-2, 1, None, 2),
    "clamped_end": (0, 3, 100, 1), "clamped_end_step": (0, -100, 100, 4),
    "whole_axis": (1, None, None, 1), "empty": (1, 4, 2, 1),
}


@pytest.mark.parametrize("case", list(SLICE_CASES))
def test_slice_scatter(case):
    fn, args = _slice_case(*SLICE_CASES[case])
    assert_exports(Fn(fn), args)


def test_slice_scatter_int_and_3d():
    x = torch.randint(0, 9, (2, 6, 3))
    fn = lambda x, s: torch.slice_scatter(x, s, 1, 1, None, 2)  # noqa
    assert_exports(Fn(fn), (x, torch.randint(-9, 0, (2, 3, 3))))


def test_slice_scatter_step_on_dynamic_batch():
    fn = lambda x, s: torch.slice_scatter(x, s, 1, 0, None, 3)  # noqa
    assert_exports(Fn(fn), (torch.randn(2, 7), torch.randn(2, 3)),
                   dynamic_axes={"input_0": {0: "B"}, "input_1": {0: "B"}},
                   more_args=[(torch.randn(5, 7), torch.randn(5, 3))])


@pytest.mark.parametrize("dim,index", [(0, 0), (1, -1), (-1, 3), (0, -5)])
def test_select_scatter(dim, index):
    x = torch.randn(5, 7)
    src = torch.randn(7 if dim == 0 else 5)
    fn = lambda x, s: torch.select_scatter(x, s, dim, index)  # noqa
    assert_exports(Fn(fn), (x, src))


@pytest.mark.parametrize("offset,dim1,dim2", [(0, 0, 1), (2, 0, 1), (-3, 0, 1), (1, 1, 0),
                                              (0, -1, 0), (-1, 2, 0)])
def test_diagonal_scatter(offset, dim1, dim2):
    x = torch.randn(4, 6, 3) if dim1 == 2 else torch.randn(4, 6)
    src = torch.diagonal(x, offset, dim1, dim2).clone().normal_()
    fn = lambda x, s: torch.diagonal_scatter(x, s, offset, dim1, dim2)  # noqa
    assert_exports(Fn(fn), (x, src))


def test_diagonal_scatter_empty_diagonal_is_identity():
    x = torch.randn(3, 2)
    fn = lambda x, s: torch.diagonal_scatter(x, s, 5)  # noqa
    assert_exports(Fn(fn), (x, torch.randn(0)))
