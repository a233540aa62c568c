"""The layers of the recurrent family as ``tract_core_scan`` loops: what
t2n/mappings/recurrent.py (``lstm``, ``gru``, ``rnn_*`` and their cells) and
t2n/mappings/quantized.py (``quantized_lstm``, ``quantized_gru``) lower to.

Each layer is lowered the way tract runs recurrences best:

1. the input projection of every time step, ``x @ W_ih^T + b``, is computed before the
   loop (both directions at once);
2. a :class:`~t2n.walk.loops.Loop` scans that projection along the time axis, the reverse
   direction reading it from the end, and carries ``h`` (and ``c``) as states stacked on a
   leading direction axis ``[D, B, H]``; its body is the recurrent product plus tract's
   fused cell epilogue (``tract_core_lstm_epilogue``, ``tract_core_gru_epilogue``) for
   f32/f16, or the same formulas op by op otherwise;
3. the per-step outputs and the last states come out of the scan.

An f32 GRU layer (outside packed sequences and streaming exports) skips the scan: tract has
a whole-sequence GRU op, ``tract_core_gru_seq``, that runs step 2 inside one op from the same
pre-computed projection (see :func:`_gru_seq`).

The two products (input projection, recurrent product) are a *products* object: float
layers use :data:`FLOAT_PRODUCTS` (one matmul each, directions stacked); dynamically
quantized layers pass t2n.mappings.helpers.dynamic_quant's int8 products, with the same
loop, states, masks and epilogues around them.

Gate order: PyTorch stores LSTM gates as ``i, f, g, o`` and GRU gates as ``r, z, n``;
tract's epilogues want ``i, o, f, g`` and ``z, r, n``, so the weight rows are permuted once
at export. PyTorch's GRU applies the reset gate after the hidden projection, which is
exactly tract's GRU epilogue. LSTM projections (``proj_size``): ``h = W_hr (o * tanh(c))``.
"""

from __future__ import annotations

import torch

from t2n.walk.builder import Tensor
from t2n.walk.loops import Body, Loop

LSTM_ORDER = (0, 3, 1, 2)  # i, f, g, o -> i, o, f, g
GRU_ORDER = (1, 0, 2)  # r, z, n -> z, r, n
_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
_ORDER = {"lstm": LSTM_ORDER, "gru": GRU_ORDER, "rnn_tanh": (0,), "rnn_relu": (0,)}

# ---------------------------------------------------------------------------- layers
class FloatProducts:
    """The products of a float layer: ``x @ W^T`` as matmuls, directions stacked into one
    weight (the input projection) or one batched product (the recurrent one)."""

    def rows(self, g, w, order):
        """``w`` with its gate blocks in tract's order."""
        return gate_rows(g, w, order)

    def project(self, g, flat, ws):
        """``[N, I]`` -> ``[N, D*G]``: every direction's ``x @ W_ih^T``."""
        w = _cat_rows(g, ws)
        return g.op("matmul", flat, g.cast(w, flat.dtype), transposeA=False, transposeB=True,
                    out_shape=[flat.shape[0], w.shape[0]], out_dtype=flat.dtype)

    def hidden(self, loop, h, ws):
        """``[D, B, H]`` state (in the loop body) -> ``[D, B, G]``."""
        r = loop.full(_stack(loop.g, ws, h.dtype))
        return loop.body.op("matmul", h, r, transposeA=False, transposeB=True,
                            out_shape=[h.shape[0], h.shape[1], r.shape[1]], out_dtype=h.dtype)


FLOAT_PRODUCTS = FloatProducts()


