"""ATen ops kept as leaves of a ``torch.export`` capture, so that dynamic axes through them
stay dynamic: ``lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu`` (what ``nn.LSTM``/``GRU``/
``RNN`` call) and ``max_pool1d``.

``torch.export`` records these ops as one node each, but computes the node's output
shapes by running the op's C++ composite kernel on fake tensors: a loop over the time
steps for the recurrent ops, integer size arithmetic for ``max_pool1d``, either of which
fixes the axis to the example's size ("the code needs a fixed size"). t2n maps each op
whatever the size (a recurrent layer is one ``tract_core_scan``: t2n/mappings/recurrent.py),
so it needs only their output shapes, which follow from the arguments' shapes.

While a capture runs, :class:`Leaves` (a ``TorchFunctionMode``: the user's model and
torch's modules are left as they are) routes each call of ``torch._VF.lstm`` ... (the
unpacked form, the one ``nn.LSTM.forward`` makes) and ``torch.max_pool1d`` to the ``t2n::``
op of the same name and schema. Its fake kernel states the output shapes symbolically; its
real kernel is the ATen op, so the exported program still runs as the model does. The FX
walker maps ``t2n::lstm`` by the mapping of ``aten::lstm`` (same arguments, same order).

The same mode routes ``narrow`` with a start tensor to ``t2n::narrow`` (aten's kernel
reads the start with ``.item()`` inside its one node: an unbacked size no output of the
node holds, which torch.export refuses) and ``one_hot`` without a class count to
``t2n::one_hot`` (aten's kernel needs ``max(x) + 1`` as a Python int; the leaf's class
axis is a size of its own that the data decides), and hands advanced-indexing calls to
:mod:`t2n.capture.index_calls`, which rewrites those torch's fake kernel gets wrong.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from t2n.capture import index_calls

_VF = torch._C._VariableFunctions
_ARGS = ("bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, "
         "bool batch_first")
_LIB = torch.library.Library("t2n", "FRAGMENT")
_LIB.define(f"lstm(Tensor input, Tensor[] hx, Tensor[] params, {_ARGS}) "
            "-> (Tensor, Tensor, Tensor)")
for _name in ("gru", "rnn_tanh", "rnn_relu"):
    _LIB.define(f"{_name}(Tensor input, Tensor hx, Tensor[] params, {_ARGS}) "
                "-> (Tensor, Tensor)")
_LIB.define("max_pool1d(Tensor self, int[1] kernel_size, int[1] stride, int[1] padding, "
            "int[1] dilation, bool ceil_mode) -> Tensor")


def _output(input, state, bidirectional):
    """The sequence output: the input's shape with the features replaced by the last
    layer's hidden size, per direction (the state's last axis; LSTM: the projection's)."""
    return input.new_empty((*input.shape[:-1], (2 if bidirectional else 1) * state.shape[-1]))


def _register_recurrent(name: str, aten_op) -> None:
    def real(input, hx, params, *flags):
        return tuple(aten_op(input, hx, params, *flags))

    def fake(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
             batch_first):
        states = hx if isinstance(hx, (list, tuple)) else [hx]
        return (_output(input, states[0], bidirectional),
                *(s.new_empty(s.shape) for s in states))

    _LIB.impl(name, real, "CompositeExplicitAutograd")
    torch.library.register_fake(f"t2n::{name}", fake, lib=_LIB)


for _name in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
    _register_recurrent(_name, getattr(_VF, _name))


def _max_pool1d_real(x, kernel_size, stride, padding, dilation, ceil_mode):
    return _VF.max_pool1d(x, kernel_size, stride, padding, dilation, ceil_mode)


def _max_pool1d_fake(x, kernel_size, stride, padding, dilation, ceil_mode):
    # max_pool2d_with_indices' meta kernel computes the pooled length symbolically
    out, _ = torch.ops.aten.max_pool2d_with_indices(
        x.unsqueeze(-2), [1, kernel_size[0]], [1, (stride or kernel_size)[0]],
        [0, padding[0]], [1, dilation[0]], ceil_mode)
    return out.squeeze(-2).clone()


_LIB.impl("max_pool1d", _max_pool1d_real, "CompositeExplicitAutograd")
torch.library.register_fake("t2n::max_pool1d", _max_pool1d_fake, lib=_LIB)


# narrow with a start tensor: aten's kernel reads the start with .item() inside its one
# node, an unbacked size no output of the node holds (PendingUnbackedSymbolNotFound); the
# result's shape needs only the length
_LIB.define("narrow(Tensor self, int dim, Tensor start, SymInt length) -> Tensor")


