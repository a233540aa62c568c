"""Name the composite operations of the graph: write each as one call of an NNEF fragment.

After folding, some PyTorch operations still take several NNEF ops because tract has no
single op for them: exact GELU (``0.5 * x * (1 + erf(x / sqrt(2)))``, five ops), layer
norm (mean, centre, ``tract_core_rms_norm``), ReLU6/hardtanh (``max`` then ``min``), a
batch norm that could not fold into a layer (per-channel ``mul`` then ``add``), a mean
that drops its axes (``mean_reduce`` then ``squeeze``), and a chunk/split (slices covering
an axis). NNEF's own way to name a composite is a fragment, as its standard library does
for ``linear`` and ``clamp``: the pass defines one fragment per kind (``t2n_gelu``,
``t2n_layer_norm``, ``t2n_clamp``, ``t2n_scale_shift``, ``t2n_mean``, ``t2n_split2``...)
whose body is exactly the ops it replaces, and each occurrence becomes one call. tract
inlines the body when it loads the archive, so the model tract builds is the same one
(its GELU and RMS-norm detection see the same ops); the archive is shorter and says what
it computes, like the ONNX route's ``Gelu`` and ``LayerNormalization`` nodes.

Only for the tract target (the Khronos dialect needs its fragment extension and lowers
tract ops, see t2n.targets), only float32 tensors, and only where every intermediate result
has no other reader (nothing outside a call may need a value inside it).
"""

from __future__ import annotations

import math

import torch

from ..builder import Graph, Op, Tensor, format_float
from . import GraphPass
from .rewrite import Index, const, may_fold_weights, scalar_const


def run(g: Graph, ctx) -> None:
    if not may_fold_weights(ctx) or ctx.target != "tract" or g.streaming is not None:
        # compressed weights: the format planner reads the ops as mapped; streaming: the
        # pulse refusals name the aten ops, which a fragment call would hide
        return
    defined: dict[str, _Fragment] = {}
    for matcher in (_gelu, _layer_norm, _clamp, _scale_shift, _mean, _split):
        index = Index(g)
        gone: set[int] = set()
        replaced: dict[int, Op] = {}
        for op in list(g.ops):
            if id(op) in gone:
                continue
            found = matcher(index, op)
            if found is None:
                continue
            frag, call, ops = found
            if any(id(o) in gone for o in ops):
                continue
            defined.setdefault(frag.name, frag)
            gone.update(id(o) for o in ops)
            replaced[id(ops[-1])] = call
        if replaced:
            g.ops = [replaced.get(id(o), o) for o in g.ops
                     if id(o) not in gone or id(o) in replaced]
    for frag in defined.values():
        if all(f.name != frag.name for f in g.fragments):
            g.fragments.append(frag)


PASS = GraphPass("compose", run, options=("optimize",))


class _Fragment:
    """A fragment definition written before the graph (rendered by t2n.loops)."""

    def __init__(self, name: str, params: str, results: str, body: list[str]):
        self.name = name
        self._head = f"fragment {name}({params}) -> ({results})"
        self._body = body
        self.body = Graph()  # no nested fragments inside

    def render(self) -> list[str]:
        return [self._head, "{"] + ["  " + line + ";" for line in self._body] + ["}"]


def _f32(*ts) -> bool:
    return all(isinstance(t, Tensor) and t.dtype == torch.float32 for t in ts)


def _single(index: Index, t: Tensor, reader: Op) -> bool:
    found = index.only_reader(t)
    return found is not None and found[0] is reader


def _lit(v: float) -> str:
    return format_float(float(torch.tensor(v, dtype=torch.float32)))


