"""Fold per-channel scales and shifts after a convolution or a linear layer into its weights.

Batch norm in eval mode is written by its mapping as ``mul(y, scale)`` + ``add(y, shift)``
per channel; a bias add, a per-channel ``mul``/``div`` by a constant, or a constant ``sub``
look the same. When they follow a ``conv`` (any groups) or a ``matmul`` with a constant
weight, and each intermediate result has no other reader, then for every output channel o

    (conv(x, W) + b)[o] * s[o] + c[o]  ==  conv(x, W * s[o])[o] + (b[o] * s[o] + c[o])

so the chain becomes the layer alone with new constant weights: ResNet-50 loses its 53
``mul`` + 53 ``add``, and tract no longer spends its load time folding them itself. The new
weights are computed in float64 and rounded once to the weight's dtype (the only change to
the numbers: the rounding of the folded products). Scales that are not finite are left
alone (a ``mul`` by inf or NaN is not a weight).

A ``matmul`` keeps one ``add`` for its folded bias (``fuse_linear`` then writes the pair as
NNEF ``linear``). A float32 convolution left with a bias of zeros (a batch norm at its
initial statistics, a freshly initialised layer) writes the literal ``0.0`` instead of a
weight, as the ONNX route drops it.
"""

from __future__ import annotations

import torch

from t2n.walk.builder import Graph, Op, Tensor
from t2n.passes import GraphPass
from t2n.passes.rewrite import (Index, may_fold_weights, rewrite_until_stable, channel_vector,
                                const, derived, enabled, float64, read_elsewhere, scaled_weight)


def run(g: Graph, session) -> None:
    if may_fold_weights(session):
        rewrite_until_stable(g, _fold_after)
        _drop_zero_biases(g)


def _drop_zero_biases(g: Graph) -> None:
    """A float32 convolution whose bias is a constant of zeros (a fresh layer, a batch norm
    at its initial statistics) takes the literal 0.0 instead, as the ONNX route drops it:
    tract then builds no bias constant, axis removal and cast for it."""
    for op in g.ops:
        if op.kind not in ("conv", "deconv") or len(op.args) < 3:
            continue
        b = op.args[2]
        if isinstance(b, Tensor) and b.rank and b.value is not None \
                and b.dtype == torch.float32 and b.value.numel() > 0 \
                and not bool((b.value != 0).any()):
            op.args[2] = g.const(torch.zeros((), dtype=torch.float32))


PASS = GraphPass("fold_affine", run, options=("optimize",))


def _layer(op: Op):
    """(weight, out-channel axis of the output, channel count, bias vector or None) of a
    foldable producer, or None."""
    if op.kind == "conv" and len(op.args) >= 2 and const(op.args[1]) is not None:
        w = op.args[1]
        if not w.dtype.is_floating_point or w.rank < 3:
            return None
        c = int(w.shape[0])
        bias = op.args[2] if len(op.args) > 2 else op.attrs.get("bias", 0.0)
        if isinstance(bias, Tensor):
            b = channel_vector(bias, 2, 1, c)
            if b is None:
                return None
        elif isinstance(bias, (int, float)):
            b = torch.full((c,), float(bias), dtype=w.dtype)
        else:
            return None
        return "conv", w, 1, c, b
    if op.kind == "matmul" and len(op.args) == 2 and const(op.args[1]) is not None \
            and not op.attrs.get("transposeA", False):
        w = op.args[1]
        if not w.dtype.is_floating_point or w.rank < 2 or any(d != 1 for d in w.shape[:-2]):
            return None
        x = op.args[0]
        if not isinstance(x, Tensor) or x.rank != w.rank:
            return None
        tb = bool(op.attrs.get("transposeB", False))
        c = int(w.shape[-2] if tb else w.shape[-1])
        return "matmul", w, op.outputs[0].rank - 1, c, None
    return None


def _fold_after(g: Graph, index: Index, op: Op) -> bool:
    layer = _layer(op)
    if layer is None:
        return False
    kind, w, axis, c, bias = layer
    if read_elsewhere(g, index, w):
        return False
    y = op.outputs[0]
    if y.rank <= axis or y.shape[axis] != c:
        return False
    scale = torch.ones(c, dtype=torch.float64)
    shift = float64(bias) if bias is not None else torch.zeros(c, dtype=torch.float64)
    had_bias = bias is not None and bool((bias != 0).any())
    chain = []
    t = y
    while True:
        found = index.only_reader(t)
        if found is None:
            break
        user, pos = found
        if user.kind not in ("mul", "add", "sub", "div") or len(user.args) != 2 \
                or not isinstance(pos, int) or len(user.outputs) != 1:
            break
        o = user.outputs[0]
        if o.dtype != y.dtype or tuple(o.shape) != tuple(y.shape):
            break  # the constant broadcasts the result to a new shape
        other = user.args[1 - pos]
        vec = channel_vector(other, y.rank, axis, c)
        if vec is None or other.dtype != y.dtype or not bool(torch.isfinite(vec).all()):
            break
        v = float64(vec)
        if user.kind == "mul":
            scale, shift = scale * v, shift * v
        elif user.kind == "div":
            if pos != 0 or bool((v == 0).any()):
                break
            scale, shift = scale / v, shift / v
        elif user.kind == "add":
            shift = shift + v
            had_bias = True
        elif pos == 0:  # sub(y, v)
            shift = shift - v
            had_bias = True
        else:  # sub(v, y) = -y + v
            scale, shift = -scale, v - shift
            had_bias = True
        chain.append(user)
        t = o
    if not chain or kind == "matmul" and [u.kind for u in chain] == ["add"]:
        return False  # nothing to fold (a matmul's own bias add stays as it is)
    shape = [1] * w.value.dim()
    if kind == "conv":
        shape[0] = c
    elif op.attrs.get("transposeB", False):
        shape[-2] = c
    else:
        shape[-1] = c
    new_w = scaled_weight(w.value, scale.reshape(shape))
    index.set_arg(op, 1, derived(g, w, new_w, scaled=True, owned=True))
    last = chain[-1].outputs[0]
    if kind == "conv":
        b = shift.to(w.dtype).reshape(1, c)
        old = op.args[2] if len(op.args) > 2 else op.attrs.get("bias")
        if isinstance(old, Tensor) and old.rank and old.literal is None:
            bt = derived(g, old, b)
        else:
            bt = derived(g, w, b, suffix="bias")
        if len(op.args) > 2:
            index.set_arg(op, 2, bt)
        elif "bias" in op.attrs:
            index.set_attr(op, "bias", bt)
        else:
            index.set_arg(op, len(op.args), bt)
        index.set_output(op, 0, last)
        index.remove(chain)
        return True
    # matmul: one bias add remains (if any shift at all)
    inner = Tensor(g.fresh_name("matmul"), y.shape, y.dtype)
    index.set_output(op, 0, inner)
    index.remove(chain)
    if had_bias or bool((shift != 0).any()):
        b = shift.to(w.dtype).reshape([1] * (y.rank - 1) + [c])
        index.insert_after(op, Op("add", [inner, derived(g, w, b, suffix="bias")], {}, [last]))
    else:
        index.set_output(op, 0, last)
    return True