def layers(g, kind, x, hx, params, has_biases, num_layers, dropout, train, bidirectional,
           batch_first, packed, products=FLOAT_PRODUCTS):
    """All layers: returns (output, h_n[, c_n]) in PyTorch's layouts. ``params`` per layer
    and direction: ``w_ih, w_hh[, b_ih, b_hh][, w_hr]`` in the form ``products`` reads
    (builder tensors for the float products); biases are builder tensors."""
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
        proj = _input_projection(g, kind, x, ws, has_biases, t_axis, products)
        hidden = ws[0][0].shape[0] // _GATES[kind]
        h_size = ws[0][2 + n_bias].shape[0] if has_proj else hidden
        inits = [_initial_state(g, h, layer * dirs, dirs, batch, h_size if s == 0 else hidden,
                                x.dtype) for s, h in enumerate(hx)]
        w_hhs, b_hhs = [w[1] for w in ws], [w[3] for w in ws] if has_biases else None
        if kind == "gru" and _gru_seq_applies(g, x, w_hhs, mask, products):
            x, lasts = _gru_seq(g, proj, None if _zero_state(hx[0]) else inits[0], w_hhs,
                                b_hhs, hidden, t_axis)
        else:
            x, lasts = _recurrence(g, kind, proj, inits, w_hhs, b_hhs,
                                   [w[2 + n_bias] for w in ws] if has_proj else None,
                                   hidden, t_axis, mask, products)
        for s, last in enumerate(lasts):
            finals[s].append(last)
    results = [x] + [g.concat(f, 0) for f in finals]
    if unbatched:
        results = [g.squeeze(r, [1]) for r in results]
    return tuple(results)


def _initial_state(g, hx, k, dirs, batch, size, dtype):
    """States ``k .. k+dirs`` of ``hx`` ([L*D, B, H]) as [D, B, H], zeros when not given."""
    if _zero_state(hx):
        return g.broadcast_to(g.scalar(0.0, dtype), [dirs, batch, size])  # nn.LSTM's zeros
    if hx.is_const:
        return g.const(hx.value[k:k + dirs].to(dtype))
    return g.cast(g.slice(hx, 0, k, k + dirs), dtype)


def _zero_state(hx) -> bool:
    return hx is None or (hx.is_const and not bool(hx.value.any()))


def _input_projection(g, kind, x, ws, has_biases, t_axis, products):
    """``x @ W_ih^T + b`` for every step, per direction: one product for all directions.

    The bias folded here is ``b_ih`` (+ ``b_hh`` except for GRU, whose ``b_hn`` sits
    inside the reset product)."""
    order = _ORDER[kind]
    w_all = [products.rows(g, w[0], order) for w in ws]
    bias = None
    if has_biases:
        bs = []
        for w in ws:
            b = gate_rows(g, w[2], order)
            if kind != "gru":
                b = _add(g, b, gate_rows(g, w[3], order))
            bs.append(b)
        bias = _cat_rows(g, bs)
    lead = list(x.shape[:2])
    feat = x.shape[2]
    # [T*B, I] and back, spelled with -1 for the batch axis: after a sort on a dynamic
    # batch (pack_padded_sequence) tract knows the batch size by another symbol
    flat = g.op("reshape", x, shape=[-1], axis_start=0, axis_count=2,
                out_shape=[lead[0] * lead[1], feat])
    y = products.project(g, flat, w_all)
    if bias is not None:
        y = g.binary("add", y, g.cast(bias, x.dtype), x.dtype)
    y = g.op("reshape", y, shape=[-1, lead[1]] if t_axis == 1 else [lead[0], -1],
             axis_start=0, axis_count=1, out_shape=lead + [y.shape[1]])
    width = w_all[0].shape[0]
    return [g.slice(y, 2, d * width, (d + 1) * width) for d in range(len(ws))]


