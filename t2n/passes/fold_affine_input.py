"""Fold a per-feature scale and shift *before* linear layers into their weights and biases.

Layer norm ends with ``mul(y, weight)`` and ``add(., bias)`` over the last axis, and in a
transformer that result usually feeds only linear layers (the attention's q/k/v projection,
the MLP's first layer). For a linear layer ``z = x @ W^T + c`` reading ``x = y * s + b``
(``s`` and ``b`` constant vectors over the features):

    z = y @ (W * s)^T + (W @ b + c)

so the ``mul`` and the ``add`` go and each reading layer gets new constant weights (computed
in float64, rounded once). This applies only when *every* reader of the affine result is such
a ``matmul`` with a constant weight contracting the last axis (a residual ``add`` or any other
reader keeps the affine as it is), and the constants are finite. Each layer's bias add is
updated in place, or added when the layer had none.

A weight something else also reads is never folded into (GPT-2's head is tied to the
embedding: a scaled copy would store the table twice). With a compressed weight format
(``weights="f16"``/``"q4_0"``) only scales fold: the shift's ``W @ b`` would be computed
with the float weight, not with the rounded one tract multiplies by.
"""

from __future__ import annotations

import torch

from t2n.walk.builder import Graph, Op, Tensor
from t2n.passes import GraphPass
from t2n.passes.rewrite import (Index, may_fold_weights, rewrite_until_stable, channel_vector,
                                derived, enabled, float64, compressing, read_elsewhere,
                                scaled_weight)


def run(g: Graph, session) -> None:
    if may_fold_weights(session):
        compressed = compressing(session)
        rewrite_until_stable(g, lambda g, index, op: _fold(g, index, op, compressed))


PASS = GraphPass("fold_affine_input", run, options=("optimize",))


def _affine(index: Index, op: Op):
    """(y, scale, shift, ops, result) of an affine chain starting at ``op``
    (``mul(y, s)`` then optionally ``add(., b)``, or ``add(y, b)`` alone), else None."""
    if op.kind not in ("mul", "add") or len(op.args) != 2 or len(op.outputs) != 1:
        return None
    out = op.outputs[0]
    if not out.dtype.is_floating_point or out.rank < 1 or not isinstance(out.shape[-1], int):
        return None
    c = int(out.shape[-1])
    for i in (0, 1):
        y, p = op.args[i], op.args[1 - i]
        if not isinstance(y, Tensor) or y.value is not None or tuple(y.shape) != tuple(out.shape):
            continue
        vec = channel_vector(p, out.rank, out.rank - 1, c)
        if vec is None or p.dtype != out.dtype or not bool(torch.isfinite(vec).all()):
            continue
        scale = float64(vec) if op.kind == "mul" else torch.ones(c, dtype=torch.float64)
        shift = torch.zeros(c, dtype=torch.float64) if op.kind == "mul" else float64(vec)
        ops = [op]
        if op.kind == "mul":
            nxt = index.only_reader(out)
            if nxt is not None and nxt[0].kind == "add" and isinstance(nxt[1], int) \
                    and len(nxt[0].args) == 2:
                add = nxt[0]
                q = add.args[1 - nxt[1]]
                bvec = channel_vector(q, out.rank, out.rank - 1, c)
                o2 = add.outputs[0]
                if bvec is not None and q.dtype == out.dtype and tuple(o2.shape) == \
                        tuple(out.shape) and bool(torch.isfinite(bvec).all()):
                    shift = float64(bvec)
                    ops.append(add)
        return y, scale, shift, ops, ops[-1].outputs[0]
    return None


def _reader_layer(op: Op, pos, t: Tensor):
    """(weight, transposeB) when ``op`` is ``matmul(t, W)`` with a constant W contracting
    t's last axis."""
    if op.kind != "matmul" or pos != 0 or len(op.args) != 2 or op.attrs.get("transposeA"):
        return None
    w = op.args[1]
    if not isinstance(w, Tensor) or w.value is None or w.dtype != t.dtype or w.rank != t.rank:
        return None
    if w.rank < 2 or any(d != 1 for d in w.shape[:-2]):
        return None
    tb = bool(op.attrs.get("transposeB", False))
    if int(w.shape[-1] if tb else w.shape[-2]) != int(t.shape[-1]):
        return None
    return w, tb


def _fold(g: Graph, index: Index, op: Op, compressed: bool) -> bool:
    found = _affine(index, op)
    if found is None:
        return False
    y, scale, shift, ops, result = found
    if compressed and bool((shift != 0).any()):
        return False
    readers = index.readers(result)
    if not readers or id(result) in index.outputs:
        return False
    layers = []
    for user, pos in readers:
        layer = _reader_layer(user, pos, result)
        if layer is None or read_elsewhere(g, index, layer[0]):
            return False
        layers.append((user, *layer))
    shifted = bool((shift != 0).any())
    for user, w, tb in layers:
        dim = w.value.dim()
        # W [.., out, in] when transposed, else [.., in, out]: the scale runs along "in"
        factor = scale.reshape([1] * (dim - 1) + [-1]) if tb else \
            scale.reshape([1] * (dim - 2) + [-1, 1])
        new_w = scaled_weight(w.value, factor)
        index.set_arg(user, 0, y)
        index.set_arg(user, 1, derived(g, w, new_w, scaled=True, owned=True))
        if shifted:  # a float64 copy of the weight only where a shift needs W @ b
            wv = float64(w.value).reshape(w.value.shape[-2:])
            delta = wv @ shift if tb else shift @ wv
            del wv
            if bool((delta != 0).any()):
                _add_to_bias(g, index, user, delta)
    index.remove(ops)
    return True


def _add_to_bias(g: Graph, index: Index, mm: Op, delta: torch.Tensor) -> None:
    z = mm.outputs[0]
    c = int(z.shape[-1])
    nxt = index.only_reader(z)
    if nxt is not None and nxt[0].kind == "add" and isinstance(nxt[1], int) \
            and len(nxt[0].args) == 2:
        add, pos = nxt
        b = add.args[1 - pos]
        vec = channel_vector(b, z.rank, z.rank - 1, c)
        if vec is not None and b.dtype == z.dtype and \
                tuple(add.outputs[0].shape) == tuple(z.shape):
            new = (float64(vec) + delta).to(z.dtype).reshape([1] * (z.rank - 1) + [c])
            index.set_arg(add, 1 - pos, derived(g, b if b.literal is None else mm.args[1],
                                                new, suffix=None if b.literal is None
                                                else "bias"))
            return
    inner = Tensor(g.fresh_name("matmul"), z.shape, z.dtype)
    index.set_output(mm, 0, inner)
    b = delta.to(z.dtype).reshape([1] * (z.rank - 1) + [c])
    index.insert_after(mm, Op("add", [inner, derived(g, mm.args[1], b, suffix="bias")], {}, [z]))
