"""ATen ops kept as leaves of a ``torch.export`` capture, so that dynamic axes through them
stay dynamic: ``lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu`` (what ``nn.LSTM``/``GRU``/
``RNN`` call), ``max_pool1d`` and ``_pad_circular`` (``F.pad(mode="circular")``).

``torch.export`` records these ops as one node each, but computes the node's output
shapes by running the op's C++ composite kernel on fake tensors: a loop over the time
steps for the recurrent ops, integer size arithmetic for ``max_pool1d``, a branch on the
sign of each amount for circular padding (an amount ``(3 - S % 3) % 3``, 0 at the
example, pins ``S`` to multiples of 3), any of which fixes the axis to the example's sizes
("the code needs a fixed size"). t2n maps each op
whatever the size (a recurrent layer is one ``tract_core_scan``: t2n/mappings/recurrent.py),
so it needs only their output shapes, which follow from the arguments' shapes.

While a capture runs, :class:`Leaves` (a ``TorchFunctionMode``: the user's model and
torch's modules are left as they are) routes each call of ``torch._VF.lstm`` ... (the
unpacked form, the one ``nn.LSTM.forward`` makes) and ``torch.max_pool1d`` to the ``t2n::``
op of the same name and schema (``F.pad`` and ``torch._C._nn.pad`` with
``mode="circular"`` to ``t2n::_pad_circular``). Its fake kernel states the output shapes
symbolically; its real kernel is the ATen op, so the exported program still runs as the
model does. The FX walker maps ``t2n::lstm`` by the mapping of ``aten::lstm`` (same
arguments, same order).

A size made a tensor (``torch.as_tensor(x.shape[0])``, ``torch.tensor(x.shape[-1],
dtype=torch.float32)``) goes the same way: torch's factory reads the symbolic size as a
number, fixing the axis; routed to ``aten::scalar_tensor``, which takes a symbolic scalar,
the size stays an expression of the axis in the graph (what the trace records too).
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
_LIB.define("_pad_circular(Tensor self, SymInt[] pad) -> Tensor")


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


def _pad_circular_real(x, pad):
    return torch._C._nn._pad_circular(x, pad)


def _pad_circular_fake(x, pad):
    """Each padded axis grows by its two amounts (a negative one crops); as aten's kernel,
    an amount may wrap around the axis at most once."""
    shape = list(x.shape)
    for i in range(len(pad) // 2):
        axis, before, after = x.dim() - 1 - i, pad[2 * i], pad[2 * i + 1]
        torch._check(before <= shape[axis] and after <= shape[axis],
                     lambda: "Padding value causes wrapping around more than once.")
        shape[axis] = shape[axis] + before + after
    return x.new_empty(shape)


_LIB.impl("_pad_circular", _pad_circular_real, "CompositeExplicitAutograd")
torch.library.register_fake("t2n::_pad_circular", _pad_circular_fake, lib=_LIB)


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
    form is left to torch), ``max_pool1d`` and circular padding to their ``t2n::`` leaves,
    and a symbolic size made a tensor to ``scalar_tensor``, while active."""

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
        if func in _FACTORIES and args and _symbolic_scalar(args[0]) \
                and set(kwargs) <= {"dtype", "device"} and len(args) == 1:
            return torch.scalar_tensor(args[0], dtype=kwargs.get("dtype") or _dtype(args[0]),
                                       device=kwargs.get("device"))
        if func in _PAD and _circular(*args, **kwargs):
            return torch.ops.t2n._pad_circular(args[0], list(args[1]))
        return func(*args, **kwargs)


# F.max_pool1d reaches a TorchFunctionMode as itself (its own torch-function dispatch),
# and the torch function it calls then runs with the mode off
_MAX_POOL1D = (_VF.max_pool1d, torch.nn.functional.max_pool1d,
               torch.nn.functional._max_pool1d)


_PAD = (torch.nn.functional.pad, torch._C._nn.pad)
_FACTORIES = (torch.as_tensor, torch.tensor)


def _symbolic_scalar(v) -> bool:
    return isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _dtype(v):
    """The dtype ``torch.tensor`` gives a Python scalar of ``v``'s kind."""
    if isinstance(v, torch.SymBool):
        return torch.bool
    return torch.int64 if isinstance(v, torch.SymInt) else torch.get_default_dtype()


def _circular(x=None, pad=(), mode="constant", value=None) -> bool:
    """``pad(x, pad, mode, value)`` pads the tensor ``x`` circularly."""
    return mode == "circular" and isinstance(x, torch.Tensor) and value is None \
        and 0 < len(pad) <= 2 * x.dim() and len(pad) % 2 == 0


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
