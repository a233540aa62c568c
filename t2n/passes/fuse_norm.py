"""Write root-mean-square normalisation as tract's fused ``tract_core_rms_norm``.

Layer norm, RMS norm and the statistics of group and instance norm are emitted by their
mappings as ``x * rsqrt(mean(x * x) + eps)`` over the normalised axes (for layer norm, ``x``
is the input minus its mean). tract has that computation as one op,
``tract_core_rms_norm(x, axis, eps)``, probed on tract 0.23.9 to compute exactly
``x / sqrt(mean(x^2 along axis) + eps)``: eps inside the square root as in PyTorch, NaN and
inf propagating as in the formula (a row with a NaN is all NaN; an all-zero row with
``eps = 0`` is NaN), one axis at a time. So the five ops

    sq = mul(x, x); ms = mean_reduce(sq, axes = [a]); v = add(ms, eps); r = rsqrt(v);
    y = mul(x, r)

become ``y = tract_core_rms_norm(x, axis = a, eps = eps)``: layer norm goes from nine ops to
five (mean, centre, rms_norm, scale, shift; the scale and shift often fold further into the
next linear layer, see ``fold_affine_input``). The intermediate results may have other
readers (``native_layer_norm`` returns ``rstd``); they are then still computed for those.

Only float32 is fused (tract's f16 kernels accumulate differently from PyTorch's f32 upcast),
with a single normalised axis and a constant ``eps``.
"""

from __future__ import annotations

import torch

from t2n.walk.builder import Graph, Op, Tensor
from t2n.passes import GraphPass
from t2n.passes.rewrite import Index, enabled, scalar_const


def run(g: Graph, session) -> None:
    if not enabled(session):
        return
    index = Index(g)
    for at, op in enumerate(list(g.ops)):  # replaced in place: places do not move
        found = _match(index, op)
        if found is None:
            continue
        x, axis, eps = found
        y = op.outputs[0]
        g.ops[at] = Op("tract_core_rms_norm", [x], {"axis": axis, "eps": eps}, [y])


PASS = GraphPass("fuse_norm", run, options=("optimize",))


def _match(index: Index, op: Op):
    """(x, axis, eps) when ``op`` is the ``mul(x, rsqrt(add(mean(x * x), eps)))`` of a
    float32 x over one axis."""
    if op.kind != "mul" or len(op.args) != 2:
        return None
    y = op.outputs[0]
    if y.dtype != torch.float32:
        return None
    for i in (0, 1):
        x, r = op.args[i], op.args[1 - i]
        if not isinstance(x, Tensor) or not isinstance(r, Tensor) or x.dtype != y.dtype:
            continue
        if tuple(x.shape) != tuple(y.shape):
            continue
        rs = index.made_by(r, "rsqrt")
        v = index.made_by(rs.args[0], "add") if rs is not None else None
        if v is None or len(v.args) != 2:
            continue
        for j in (0, 1):
            ms, e = v.args[j], v.args[1 - j]
            eps = scalar_const(e)
            red = index.made_by(ms, "mean_reduce")
            if eps is None or red is None or eps < 0 or not _finite(eps):
                continue
            axes = list(red.attrs.get("axes", []))
            sq = index.made_by(red.args[0], "mul")
            if len(axes) != 1 or sq is None or len(sq.args) != 2:
                continue
            if not (sq.args[0] is x and sq.args[1] is x):
                continue
            a = int(axes[0])
            if tuple(ms.shape) != tuple(1 if k == a else d for k, d in enumerate(x.shape)):
                continue
            if tuple(r.shape) != tuple(ms.shape) or tuple(v.outputs[0].shape) != tuple(ms.shape):
                continue
            return x, a, eps
    return None


def _finite(v: float) -> bool:
    return v == v and abs(v) != float("inf")