# ---------------------------------------------------------------------------- patterns
def _gelu(index: Index, e: Op):
    """e = erf(mul(x, 1/sqrt(2))); y = mul(mul(x, 0.5), add(e, 1.0))"""
    if e.kind != "tract_core_erf" or len(e.args) != 1:
        return None
    a = index.made_by(e.args[0], "mul")
    if a is None or not _single(index, e.args[0], e) or len(a.args) != 2:
        return None
    x, c = a.args
    if scalar_const(c) is None or abs(scalar_const(c) - 1 / math.sqrt(2)) > 1e-7 \
            or not isinstance(c, Tensor) or c.literal is None:
        return None
    found = index.only_reader(e.outputs[0])
    if found is None or found[0].kind != "add" or found[1] != 0:
        return None
    p = found[0]
    if scalar_const(p.args[1]) != 1.0 or p.args[1].literal is None:
        return None
    found = index.only_reader(p.outputs[0])
    if found is None or found[0].kind != "mul" or found[1] != 1:
        return None
    y = found[0]
    h = index.made_by(y.args[0], "mul")
    if h is None or not _single(index, y.args[0], y) or h.args[0] is not x \
            or scalar_const(h.args[1]) != 0.5 or h.args[1].literal is None:
        return None
    if not _f32(x, y.outputs[0]) or tuple(y.outputs[0].shape) != tuple(x.shape):
        return None
    frag = _Fragment("t2n_gelu", "x: tensor<scalar>", "y: tensor<scalar>", [
        f"a = mul(x, {c.literal})", "e = tract_core_erf(a)", "h = mul(x, 0.5)",
        "p = add(e, 1.0)", "y = mul(h, p)"])
    return frag, Op("t2n_gelu", [x], {}, [y.outputs[0]]), [a, e, h, p, y]


def _layer_norm(index: Index, r: Op):
    """m = mean_reduce(x, [a]); c = sub(x, m); y = tract_core_rms_norm(c, a, eps)"""
    if r.kind != "tract_core_rms_norm" or len(r.args) != 1:
        return None
    s = index.made_by(r.args[0], "sub")
    if s is None or not _single(index, r.args[0], r) or len(s.args) != 2:
        return None
    x, m = s.args
    red = index.made_by(m, "mean_reduce")
    axis = int(r.attrs.get("axis", -1))
    if red is None or not _single(index, m, s) or red.args[0] is not x \
            or list(red.attrs.get("axes", [])) != [axis] or not _f32(x, r.outputs[0]):
        return None
    frag = _Fragment("t2n_layer_norm", "x: tensor<scalar>, axis: integer, eps: scalar",
                     "y: tensor<scalar>", [
                         "m = mean_reduce(x, axes = [axis])", "c = sub(x, m)",
                         "y = tract_core_rms_norm(c, axis = axis, eps = eps)"])
    call = Op("t2n_layer_norm", [x], {"axis": axis, "eps": float(r.attrs["eps"])},
              [r.outputs[0]])
    return frag, call, [red, s, r]


def _clamp(index: Index, y: Op):
    """t = max(x, lo); y = min(t, hi) with literal bounds (hardtanh, ReLU6)."""
    if y.kind != "min" or len(y.args) != 2:
        return None
    t, hi = y.args
    mx = index.made_by(t, "max")
    if mx is None or not _single(index, t, y) or len(mx.args) != 2:
        return None
    x, lo = mx.args
    vals = [scalar_const(v) for v in (lo, hi)]
    if any(v is None for v in vals) or any(not isinstance(v, Tensor) or v.literal is None
                                           or v.rank != 0 for v in (lo, hi)):
        return None
    if not _f32(x, lo, hi, y.outputs[0]) or tuple(y.outputs[0].shape) != tuple(x.shape):
        return None
    frag = _Fragment("t2n_clamp", "x: tensor<scalar>, lo: scalar, hi: scalar",
                     "y: tensor<scalar>", ["t = max(x, lo)", "y = min(t, hi)"])
    call = Op("t2n_clamp", [x], {"lo": vals[0], "hi": vals[1]}, [y.outputs[0]])
    return frag, call, [mx, y]


