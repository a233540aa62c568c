"""Writes into views inside forward (the traced graph holds copy_/fill_/index_put_/add_ on
slices, selects, diagonals and index results): the exported graph gives PyTorch's final
tensors, including views taken before a write and read after it."""

import pytest
import torch

from t2n.testing import assert_exports
from t2n.testing import FunctionModule as Fn


# every test through both front ends (torch.jit.trace, torch.export): see conftest.capture
pytestmark = pytest.mark.usefixtures("capture")

def slab(x, z):
    y = x.clone()
    y[:, 1:3] = z
    return y


def strided(x, z):
    y = x.clone()
    y[:, ::2] = z
    y[1::3, -1] = -1.0
    return y


def select_chain(x, v):
    y = x.clone()
    y[1, :, 2] = v
    y[-1, 0, -1] = 9.0
    return y


def index_add_assign(x, i, v):
    y = x.clone()
    y[i] += v  # index, add, index_put_ (overwrite: duplicates in i are undefined)
    return y


def mask_zero(x, m):
    y = x.clone()
    y[m] = 0
    return y


def index_add_inplace(x, i, s):
    y = x.clone()
    y.index_add_(1, i, s)
    return y


def narrow_copy(x, z):
    y = x.clone()
    y.narrow(1, -3, 2).copy_(z)
    return y


def index_put_on_slice(x, i, v):
    y = x.clone()
    y[1:, i] = v
    return y


def scatter_into_slice(x, i, s):
    y = x.clone()
    y[:, 1:].scatter_add_(1, i, s)
    return y


def diagonal_fill(x):
    y = x.clone()
    y.diagonal(1).fill_(3.0)
    y.diagonal(0, 1, 0)[1:] += 1.0
    return y


def write_then_read_view(x, z):
    y = x.clone()
    v = y[:, ::2]  # taken before the write, read after it
    y[:, 0] = z
    y.narrow(0, 1, 1).mul_(2)
    return y, v, v.sum(1)


def masked_fill_on_select(x, m):
    y = x.clone()
    y[0].masked_fill_(m, -5.0)
    return y


def through_reshape_view(x):
    y = x.clone()
    y.view(2, 6)[0] = 1.0  # view re-run during the write-back: its own shape, not copy_'s
    return y


def through_numpy_T_and_movedim(x):
    y = x.clone()
    y.T[1:, 0].fill_(7.0)
    y.movedim(0, 1)[2] = 1.5
    return y


def split_parts_are_views(x):
    y = x.clone()
    a, b = y.split(2)
    a.zero_()
    y.unbind(1)[2].fill_(3.0)
    y.chunk(3, 1)[1].add_(10)
    return y, b


def layout_changing_inplace(x):
    y = x.clone()
    z = y[0]  # a view in the old layout
    y.t_()
    z.fill_(2.0)  # row 0 of the old layout = column 0 of y now
    y.unsqueeze_(0)
    return y * 2


CASES = {
    "layout_changing_inplace": (layout_changing_inplace, (torch.randn(4, 3),)),
    "through_reshape_view": (through_reshape_view, (torch.randn(4, 3),)),
    "through_numpy_T_and_movedim": (through_numpy_T_and_movedim, (torch.randn(4, 3),)),
    "split_unbind_chunk_parts": (split_parts_are_views, (torch.randn(4, 3),)),
    "slice_assign": (slab, (torch.randn(3, 5), torch.randn(3, 2))),
    "strided_assign": (strided, (torch.randn(5, 6), torch.randn(5, 3))),
    "select_chain": (select_chain, (torch.randn(3, 4, 5), torch.randn(4))),
    "index_add_assign": (index_add_assign, (torch.randn(5, 3), torch.tensor([4, -5, 2]),
                                            torch.randn(3, 3))),
    "mask_zero": (mask_zero, (torch.randn(4, 3), torch.rand(4, 3) > 0.5)),
    "index_add_inplace": (index_add_inplace, (torch.randn(3, 5), torch.tensor([0, 4, 0]),
                                              torch.randn(3, 3))),
    "narrow_copy": (narrow_copy, (torch.randn(3, 5), torch.randn(3, 2))),
    "index_put_on_slice": (index_put_on_slice, (torch.randn(4, 5), torch.tensor([3, 0]),
                                                torch.randn(2))),
    "scatter_into_slice": (scatter_into_slice, (torch.randn(3, 5), torch.tensor([[0, 3], [1, 1]]),
                                                torch.randn(2, 2))),
    "diagonal_fill": (diagonal_fill, (torch.randn(4, 5),)),
    "write_then_read_view": (write_then_read_view, (torch.randn(4, 6), torch.randn(4))),
    "masked_fill_on_select": (masked_fill_on_select, (torch.randn(3, 4),
                                                      torch.tensor([True, False, False, True]))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_view_write(case):
    fn, args = CASES[case]
    assert_exports(Fn(fn), args)


def _states(x):
    """RWKV's per-layer states: zeros made in forward (folded to constants), then run-time
    values written into views of them, read through the list and through other views."""
    state = [torch.zeros(x.shape[0], 4, 3) for _ in range(2)]
    early = state[1][:, :, 2]  # a view taken before the writes
    state[1][:, :, 0] = x[:, -1]
    s = state[0]
    s[:, 1:3, 1] = x[:, 0, :2] * 3
    state[1][:, :, 2] += x[:, 1]
    return state[0], state[1], early * 2


def test_run_time_writes_into_views_of_folded_tensors():
    # the writes used to be lost: tract returned the zeros
    assert_exports(Fn(_states), (torch.randn(2, 5, 4),))
