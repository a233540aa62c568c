"""Constant folding in the walker: aten ops whose inputs are all known run in torch at export
time. Sizes read in Python reach the trace as ``prim::NumToTensor`` and the walker keeps them
as numbers; a folded op whose schema wants a Tensor there gets the tensor back (Swin's
``W % window`` padding, ``torch.as_tensor(size).detach()``)."""

import pytest
import torch
import torch.nn.functional as F

from t2n.testing import FunctionModule, assert_exports

pytestmark = pytest.mark.filterwarnings("ignore:data-dependent control flow")


def window_pad(x):  # torchvision's shifted_window_attention: pad to a multiple of the window
    w = x.shape[-1]
    pad = (4 - w % 4) % 4
    return F.pad(x, (0, pad))


def detached_size(x):
    n = torch.as_tensor(x.shape[0]).detach()
    return x * n


def float_size_math(x):  # a size in float arithmetic (NumToTensor -> div -> float ops)
    scale = torch.sqrt(torch.as_tensor(x.shape[-1], dtype=torch.float32)) / 3
    return x * scale.detach()


def size_stack(x):  # several sizes into one tensor (aten::stack of NumToTensor values)
    sizes = torch.stack([torch.as_tensor(x.shape[1]), torch.as_tensor(x.shape[2])])
    return x + sizes.float().sum().remainder(5)


@pytest.mark.parametrize("fn", [window_pad, detached_size, float_size_math, size_stack],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("width", [6, 8])
def test_size_numbers_fold_where_tensors_are_expected(fn, width):
    assert_exports(FunctionModule(fn), (torch.randn(2, 3, width),))


@pytest.mark.parametrize("fn,axis", [(window_pad, 0), (detached_size, 0),
                                     (float_size_math, 2), (size_stack, 0)],
                         ids=["window_pad", "detached_size", "float_size_math", "size_stack"])
def test_same_models_with_a_dynamic_axis(fn, axis, capture):
    """A dynamic axis elsewhere keeps the folding; a size of the dynamic axis itself is
    computed in the graph instead (float_size_math on the last axis; under torch.export
    ``torch.as_tensor`` of a size is routed to ``scalar_tensor``, t2n/capture/leaf_ops.py)."""
    shape = [2, 3, 6]
    others = []
    for n in (5, 7):
        s = list(shape)
        s[axis] = n
        others.append((torch.randn(*s),))
    assert_exports(FunctionModule(fn), (torch.randn(*shape),), input_names=["x"],
                   dynamic_axes={"x": {axis: "N"}}, more_args=others, capture=capture)


class CloneThenZeroSlice(torch.nn.Module):
    """torchvision's Swin v2 attention: the k third of the qkv bias is zeroed on a clone."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(6, 18)
        torch.nn.init.normal_(self.qkv.bias)

    def forward(self, x):
        bias = self.qkv.bias.clone()
        n = bias.numel() // 3
        bias[n:2 * n].zero_()
        return F.linear(x, self.qkv.weight, bias)


class UseWriteUse(torch.nn.Module):
    """A folded tensor used, then written through a view, then used again: each use sees
    the values of its moment, and the model's own buffer is never written."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(12.0).reshape(3, 4))

    def forward(self, x):
        t = self.table * 2
        before = x + t
        t[1].mul_(-1)
        t[:, 0] = 7.0
        self.table[0].add_(0)  # an in-place op on the buffer itself, value unchanged
        return before, x * t, self.table.sum() + x


def test_in_place_write_into_a_folded_clone_reaches_its_base():
    m = CloneThenZeroSlice()
    saved = m.qkv.bias.detach().clone()
    assert_exports(m, (torch.randn(2, 6),))
    assert torch.equal(m.qkv.bias.detach(), saved)


def test_folded_uses_before_and_after_a_write_keep_their_values():
    m = UseWriteUse()
    assert_exports(m, (torch.randn(3, 4),))
    assert torch.equal(m.table, torch.arange(12.0).reshape(3, 4))


def test_a_constant_is_never_taken_for_a_freed_tensor_with_the_same_id():
    # the walker finds the graph constant of a torch tensor by id(); a freed temporary's id
    # is reused by the next allocation, so GraniteMoeHybrid's conv weight once got the
    # constant of a [2, 80, 4] cache tensor freed before it (an internal error, or a wrong
    # weight). Keyed tensors are kept alive, and a key whose tensor is another one misses.
    import weakref

    from t2n.session import ExportSession
    from t2n.walk.builder import Graph
    from t2n.walk.walker import Walker

    w = Walker(Graph(ExportSession()), None, {})
    first = torch.randn(2, 80, 4)
    handle = w._tensor_arg(first, None)
    alive = weakref.ref(first)
    del first
    assert alive() is not None  # its id cannot be handed to another tensor
    other = torch.randn(80, 1, 4)
    w._const_handles[id(other)] = handle  # as if `other` had been given the freed id
    got = w._tensor_arg(other, None)
    assert got is not handle and tuple(got.shape) == (80, 1, 4), got
