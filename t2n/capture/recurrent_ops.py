"""``nn.LSTM``/``GRU``/``RNN`` as leaves of a ``torch.export`` capture, so their time axis
stays dynamic.

``torch.export`` records ``aten::lstm`` (and ``gru``, ``rnn_tanh``, ``rnn_relu``) as one
node, but computes the node's output shapes by running the op's ATen decomposition on fake
tensors: a Python loop over the time steps, which fixes the time axis to the example's
length ("the code needs a fixed size"). t2n maps each of these ops to one
``tract_core_scan`` whatever the length (t2n/mappings/recurrent.py), so it needs only their
output shapes, which follow from the arguments' shapes.

While a capture runs, :class:`RecurrentLeaves` (a ``TorchFunctionMode``: the user's model
and torch's modules are left as they are) routes every ``torch._VF.lstm/gru/rnn_*`` call
of the unpacked form, the one ``nn.LSTM.forward`` and friends make, to the ``t2n::`` op of
the same name and schema. Its fake kernel states the output shapes symbolically; its real
kernel is the ATen op, so the exported program still runs as the model does. The FX walker
maps ``t2n::lstm`` by the mapping of ``aten::lstm`` (same arguments, same order).
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

_ARGS = ("bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, "
         "bool batch_first")
_LIB = torch.library.Library("t2n", "FRAGMENT")
_LIB.define(f"lstm(Tensor input, Tensor[] hx, Tensor[] params, {_ARGS}) "
            "-> (Tensor, Tensor, Tensor)")
for _name in ("gru", "rnn_tanh", "rnn_relu"):
    _LIB.define(f"{_name}(Tensor input, Tensor hx, Tensor[] params, {_ARGS}) "
                "-> (Tensor, Tensor)")


def _output(input, state, bidirectional):
    """The sequence output: the input's shape with the features replaced by the last
    layer's hidden size, per direction (the state's last axis; LSTM: the projection's)."""
    return input.new_empty((*input.shape[:-1], (2 if bidirectional else 1) * state.shape[-1]))


def _register(name: str, aten_op) -> None:
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
    _register(_name, getattr(torch._C._VariableFunctions, _name))

_LEAVES = {getattr(torch._C._VariableFunctions, n): getattr(torch.ops.t2n, n)
           for n in ("lstm", "gru", "rnn_tanh", "rnn_relu")}


class RecurrentLeaves(TorchFunctionMode):
    """Route the unpacked-form recurrent ops to their ``t2n::`` leaves while active. The
    packed form (``data, batch_sizes, ...``) is left to torch."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaf = _LEAVES.get(func)
        if leaf is not None and not kwargs and _unpacked(func, args):
            return leaf(*args)
        return func(*args, **kwargs)


def _unpacked(func, args) -> bool:
    """``lstm.input(input, hx[], params[], ...)``, ``gru.input(input, hx, params[], ...)``:
    not the ``.data`` overloads, whose second argument is the packed batch sizes."""
    if len(args) != 9:
        return False
    if func is torch._C._VariableFunctions.lstm:
        return isinstance(args[1], (list, tuple))
    return isinstance(args[1], torch.Tensor) and isinstance(args[2], (list, tuple))