def _scale_shift(index: Index, y: Op):
    """t = mul(x, s); y = add(t, c) with constant s and c (a batch norm left unfolded)."""
    if y.kind != "add" or len(y.args) != 2:
        return None
    t, c = y.args
    m = index.made_by(t, "mul")
    if m is None or not _single(index, t, y) or len(m.args) != 2:
        return None
    x, s = m.args
    if const(s) is None or const(c) is None or const(x) is not None:
        return None
    if not _f32(x, s, c, y.outputs[0]) or tuple(y.outputs[0].shape) != tuple(x.shape) \
            or s.rank != x.rank or c.rank != x.rank:
        return None
    frag = _Fragment("t2n_scale_shift", "x: tensor<scalar>, s: tensor<scalar>, "
                     "c: tensor<scalar>", "y: tensor<scalar>", ["t = mul(x, s)",
                                                                "y = add(t, c)"])
    return frag, Op("t2n_scale_shift", [x, s, c], {}, [y.outputs[0]]), [m, y]


def _mean(index: Index, y: Op):
    """m = mean_reduce(x, axes); y = squeeze(m, axes) (torch.mean without keepdim)."""
    if y.kind != "squeeze" or len(y.args) != 1:
        return None
    red = index.made_by(y.args[0], "mean_reduce")
    if red is None or not _single(index, y.args[0], y):
        return None
    axes = [int(a) for a in red.attrs.get("axes", [])]
    if not axes or [int(a) for a in y.attrs.get("axes", [])] != axes:
        return None
    x = red.args[0]
    if not _f32(x, y.outputs[0]):
        return None
    frag = _Fragment("t2n_mean", "x: tensor<scalar>, axes: integer[]", "y: tensor<scalar>",
                     ["m = mean_reduce(x, axes = axes)", "y = squeeze(m, axes = axes)"])
    return frag, Op("t2n_mean", [x], {"axes": axes}, [y.outputs[0]]), [red, y]


def _split(index: Index, op: Op):
    """Two slices of x along one axis that cover it: ``x.chunk(2, dim)`` / ``split``."""
    if op.kind != "slice" or len(op.args) != 1:
        return None
    x = op.args[0]
    if not _f32(x) or not all(isinstance(d, int) for d in x.shape):
        return None
    slices = [u for u, pos in index.readers(x) if u.kind == "slice" and pos == 0]
    if len(slices) != 2 or op is not min(slices, key=lambda u: index.g.ops.index(u)):
        return None
    bounds = []
    for s in slices:
        axes = list(s.attrs.get("axes", []))
        st = list(s.attrs.get("stride", [1]))
        b, e = list(s.attrs.get("begin", [])), list(s.attrs.get("end", []))
        if len(axes) != 1 or st != [1] or len(b) != 1 or len(e) != 1 \
                or not all(isinstance(v, int) for v in (b[0], e[0], axes[0])):
            return None
        bounds.append((int(axes[0]), int(b[0]), int(e[0]), s))
    (a0, b0, e0, s0), (a1, b1, e1, s1) = sorted(bounds, key=lambda t: t[1])
    axis = a0
    if a1 != axis or b0 != 0 or e0 != b1 or e1 != x.shape[axis] or not 0 < b1 < e1:
        return None
    frag = _Fragment("t2n_split2", "x: tensor<scalar>, axis: integer, mid: integer, "
                     "end: integer", "a: tensor<scalar>, b: tensor<scalar>", [
                         "a = slice(x, axes = [axis], begin = [0], end = [mid], stride = [1])",
                         "b = slice(x, axes = [axis], begin = [mid], end = [end], "
                         "stride = [1])"])
    call = Op("t2n_split2", [x], {"axis": axis, "mid": b1, "end": e1},
              [s0.outputs[0], s1.outputs[0]])
    # the call takes the place of the first slice: both outputs exist before any reader
    first, second = sorted((s0, s1), key=lambda u: index.g.ops.index(u))
    return frag, call, [second, first]
