"""Recurrent layers: ``lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu`` (what ``nn.LSTM``,
``nn.GRU`` and ``nn.RNN`` trace to), as ONE ``tract_core_scan`` per layer.

Each layer is lowered the way tract runs recurrences best:

1. the input projection of every time step, ``x @ W_ih^T + b``, is one matmul before the
   loop (both directions share it: their weights are stacked);
2. a :class:`~t2n.loops.Loop` scans that projection along the time axis, the reverse
   direction reading it from the end, and carries ``h`` (and ``c``) as states stacked on a
   leading direction axis ``[D, B, H]``; its body is one batched recurrent matmul plus
   tract's fused cell epilogue (``tract_core_lstm_epilogue``, ``tract_core_gru_epilogue``)
   for f32/f16, or the same formulas op by op otherwise;
3. the per-step outputs and the last states come out of the scan.

So the op count and the archive size do not depend on the sequence length, and the time axis
may be a dynamic symbol. Gate order: PyTorch stores LSTM gates as ``i, f, g, o`` and GRU
gates as ``r, z, n``; tract's epilogues want ``i, o, f, g`` and ``z, r, n``, so the weight
rows are permuted once at export. PyTorch's GRU applies the reset gate after the hidden
projection (``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``), which is exactly tract's GRU
epilogue. LSTM projections (``proj_size``): ``h = W_hr (o * tanh(c))``.

Packed sequences (the ``.data`` overloads) arrive as :class:`PackedData`: the padded tensor,
its lengths and a step mask; the loop then keeps each sequence's state past its length
(for the reverse direction: until its own last step) and writes zeros there. The cells
(``lstm_cell`` ...) are single steps with the same epilogues.
"""

from __future__ import annotations

import torch

from t2n.builder import Tensor
from t2n.errors import ConversionError
from t2n.loops import Loop
from t2n.registry import aten, own_shapes

