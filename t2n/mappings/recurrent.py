"""Recurrent layers: ``lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu`` (what ``nn.LSTM``,
``nn.GRU`` and ``nn.RNN`` trace to), as ONE ``tract_core_scan`` per layer (an f32 GRU layer:
tract's whole-sequence ``tract_core_gru_seq`` per direction).

The layers themselves (input projection before the loop, one scan per layer with the
directions side by side, tract's fused cell epilogues) are t2n/mappings/helpers/recurrence.py,
which t2n/mappings/quantized.py's dynamically quantized layers share. So the op count and the
archive size do not depend on the sequence length, and the time axis may be a dynamic symbol.

Packed sequences (the ``.data`` overloads) arrive as :class:`PackedData`: the padded tensor,
its lengths and a step mask; the loop then keeps each sequence's state past its length
(for the reverse direction: until its own last step) and writes zeros there. The cells
(``lstm_cell`` ...) are single steps with the same epilogues.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.recurrence import (GRU_ORDER, LSTM_ORDER, gate_rows, gru_step,
                                            layers, lstm_step)
from t2n.walk.builder import Tensor
from t2n.errors import ConversionError
from t2n.walk.registry import aten, own_shapes

_PACKED_CONSUMERS = frozenset({"lstm", "gru", "rnn_tanh", "rnn_relu", "_pad_packed_sequence"})


class PackedData:
    """What ``_pack_padded_sequence`` returns as ``data``: the padded tensor itself (layout
    ``batch_first``), the lengths in its batch order and a [T, B, 1] bool step mask.

    PyTorch's packed ``data`` is ragged ([sum(lengths), F]); the recurrent mappings read
    the padded form instead and ``_pad_packed_sequence`` turns it back into a tensor.
    ``zero_padded``: the steps past each length already hold zeros (an RNN's output)."""

    def __init__(self, padded, lengths, mask, batch_first, root=None, zero_padded=False):
        self.padded = padded
        self.lengths = lengths
        self.mask = mask
        self.batch_first = batch_first
        self.root = root if root is not None else self
        self.zero_padded = zero_padded

    def t2n_aten(self, g, name, inputs):
        """The walker's hook for aten ops reading this value: only the RNNs and
        pad_packed_sequence can."""
        if name in _PACKED_CONSUMERS:
            return None
        if name in ("quantized_lstm", "quantized_gru"):
            raise ConversionError(f"aten::{name}", "a packed sequence into a dynamically "
                                  "quantized LSTM/GRU is not supported (its per-step "
                                  "quantization ranges cover the active sequences only)")
        raise ConversionError(f"aten::{name}", "reads the data of a packed sequence; t2n "
                              "converts pack_padded_sequence -> LSTM/GRU/RNN -> "
                              "pad_packed_sequence (apply other ops to the padded tensor)")


class PackedBatchSizes:
    """``batch_sizes`` of a packed sequence. PyTorch's own code reads its first entry (the
    batch size: every length is >= 1) and its length (the longest length)."""

    def __init__(self, data: PackedData, batch, steps):
        self.data = data
        self.batch = batch
        self.steps = steps
        self._longest = None

    def t2n_aten(self, g, name, inputs):
        if name in _PACKED_CONSUMERS:
            return None
        if name == "select" and inputs[1:] == [0, 0]:
            return [self.batch]
        if name in ("size", "sym_size") and inputs[1:] in ([0], [-1]):
            if self._longest is None:
                import sympy

                n = g.count("longest symbols")
                self._longest = _MaxLength(self.data, sympy.Symbol(f"t2n_longest_{n}",
                                                                   integer=True,
                                                                   positive=True))
            return [self._longest]
        raise ConversionError(f"aten::{name}", "reads the batch_sizes of a packed sequence "
                              "(only batch_sizes[0] and batch_sizes.size(0) are supported)")


# ---------------------------------------------------------------------------- aten entries
@aten("lstm")
@own_shapes
def lstm(g, input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
         batch_first=False):
    """``lstm.input(input, hx[], params[], ...)`` or ``lstm.data(data, batch_sizes, hx[],
    params[], ...)`` (packed; then the last argument is ``bidirectional`` shifted)."""
    if isinstance(input, PackedData):
        data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, \
            bidirectional = input, hx, params, has_biases, num_layers, dropout, train, \
            bidirectional, batch_first
        return _packed(g, "lstm", data, batch_sizes, list(hx), params, has_biases,
                       num_layers, dropout, train, bidirectional)
    if not isinstance(hx, list):
        raise g.error("batch_sizes: a packed sequence must come from pack_padded_sequence "
                      "in the same model")
    return layers(g, "lstm", input, list(hx), params, has_biases, num_layers, dropout,
                   train, bidirectional, batch_first, None)


@aten("gru")
@own_shapes
def gru(g, input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
        batch_first=False):
    return _single_state(g, "gru", input, hx, params, has_biases, num_layers, dropout,
                         train, bidirectional, batch_first)


@aten("rnn_tanh")
@own_shapes
def rnn_tanh(g, input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
             batch_first=False):
    return _single_state(g, "rnn_tanh", input, hx, params, has_biases, num_layers, dropout,
                         train, bidirectional, batch_first)


@aten("rnn_relu")
@own_shapes
def rnn_relu(g, input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
             batch_first=False):
    return _single_state(g, "rnn_relu", input, hx, params, has_biases, num_layers, dropout,
                         train, bidirectional, batch_first)


def _single_state(g, kind, input, hx, params, has_biases, num_layers, dropout, train,
                  bidirectional, batch_first):
    """``gru/rnn_*.input(input, hx, params[], ..., batch_first)`` or ``.data(data,
    batch_sizes, hx, params[], ..., bidirectional)``."""
    if isinstance(input, PackedData):
        # .data(data, batch_sizes, hx, params[], has_biases, num_layers, dropout, train,
        #       bidirectional): every argument sits one place later than in .input
        return _packed(g, kind, input, hx, [params], has_biases, num_layers, dropout, train,
                       bidirectional, batch_first)
    if isinstance(params, Tensor) or not isinstance(params, list):
        raise g.error("batch_sizes: a packed sequence must come from pack_padded_sequence "
                      "in the same model")
    return layers(g, kind, input, [hx], params, has_biases, num_layers, dropout, train,
                   bidirectional, batch_first, None)


def _packed(g, kind, data, batch_sizes, hx, params, has_biases, num_layers, dropout, train,
            bidirectional):
    if not isinstance(batch_sizes, PackedBatchSizes) or batch_sizes.data is not data.root:
        raise g.error("batch_sizes: must be the batch_sizes of the same packed sequence")
    out = layers(g, kind, data.padded, hx, params, has_biases, num_layers, dropout, train,
                  bidirectional, data.batch_first, data)
    return (PackedData(out[0], data.lengths, data.mask, data.batch_first, data.root,
                       zero_padded=True),) + tuple(out[1:])


# ---------------------------------------------------------------------------- cells
@aten("lstm_cell")
def lstm_cell(g, input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One LSTM step (``nn.LSTMCell``): ``(h', c')``; 1-D (unbatched) input too."""
    h, c = hx
    hidden = w_ih.shape[0] // 4
    pre = _cell_preact(g, input, h, w_ih, w_hh, b_ih, b_hh, LSTM_ORDER)
    c = g.cast(c, pre.dtype)
    if input.rank == 1:
        pre, c = g.unsqueeze(pre, [0]), g.unsqueeze(c, [0])
    h_new, c_new = lstm_step(g, pre, c, hidden)
    if input.rank == 1:
        h_new, c_new = g.squeeze(h_new, [0]), g.squeeze(c_new, [0])
    return h_new, c_new


@aten("gru_cell")
def gru_cell(g, input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One GRU step (``nn.GRUCell``), the reset gate applied after the hidden product."""
    hidden = w_ih.shape[0] // 3
    order = GRU_ORDER
    xh = _affine(g, input, w_ih, b_ih, order)
    rh = _affine(g, g.cast(hx, xh.dtype), w_hh, b_hh, order)
    h = g.cast(hx, xh.dtype)
    if input.rank == 1:
        xh, rh, h = (g.unsqueeze(t, [0]) for t in (xh, rh, h))
    out = gru_step(g, xh, rh, h, hidden)
    return g.squeeze(out, [0]) if input.rank == 1 else out


@aten("rnn_tanh_cell")
def rnn_tanh_cell(g, input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    pre = _cell_preact(g, input, hx, w_ih, w_hh, b_ih, b_hh, (0,))
    return g.op("tanh", pre)


@aten("rnn_relu_cell")
def rnn_relu_cell(g, input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    pre = _cell_preact(g, input, hx, w_ih, w_hh, b_ih, b_hh, (0,))
    return g.op("relu", pre)


def _cell_preact(g, x, h, w_ih, w_hh, b_ih, b_hh, order):
    pre = _affine(g, x, w_ih, b_ih, order)
    return g.binary("add", pre, _affine(g, g.cast(h, pre.dtype), w_hh, b_hh, order),
                    pre.dtype)


def _affine(g, x, w, b, order):
    """``x @ w^T + b`` for a 1-D or 2-D ``x``, gate rows in ``order``."""
    if not x.dtype.is_floating_point:
        raise g.error(f"input: {x.dtype} is not a floating-point type")
    w = g.cast(gate_rows(g, w, order), x.dtype)
    x2 = g.unsqueeze(x, [0]) if x.rank == 1 else x
    y = g.op("matmul", x2, w, transposeA=False, transposeB=True,
             out_shape=[x2.shape[0], w.shape[0]], out_dtype=x.dtype)
    if b is not None:
        y = g.binary("add", y, g.cast(gate_rows(g, b, order), x.dtype), x.dtype)
    return g.squeeze(y, [0]) if x.rank == 1 else y


# ---------------------------------------------------------------------------- packed sequences
@aten("_pack_padded_sequence")
def pack_padded_sequence(g, input, lengths, batch_first):
    """``(data, batch_sizes)`` of ``nn.utils.rnn.pack_padded_sequence``, kept padded: a
    :class:`PackedData` (the padded input, the lengths, the [T, B, 1] step mask) and a
    :class:`PackedBatchSizes`. ``enforce_sorted=False`` sorts before this op, with ops t2n
    converts anyway."""
    if input.rank < 2:
        raise g.error(f"input: expected at least 2 dimensions, got {input.rank}")
    if lengths.rank != 1:
        raise g.error(f"lengths: expected a 1-D tensor, got rank {lengths.rank}")
    t_axis = 1 if batch_first else 0
    steps, batch = input.shape[t_axis], input.shape[1 - t_axis]
    lengths = g.cast(lengths, torch.int64)
    t = g.unsqueeze(g.arange(steps), [1])  # [T, 1]
    mask = g.binary("lt", t, g.unsqueeze(lengths, [0]), torch.int64, out_dtype=torch.bool)
    mask = g.unsqueeze(mask, [2])  # [T, B, 1]
    data = PackedData(input, lengths, mask, batch_first)
    return data, PackedBatchSizes(data, batch, steps)


@aten("_pad_packed_sequence")
def pad_packed_sequence(g, data, batch_sizes, batch_first, padding_value, total_length):
    """``(padded, lengths)``: the padded tensor in the requested layout, ``padding_value``
    past each length, ``total_length`` steps (PyTorch passes ``max(lengths)`` when the
    user gives none; that is a size computed at run time here)."""
    if not isinstance(data, PackedData) or not isinstance(batch_sizes, PackedBatchSizes) \
            or batch_sizes.data is not data.root:
        raise g.error("data: must be a packed sequence made by pack_padded_sequence (or an "
                      "RNN over one) in the same model")
    x = data.padded
    t_axis = 1 if data.batch_first else 0
    if not (data.zero_padded and float(padding_value) == 0.0):
        m = data.mask if t_axis == 0 else g.transpose(data.mask, [1, 0, 2])
        m = g.unsqueeze(m, list(range(3, x.rank)))  # [T, B, 1, ...] for any feature rank
        x = g.op("select", m, x, g.scalar(float(padding_value), x.dtype),
                 out_shape=x.shape, out_dtype=x.dtype)
    if bool(batch_first) != bool(data.batch_first):
        perm = list(range(x.rank))
        perm[0], perm[1] = 1, 0
        x = g.transpose(x, perm)
    t_axis = 1 if batch_first else 0
    steps = x.shape[t_axis]
    if isinstance(total_length, _MaxLength):
        if total_length.data is not data.root:
            raise g.error("total_length: the length of another packed sequence")
        longest = g.reduce("max_reduce", data.lengths, [0], keepdim=False)
        shape = list(x.shape)
        shape[t_axis] = total_length.symbol
        g.add_symbol(total_length.symbol.name)
        x = g.op("tract_core_dyn_slice", x, g.scalar(0, torch.int64), longest,
                 len=total_length.symbol, axis=t_axis, out_shape=shape, out_dtype=x.dtype)
    elif total_length != steps:
        extra = total_length - steps
        if isinstance(extra, int) and extra < 0:
            raise g.error(f"total_length: {total_length} is shorter than the padded input "
                          f"({steps} steps)")
        shape = list(x.shape)
        shape[t_axis] = extra
        pad = g.broadcast_to(g.scalar(float(padding_value), x.dtype), shape)
        x = g.concat([x, pad], t_axis)
    return x, data.lengths


class _MaxLength:
    """``batch_sizes.size(0)``: the longest length, known only at run time (a tract symbol
    bound by the ``tract_core_dyn_slice`` that cuts the padded output to it)."""

    def __init__(self, data, symbol):
        self.data = data
        self.symbol = symbol

    def __repr__(self):
        return f"max(lengths) [{self.symbol}]"