def _narrow_real(x, dim, start, length):
    return torch.narrow(x, dim, start, length).clone()  # an op's output owns its storage


def _narrow_fake(x, dim, start, length):
    shape = list(x.shape)
    shape[dim % x.dim()] = length
    return x.new_empty(shape)


_LIB.impl("narrow", _narrow_real, "CompositeExplicitAutograd")
torch.library.register_fake("t2n::narrow", _narrow_fake, lib=_LIB)


def _narrow_args(x, dim, start, length):
    """``narrow``'s arguments when ``start`` is a tensor (the ``narrow.Tensor`` overload),
    else None."""
    return (x, dim, start, length) if isinstance(start, torch.Tensor) else None


# one_hot without num_classes: aten's kernel reads max(x) + 1 with .item() and then needs
# it as a Python int; the leaf's result has a size of its own that only the data decides
_LIB.define("one_hot(Tensor self, int num_classes=-1) -> Tensor")


def _one_hot_real(x, num_classes=-1):
    return torch.nn.functional.one_hot(x, num_classes)


def _one_hot_fake(x, num_classes=-1):
    classes = torch.library.get_ctx().new_dynamic_size() if num_classes < 0 else num_classes
    return x.new_empty((*x.shape, classes))


_LIB.impl("one_hot", _one_hot_real, "CompositeExplicitAutograd")
torch.library.register_fake("t2n::one_hot", _one_hot_fake, lib=_LIB)


def _one_hot_args(x, num_classes=-1):
    """``one_hot``'s arguments when the class count is left to the data, else None."""
    return (x, num_classes) if num_classes < 0 else None


def _pool_args(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """``max_pool1d``'s arguments in schema order, each int list as a list (``F``'s
    ``stride=None``, the kernel size, as aten's ``[]``); None with ``return_indices``."""
    def ints(v):
        return [] if v is None else [v] if isinstance(v, int) else list(v)
    if return_indices:
        return None
    return (x, ints(kernel_size), ints(stride), ints(padding), ints(dilation),
            bool(ceil_mode))


class Leaves(TorchFunctionMode):
    """Route the recurrent ops (their unpacked form; the packed ``data, batch_sizes``
    form is left to torch), ``max_pool1d``, ``narrow`` with a start tensor and ``one_hot``
    without a class count to their ``t2n::`` leaves while active, and advanced indexing through
    :mod:`t2n.capture.index_calls`."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaf = _RECURRENT.get(func)
        if leaf is not None and not kwargs and _unpacked(func, args):
            return leaf(*args)
        if func in _MAX_POOL1D and isinstance(args[0] if args else None, torch.Tensor) \
                and args[0].dim() in (2, 3):
            pool = _pool_args(*args, **kwargs)
            if pool is not None:
                return torch.ops.t2n.max_pool1d(*pool)
        if func in _NARROW and isinstance(args[0] if args else None, torch.Tensor):
            narrow = _narrow_args(*args, **kwargs)
            if narrow is not None:
                return torch.ops.t2n.narrow(*narrow)
        if func is torch.nn.functional.one_hot and isinstance(args[0] if args else None,
                                                             torch.Tensor):
            one_hot = _one_hot_args(*args, **kwargs)
            if one_hot is not None:
                return torch.ops.t2n.one_hot(*one_hot)
        if func in _INDEX and not kwargs:
            args = index_calls.index_args(*args)
        elif func is torch.Tensor.__getitem__ and len(args) == 2 and not kwargs:
            args = index_calls.getitem_args(*args)
        return func(*args, **kwargs)


_INDEX = (torch.ops.aten.index, torch.ops.aten.index.Tensor)
_NARROW = (torch.narrow, torch.Tensor.narrow)


# F.max_pool1d reaches a TorchFunctionMode as itself (its own torch-function dispatch),
# and the torch function it calls then runs with the mode off
_MAX_POOL1D = (_VF.max_pool1d, torch.nn.functional.max_pool1d,
               torch.nn.functional._max_pool1d)


_RECURRENT = {getattr(_VF, n): getattr(torch.ops.t2n, n)
              for n in ("lstm", "gru", "rnn_tanh", "rnn_relu")}


def _unpacked(func, args) -> bool:
    """``lstm.input(input, hx[], params[], ...)``, ``gru.input(input, hx, params[], ...)``:
    not the ``.data`` overloads, whose second argument is the packed batch sizes."""
    if len(args) != 9:
        return False
    if func is _VF.lstm:
        return isinstance(args[1], (list, tuple))
    return isinstance(args[1], torch.Tensor) and isinstance(args[2], (list, tuple))
