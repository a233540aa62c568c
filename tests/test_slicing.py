"""slice, narrow, select, diagonal, fill, zero, copy: torch eager vs tract, with PyTorch's
clamping of bounds, negative dims and indices, rank-0/1 and empty results."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

from t2n.testing import FunctionModule as Fn, assert_exports
from test_gather_support import check, refuses

X = torch.randn(3, 4, 7)

CASES = {
    # ---------------------------------------------------------------- slice
    "slice-step3_ellipsis": (lambda x: x[..., ::3], (X,)),
    "slice-step2_offset": (lambda x: x[:, 1::2], (X,)),
    "slice-step_larger_than_axis": (lambda x: x[..., 2::10], (X,)),
    "slice-negative_bounds": (lambda x: x[:, -3:-1], (X,)),
    "slice-negative_start_beyond": (lambda x: x[-10:2], (X,)),
    "slice-end_beyond": (lambda x: x[:, 2:100, 5:], (X,)),
    "slice-empty_start_after_end": (lambda x: x[:, 3:1], (X,)),
    "slice-empty_start_beyond": (lambda x: x[..., 9:], (X,)),
    "slice-negative_dim": (lambda x: torch.ops.aten.slice(x, -2, 1, 3, 2), (X,)),
    "slice-rank1_step": (lambda x: x[1:-1:3], (torch.randn(10),)),
    "slice-int_data": (lambda x: x[::2, 1:], (torch.arange(20).view(4, 5),)),
    "slice-chain": (lambda x: x[1:][:, ::2][..., -2:], (X,)),
    # ---------------------------------------------------------------- narrow
    "narrow-positive": (lambda x: x.narrow(2, 2, 4), (X,)),
    "narrow-negative_start": (lambda x: x.narrow(-1, -3, 2), (X,)),
    "narrow-zero_length": (lambda x: x.narrow(0, 1, 0), (X,)),
    "narrow-rank1": (lambda x: x.narrow(0, -4, 4), (torch.randn(6),)),
    # ---------------------------------------------------------------- select
    "select-negative_index": (lambda x: x[:, -1], (X,)),
    "select-negative_dim": (lambda x: x.select(-1, 6), (X,)),
    "select-rank1_to_rank0": (lambda x: x[-2], (torch.randn(5),)),
    "select-twice": (lambda x: x[1][-1], (X,)),
    "select-bool_data": (lambda x: x[:, 0], (torch.rand(3, 2) > 0.5,)),
    # ---------------------------------------------------------------- diagonal
    "diagonal-main": (lambda x: torch.diagonal(x), (torch.randn(4, 6),)),
    "diagonal-positive_offset": (lambda x: torch.diagonal(x, 2), (torch.randn(4, 6),)),
    "diagonal-negative_offset": (lambda x: torch.diagonal(x, -3), (torch.randn(4, 6),)),
    "diagonal-swapped_dims": (lambda x: torch.diagonal(x, 1, 1, 0), (torch.randn(4, 6),)),
    "diagonal-rank3_last_two": (lambda x: torch.diagonal(x, 0, -2, -1), (X,)),
    "diagonal-rank3_outer": (lambda x: torch.diagonal(x, -1, 2, 0), (X,)),
    "diagonal-rank4": (lambda x: torch.diagonal(x, 1, 3, 1), (torch.randn(2, 3, 4, 5),)),
    "diagonal-empty_offset_too_big": (lambda x: torch.diagonal(x, 6), (torch.randn(4, 6),)),
    "diagonal-empty_negative": (lambda x: torch.diagonal(x, -9, 0, 2), (X,)),
    "diagonal-int_data": (lambda x: x.diagonal(-1), (torch.arange(12).view(3, 4),)),
    "diagonal-1xN": (lambda x: torch.diagonal(x, 0), (torch.randn(1, 5),)),
    # ---------------------------------------------------------------- fill, zero, copy
    "fill-scalar": (lambda x: x.clone().fill_(2.5), (X,)),
    "fill-int_tensor_float_value": (lambda x: x.clone().fill_(3.7), (torch.arange(4),)),
    "fill-0d_tensor_value": (lambda x, v: x.clone().fill_(v), (X, torch.tensor(-1.25))),
    "zero-inplace": (lambda x: x.clone().zero_(), (torch.arange(6).view(2, 3),)),
    "copy-broadcast": (lambda x, y: x.clone().copy_(y), (X, torch.randn(7))),
    "copy-dtype_change": (lambda x, y: x.clone().copy_(y), (X, torch.randint(0, 9, (4, 1)))),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_slicing_family(case):
    fn, args = CASES[case]
    check(fn, *args)


def test_narrow_with_runtime_start(capture):
    """``narrow(dim, start_tensor, length)``: the start is read at run time (dyn_slice),
    negative counted from the end (torch.export: through t2n::narrow, whose shape needs no
    start, t2n/capture/leaf_ops.py)."""

    def fn(x, s):
        return x.narrow(1, s, 3)

    x = torch.randn(2, 7)
    check(fn, x, torch.tensor(2), more=[(x, torch.tensor(-4)), (x, torch.tensor(0))],
          capture=capture)
    check(lambda x, s: torch.narrow(x, dim=-1, start=s, length=0), x, torch.tensor(3),
          capture=capture)  # zero length, by keywords


def test_narrow_with_runtime_start_on_a_dynamic_axis(capture):
    """A runtime start on a dynamic axis, a length computed from its size: one archive
    for every size and start (a negative start counted from the end at run time)."""

    def fn(x, s):
        return x.narrow(1, s, x.size(1) - 3)

    x = torch.randn(2, 7)
    check(fn, x, torch.tensor(1), dynamic_axes={"input_0": {1: "N"}}, capture=capture,
          more=[(torch.randn(2, 10), torch.tensor(-7)), (torch.randn(2, 4), torch.tensor(0))])


def test_slices_follow_a_dynamic_axis():
    def fn(x):
        return x[:, 1:], x[:, ::2], x[:, -2], x.narrow(1, -3, 2)

    x = torch.randn(5, 5)
    check(fn, x, dynamic_axes={"input_0": {1: "N"}}, more=[(torch.randn(5, 8),)])


def test_diagonal_of_two_equal_dynamic_axes():
    check(lambda x: torch.diagonal(x, 0, -2, -1), torch.randn(2, 4, 4),
          dynamic_axes={"input_0": {1: "S", 2: "S"}}, more=[(torch.randn(2, 6, 6),)])


def test_diagonal_of_unrelated_dynamic_axes_is_refused():
    import os
    import tempfile

    import t2n

    with tempfile.TemporaryDirectory() as d, pytest.raises(t2n.errors.T2NError,
                                                           match="diagonal length"):
        t2n.export(_Diag(), (torch.randn(3, 4),), os.path.join(d, "m.nnef"),
                   dynamic_axes={"input_0": {0: "A", 1: "B"}})


class _Diag(torch.nn.Module):
    def forward(self, x):
        return torch.diagonal(x)


def test_slice_with_negative_step_cannot_be_traced():
    # PyTorch itself rejects negative steps; nothing reaches t2n
    with pytest.raises(ValueError):
        torch.randn(4)[::-1]
    refuses(lambda x: torch.ops.aten.slice(x, 0, 0, 4, 0), torch.randn(4), match="step")


@settings(max_examples=20, deadline=None, derandomize=True)
@given(st.data())
def test_property_slice_and_diagonal(data):
    rank = data.draw(st.integers(2, 4))
    shape = data.draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank))
    dim = data.draw(st.integers(-rank, rank - 1))
    start = data.draw(st.one_of(st.none(), st.integers(-8, 8)))
    end = data.draw(st.one_of(st.none(), st.integers(-8, 8)))
    step = data.draw(st.integers(1, 4))
    offset = data.draw(st.integers(-6, 6))
    d1, d2 = data.draw(st.lists(st.integers(-rank, rank - 1), min_size=2, max_size=2,
                                unique_by=lambda d: d % rank))

    def fn(x):
        sl = [slice(None)] * rank
        sl[dim] = slice(start, end, step)
        return x[tuple(sl)], torch.diagonal(x, offset, d1, d2)

    check(fn, torch.randn(shape))


class _SamePad(torch.nn.Module):
    """wav2vec2's positional convolution: an even kernel padded by k/2 gives one frame too
    many, dropped with [..., :-1], then added to the input and split into heads."""

    def __init__(self):
        super().__init__()
        self.down = torch.nn.Conv1d(2, 8, 10, stride=5)
        self.conv = torch.nn.Conv1d(8, 8, 4, padding=2, groups=2)

    def forward(self, x):
        h = self.down(x)
        y = h + self.conv(h)[:, :, :-1]
        b, c, n = y.shape
        return y.transpose(1, 2).reshape(b, n, 2, 4).transpose(1, 2)


def test_negative_end_on_dynamic_axis_keeps_the_length_tract_can_follow():
    # a max(0, n - 1) end made tract fail to load the archive ("Can't divide ...")
    r = assert_exports(_SamePad().eval(), (torch.randn(2, 2, 60),), input_names=["x"],
                       dynamic_axes={"x": {0: "B", 2: "N"}},
                       more_args=[(torch.randn(1, 2, 33),), (torch.randn(3, 2, 101),)])
    assert "Max" not in str(r.outputs[0].shape) and "max" not in str(r.outputs[0].shape)


def test_negative_end_with_a_start_keeps_pytorch_clamping():
    # x[1:-1] of a 1-element axis is empty in PyTorch: the clamp stays when start > 0
    assert_exports(Fn(lambda x: x[1:-1] * 2), (torch.randn(5),), input_names=["x"],
                   dynamic_axes={"x": {0: "B"}}, more_args=[(torch.randn(1),),
                                                            (torch.randn(2),)])


class _WindowThenNew(torch.nn.Module):
    """A conv window followed by S new columns, then the last S of the convolution over
    both (how a causal depthwise conv continues from its cached window)."""

    def forward(self, window, x):
        s = x.shape[2]
        full = torch.cat([window, x], dim=-1)
        y = torch.nn.functional.conv1d(full, torch.ones(4, 1, 3), padding=2, groups=4)
        return y[:, :, :full.shape[2]][:, :, -s:], full[..., -window.shape[2]:]


def test_slice_from_the_end_by_a_dynamic_size():
    """``y[..., -S:]`` with S a dynamic axis counts from the end (it once began at 0)."""
    assert_exports(_WindowThenNew(), (torch.randn(1, 4, 3), torch.randn(1, 4, 5)),
                   input_names=["window", "x"], dynamic_axes={"x": {2: "S"}},
                   more_args=[(torch.randn(1, 4, 3), torch.randn(1, 4, 1)),
                              (torch.randn(1, 4, 3), torch.randn(1, 4, 9))])