# rows of PyTorch's stacked gate weights, in the order tract's epilogues read them
_LSTM_ORDER = (0, 3, 1, 2)  # i, f, g, o -> i, o, f, g
_GRU_ORDER = (1, 0, 2)  # r, z, n -> z, r, n
_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
_ORDER = {"lstm": _LSTM_ORDER, "gru": _GRU_ORDER, "rnn_tanh": (0,), "rnn_relu": (0,)}


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

                n = getattr(g, "_t2n_longest", 0) + 1
                g._t2n_longest = n
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
    return _layers(g, "lstm", input, list(hx), params, has_biases, num_layers, dropout,
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
    return _layers(g, kind, input, [hx], params, has_biases, num_layers, dropout, train,
                   bidirectional, batch_first, None)


def _packed(g, kind, data, batch_sizes, hx, params, has_biases, num_layers, dropout, train,
            bidirectional):
    if not isinstance(batch_sizes, PackedBatchSizes) or batch_sizes.data is not data.root:
        raise g.error("batch_sizes: must be the batch_sizes of the same packed sequence")
    out = _layers(g, kind, data.padded, hx, params, has_biases, num_layers, dropout, train,
                  bidirectional, data.batch_first, data)
    return (PackedData(out[0], data.lengths, data.mask, data.batch_first, data.root,
                       zero_padded=True),) + tuple(out[1:])


# ---------------------------------------------------------------------------- layers
def _layers(g, kind, x, hx, params, has_biases, num_layers, dropout, train, bidirectional,
            batch_first, packed):
    """All layers: returns (output, h_n[, c_n]) in PyTorch's layouts."""
    if train and dropout > 0 and num_layers > 1:
        raise g.error(f"train=True with dropout={dropout}: training-mode dropout between "
                      "layers is random; export the model in eval() mode")
    if not x.dtype.is_floating_point:
        raise g.error(f"input: {x.dtype} is not a floating-point type")
    dirs = 2 if bidirectional else 1
    per = len(params) // (num_layers * dirs) if params else 0
    n_bias = 2 if has_biases else 0
    if per not in (2 + n_bias, 3 + n_bias) or per * num_layers * dirs != len(params):
        raise g.error(f"params: {len(params)} tensors for {num_layers} layer(s) x {dirs} "
                      f"direction(s) with has_biases={has_biases}")
    has_proj = per == 3 + n_bias
    if has_proj and kind != "lstm":
        raise g.error("params: a projection weight is only defined for LSTM")
    unbatched = x.rank == 2
    if x.rank not in (2, 3):
        raise g.error(f"input: expected a 2-D (unbatched) or 3-D tensor, got rank {x.rank}")
    if unbatched:
        x = g.unsqueeze(x, [1])  # [T, 1, I]
        hx = [g.unsqueeze(h, [1]) if h is not None else None for h in hx]
        t_axis = 0
    else:
        t_axis = 1 if batch_first else 0
    b_axis = 1 - t_axis
    batch = x.shape[b_axis]
    mask = packed.mask if packed is not None else None  # [T, B, 1] bool, time-major

    finals: list[list[Tensor]] = [[] for _ in hx]  # per state kind: [D, B, H] per layer
    for layer in range(num_layers):
        ws = [params[(layer * dirs + d) * per:(layer * dirs + d + 1) * per]
              for d in range(dirs)]
        proj = _input_projection(g, kind, x, ws, has_biases, t_axis)
        hidden = ws[0][0].shape[0] // _GATES[kind]
        h_size = ws[0][2 + n_bias].shape[0] if has_proj else hidden
        inits = [_initial_state(g, h, layer * dirs, dirs, batch, h_size if s == 0 else hidden,
                                x.dtype) for s, h in enumerate(hx)]
        x, lasts = _recurrence(g, kind, proj, inits,
                               [w[1] for w in ws], [w[3] for w in ws] if has_biases else None,
                               [w[2 + n_bias] for w in ws] if has_proj else None,
                               hidden, t_axis, mask)
        for s, last in enumerate(lasts):
            finals[s].append(last)
    results = [x] + [g.concat(f, 0) for f in finals]
    if unbatched:
        results = [g.squeeze(r, [1]) for r in results]
    return tuple(results)


def _initial_state(g, hx, k, dirs, batch, size, dtype):
    """States ``k .. k+dirs`` of ``hx`` ([L*D, B, H]) as [D, B, H], zeros when not given."""
    if hx is None or (hx.is_const and not bool(hx.value.any())):
        return g.broadcast_to(g.scalar(0.0, dtype), [dirs, batch, size])  # nn.LSTM's zeros
    if hx.is_const:
        return g.const(hx.value[k:k + dirs].to(dtype))
    return g.cast(g.slice(hx, 0, k, k + dirs), dtype)


def _input_projection(g, kind, x, ws, has_biases, t_axis):
    """``x @ W_ih^T + b`` for every step, per direction: one matmul for all directions.

    The bias folded here is ``b_ih`` (+ ``b_hh`` except for GRU, whose ``b_hn`` sits
    inside the reset product)."""
    order = _ORDER[kind]
    w_all = [_gate_rows(g, w[0], order) for w in ws]
    w_cat = _cat_rows(g, w_all)
    bias = None
    if has_biases:
        bs = []
        for w in ws:
            b = _gate_rows(g, w[2], order)
            if kind != "gru":
                b = _add(g, b, _gate_rows(g, w[3], order))
            bs.append(b)
        bias = _cat_rows(g, bs)
    lead = list(x.shape[:2])
    feat = x.shape[2]
    # [T*B, I] and back, spelled with -1 for the batch axis: after a sort on a dynamic
    # batch (pack_padded_sequence) tract knows the batch size by another symbol
    flat = g.op("reshape", x, shape=[-1], axis_start=0, axis_count=2,
                out_shape=[lead[0] * lead[1], feat])
    y = g.op("matmul", flat, g.cast(w_cat, x.dtype), transposeA=False, transposeB=True,
             out_shape=[lead[0] * lead[1], w_cat.shape[0]], out_dtype=x.dtype)
    if bias is not None:
        y = g.binary("add", y, g.cast(bias, x.dtype), x.dtype)
    y = g.op("reshape", y, shape=[-1, lead[1]] if t_axis == 1 else [lead[0], -1],
             axis_start=0, axis_count=1, out_shape=lead + [w_cat.shape[0]])
    width = w_all[0].shape[0]
    return [g.slice(y, 2, d * width, (d + 1) * width) for d in range(len(ws))]


def _recurrence(g, kind, projs, inits, w_hhs, b_hhs, w_hrs, hidden, t_axis, mask):
    """ONE scan running every direction of a layer side by side: the forward direction
    reads its projection from the start, the reverse one from the end, and their states
    are stacked on a leading direction axis ([D, B, H]) so that one batched matmul and one
    fused epilogue serve both. Returns the layer output (directions concatenated on the
    feature axis, PyTorch's layout) and the last states ([D, B, H] each)."""
    dirs = len(projs)
    loop = Loop(g, kind)
    b = loop.body
    steps = [1, -1][:dirs]

    def time_slice(t, step):  # one step of a [T, B, F] / [B, T, F] tensor, as [1, B, F]
        x = loop.scan(t, axis=t_axis, step=step)
        return x if t_axis == 0 else b.unsqueeze(b.squeeze(x, [1]), [0])

    xw = b.concat([time_slice(p, st) for p, st in zip(projs, steps)], 0)  # [D, B, G]
    states = [loop.state(s) for s in inits]
    h = states[0]
    r = loop.full(_stack(g, [_gate_rows(g, w, _ORDER[kind]) for w in w_hhs], xw.dtype))
    rh = b.op("matmul", h, r, transposeA=False, transposeB=True,
              out_shape=[dirs, h.shape[1], r.shape[1]], out_dtype=h.dtype)
    if kind == "lstm":
        h_new, c_new = lstm_step(b, b.binary("add", xw, rh, h.dtype), states[1], hidden)
        if w_hrs is not None:
            wr = loop.full(_stack(g, w_hrs, xw.dtype))
            h_new = b.op("matmul", h_new, wr, transposeA=False, transposeB=True,
                         out_shape=[dirs, h.shape[1], wr.shape[1]], out_dtype=h.dtype)
        news = [h_new, c_new]
    elif kind == "gru":
        if b_hhs is not None:
            bias = _stack(g, [_gate_rows(g, x, _GRU_ORDER) for x in b_hhs], xw.dtype)
            bias = g.reshaped_const(bias, (dirs, 1, bias.shape[1])) if bias.is_const \
                else g.unsqueeze(bias, [1])
            rh = b.binary("add", rh, loop.full(bias), h.dtype)
        news = [gru_step(b, xw, rh, h, hidden)]
    else:
        pre = b.binary("add", xw, rh, h.dtype)
        news = [b.op("tanh" if kind == "rnn_tanh" else "relu", pre)]
    y = news[0]
    if mask is not None:
        m = b.concat([loop.scan(mask, axis=0, step=st) for st in steps], 0)  # [D, B, 1]
        news = [b.op("select", m, n, s, out_shape=s.shape, out_dtype=s.dtype)
                for n, s in zip(news, states)]
        y = b.op("select", m, y, b.scalar(0.0, y.dtype), out_shape=y.shape,
                 out_dtype=y.dtype)
    for s, n in zip(states, news):
        loop.update(s, n)
    specs = []
    for d, st in enumerate(steps):
        y_d = b.slice(y, 0, d, d + 1) if dirs > 1 else y  # [1, B, H]
        if t_axis == 1:
            y_d = b.unsqueeze(b.squeeze(y_d, [0]), [1])  # [B, 1, H]
        specs.append(loop.scan_output(y_d, axis=t_axis, step=st))
    specs += [loop.last_output(n) for n in news]
    outs = loop.outputs(specs)
    return g.concat(outs[:dirs], 2), outs[dirs:]


def _stack(g, ws, dtype):
    """[D, ...] from one tensor per direction (a constant stays one weight)."""
    if all(w.is_const for w in ws):
        return g.variable(torch.stack([w.value for w in ws]).to(dtype), _label(g, ws[0]))
    return g.concat([g.unsqueeze(g.cast(w, dtype), [0]) for w in ws], 0)


# ---------------------------------------------------------------------------- cell math
def lstm_step(g, preact, c, hidden):
    """(h, c) from gate pre-activations in ``i, o, f, g`` order and the previous cell."""
    if preact.dtype in (torch.float32, torch.float16):
        return g.op("tract_core_lstm_epilogue", preact, c, hidden=hidden, outputs=2,
                    out_shapes=[c.shape, c.shape], out_dtypes=[c.dtype, c.dtype])
    ax = preact.rank - 1
    i, o, f, z = (g.slice(preact, ax, k * hidden, (k + 1) * hidden) for k in range(4))
    i, o, f = (_sigmoid(g, t) for t in (i, o, f))
    c_new = g.binary("add", g.binary("mul", f, c), g.binary("mul", i, g.op("tanh", z)))
    return g.binary("mul", o, g.op("tanh", c_new)), c_new


def gru_step(g, xh, rh, h, hidden):
    """The new hidden state from ``x W_ih^T + b_ih`` and ``h W_hh^T + b_hh`` (``z, r, n``)."""
    if xh.dtype in (torch.float32, torch.float16):
        return g.op("tract_core_gru_epilogue", xh, rh, h, hidden=hidden, out_shape=h.shape,
                    out_dtype=h.dtype)
    ax = xh.rank - 1
    xz, xr, xn = (g.slice(xh, ax, k * hidden, (k + 1) * hidden) for k in range(3))
    hz, hr, hn = (g.slice(rh, ax, k * hidden, (k + 1) * hidden) for k in range(3))
    z = _sigmoid(g, g.binary("add", xz, hz))
    r = _sigmoid(g, g.binary("add", xr, hr))
    n = g.op("tanh", g.binary("add", xn, g.binary("mul", r, hn)))
    return g.binary("add", n, g.binary("mul", z, g.binary("sub", h, n)))


def _sigmoid(g, x):
    """tract's sigmoid is f32/f16 only; ``(1 + tanh(x / 2)) / 2`` is the same function."""
    if x.dtype in (torch.float32, torch.float16):
        return g.op("sigmoid", x)
    t = g.op("tanh", g.binary("mul", x, 0.5, x.dtype))
    return g.binary("mul", g.binary("add", t, 1.0, x.dtype), 0.5, x.dtype)


# ---------------------------------------------------------------------------- weights
def _gate_rows(g, w, order):
    """``w`` with its gate blocks (rows) in ``order``; a weight stays a labelled weight."""
    if tuple(order) == tuple(range(len(order))):
        return w
    n = w.shape[0] // len(order)
    if w.is_const:
        data = torch.cat([w.value[k * n:(k + 1) * n] for k in order])
        return g.variable(data, _label(g, w)) if w.literal is None else g.const(data)
    return g.concat([g.slice(w, 0, k * n, (k + 1) * n) for k in order], 0)


def _cat_rows(g, ws):
    if len(ws) == 1:
        return ws[0]
    if all(w.is_const for w in ws):
        labels = [_label(g, w) for w in ws]
        label = labels[0] if labels[0] else None
        return g.variable(torch.cat([w.value for w in ws]), label)
    return g.concat([g.cast(w, ws[0].dtype) for w in ws], 0)


def _add(g, a, b):
    if a.is_const and b.is_const:
        return g.variable(a.value + b.value, _label(g, a))
    return g.binary("add", a, b, a.dtype)


def _label(g, t):
    v = next((v for v in g.variables if v.tensor is t), None)
    return v.label if v is not None else None


# ---------------------------------------------------------------------------- cells
@aten("lstm_cell")
def lstm_cell(g, input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One LSTM step (``nn.LSTMCell``): ``(h', c')``; 1-D (unbatched) input too."""
    h, c = hx
    hidden = w_ih.shape[0] // 4
    pre = _cell_preact(g, input, h, w_ih, w_hh, b_ih, b_hh, _LSTM_ORDER)
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
    order = _GRU_ORDER
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
    w = g.cast(_gate_rows(g, w, order), x.dtype)
    x2 = g.unsqueeze(x, [0]) if x.rank == 1 else x
    y = g.op("matmul", x2, w, transposeA=False, transposeB=True,
             out_shape=[x2.shape[0], w.shape[0]], out_dtype=x.dtype)
    if b is not None:
        y = g.binary("add", y, g.cast(_gate_rows(g, b, order), x.dtype), x.dtype)
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
