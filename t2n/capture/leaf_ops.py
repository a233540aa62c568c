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

The same mode mends one call whose shape torch.export records wrongly:
``aten::index(x, [i, j])`` whose last index tensor is 0-d while another is not. torch's
fake kernel (``meta_index_Tensor``, torch 2.13) keeps a CPU scalar index unbroadcast and
takes the last index's shape as the result's (``()`` where eager gives ``i``'s), so every
shape derived from it would be wrong; :func:`_index_args` gives such 0-d indices the shape
``[1]``, which broadcasts to the same shape as ``()`` beside an index of rank >= 1.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

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
    form is left to torch) and ``max_pool1d`` to their ``t2n::`` leaves while active."""

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
        if func in _INDEX and not kwargs:
            args = _index_args(*args)
        return func(*args, **kwargs)


_INDEX = (torch.ops.aten.index, torch.ops.aten.index.Tensor)


def _index_args(self, indices=None, *rest) -> tuple:
    """``aten::index``'s arguments with each 0-d integer index tensor as shape ``[1]`` when
    the last index is one and another index has a rank (the case torch's fake kernel gets
    wrong; the broadcast shape, hence the result, is eager's either way)."""
    given = [i for i in indices or () if i is not None]
    if not given or not all(isinstance(i, torch.Tensor) for i in given) \
            or given[-1].dim() != 0 or given[-1].dtype == torch.bool \
            or all(i.dim() == 0 for i in given):
        return (self, indices, *rest)
    return (self, [i.reshape(1) if i is not None and i.dim() == 0 and i.dtype != torch.bool
                   else i for i in indices], *rest)


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