def _recurrence(g, kind, projs, inits, w_hhs, b_hhs, w_hrs, hidden, t_axis, mask, products):
    """ONE scan running every direction of a layer side by side: the forward direction
    reads its projection from the start, the reverse one from the end, and their states
    are stacked on a leading direction axis ([D, B, H]) so that one batched product and one
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
    rh = products.hidden(loop, h, [products.rows(g, w, _ORDER[kind]) for w in w_hhs])
    if kind == "lstm":
        h_new, c_new = lstm_step(b, b.binary("add", xw, rh, h.dtype), states[1], hidden)
        if w_hrs is not None:
            wr = loop.full(_stack(g, w_hrs, xw.dtype))
            h_new = b.op("matmul", h_new, wr, transposeA=False, transposeB=True,
                         out_shape=[dirs, h.shape[1], wr.shape[1]], out_dtype=h.dtype)
        news = [h_new, c_new]
    elif kind == "gru":
        if b_hhs is not None:
            bias = _stack(g, [gate_rows(g, x, GRU_ORDER) for x in b_hhs], xw.dtype)
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


def _gru_seq_applies(g, x, w_hhs, mask, products) -> bool:
    """Whether tract's whole-sequence GRU (``tract_core_gru_seq``) runs this layer: an f32
    float layer with constant recurrent weights (tract packs them once), outside a loop
    body, without a packed-sequence mask, in an export that does not stream (tract cannot
    pulse the op)."""
    return (x.dtype == torch.float32 and products is FLOAT_PRODUCTS and mask is None
            and g.session.streaming is None and not isinstance(g, Body)
            and all(w.is_const for w in w_hhs))


def _gru_seq(g, projs, init, w_hhs, b_hhs, hidden, t_axis):
    """One GRU layer (``init``: the [D, B, H] initial state, None for zeros) as ``tract_core_gru_seq`` per direction: the whole sequence in one op,
    with no graph dispatch per step (the loop a scan would run is inside the op).

    tract 0.23.9's semantics, read from its GruSeq op and checked against torch: with
    ``projected = 1``, ``x`` is the input projection ``x W_ih^T + b_ih`` laid out
    [B, T, 3H] in tract's gate order ``z, r, n``; ``r`` is ``W_hh`` [3H, H] in that order;
    ``b`` is [1, 6H] whose second half ``b_hh`` is added to ``h W_hh^T`` before the reset
    gate multiplies its ``n`` block (PyTorch's formula; the first half, the input-side
    bias, is not read when projected); ``initial_h`` and ``y_h`` are [B, 1, H], ``y`` is
    [B, T, H] in time order for either direction (``chunk = -1`` runs from the end).
    ``reset_every_turn = 1``: every run starts from ``initial_h`` (as t2n's non-streaming
    scans do), not from where the previous run of the same tract ``State`` ended."""
    ys, lasts = [], []
    for d, (p, w) in enumerate(zip(projs, w_hhs)):
        xb = p if t_axis == 1 else g.transpose(p, [1, 0, 2])  # [B, T, 3H]
        batch, steps = xb.shape[0], xb.shape[1]
        h0 = g.broadcast_to(g.scalar(0.0, torch.float32), [batch, 1, hidden]) if init is None \
            else g.transpose(g.slice(init, 0, d, d + 1), [1, 0, 2])  # [B, 1, H]
        args = dict(x=xb, r=g.variable(_rows(w.value, GRU_ORDER).float(), _label(g, w)))
        if b_hhs is not None:
            b_hh = b_hhs[d]
            if b_hh.is_const:
                data = _rows(b_hh.value, GRU_ORDER).float()
                b = g.variable(torch.cat([torch.zeros_like(data), data])[None],
                               _label(g, b_hh))
            else:
                b_hh = g.cast(gate_rows(g, b_hh, GRU_ORDER), torch.float32)
                zeros = g.broadcast_to(g.scalar(0.0, torch.float32), [3 * hidden])
                b = g.unsqueeze(g.concat([zeros, b_hh], 0), [0])
            args["b"] = b
        args["initial_h"] = h0
        y, y_h = g.op("tract_core_gru_seq", hidden=hidden, chunk=1 if d == 0 else -1,
                      has_bias=int(b_hhs is not None), reset_every_turn=1, emit_y=1,
                      projected=1, outputs=2, out_shapes=[[batch, steps, hidden],
                                                          [batch, 1, hidden]],
                      out_dtypes=[torch.float32, torch.float32], **args)
        ys.append(y if t_axis == 1 else g.transpose(y, [1, 0, 2]))
        lasts.append(g.transpose(y_h, [1, 0, 2]))  # [1, B, H]
    return g.concat(ys, 2), [g.concat(lasts, 0)]


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
def gate_rows(g, w, order):
    """``w`` with its gate blocks (rows) in ``order``; a weight stays a labelled weight."""
    if tuple(order) == tuple(range(len(order))):
        return w
    n = w.shape[0] // len(order)
    if w.is_const:
        data = _rows(w.value, order)
        return g.variable(data, _label(g, w)) if w.literal is None else g.const(data)
    return g.concat([g.slice(w, 0, k * n, (k + 1) * n) for k in order], 0)


def _rows(data, order):
    """A weight's gate blocks (rows) in ``order``."""
    n = data.shape[0] // len(order)
    return torch.cat([data[k * n:(k + 1) * n] for k in order])


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
