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

from t2n.walk.builder import Graph, Op, Tensor, format_float
from t2n.passes import GraphPass
from t2n.passes.rewrite import Index, TextFragment, const, may_fold_weights, scalar_const


def run(g: Graph, session) -> None:
    if not may_fold_weights(session) or not session.target.can("fragment_calls") \
            or session.streaming is not None:
        # compressed weights: the format planner reads the ops as mapped; streaming: the
        # pulse refusals name the aten ops, which a fragment call would hide
        return
    defined: dict[str, TextFragment] = {}
    for matcher in (_gelu, _gelu_tanh, _layer_norm, _clamp, _nan_minmax, _scale_shift,
                    _layer_norm_affine, _mean, _split):
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
    frag = TextFragment("t2n_gelu", "x: tensor<scalar>", "y: tensor<scalar>", [
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
    frag = TextFragment("t2n_layer_norm", "x: tensor<scalar>, axis: integer, eps: scalar",
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
    frag = TextFragment("t2n_clamp", "x: tensor<scalar>, lo: scalar, hi: scalar",
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
    frag = TextFragment("t2n_scale_shift", "x: tensor<scalar>, s: tensor<scalar>, "
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
    frag = TextFragment("t2n_mean", "x: tensor<scalar>, axes: integer[]", "y: tensor<scalar>",
                     ["m = mean_reduce(x, axes = axes)", "y = squeeze(m, axes = axes)"])
    return frag, Op("t2n_mean", [x], {"axes": axes}, [y.outputs[0]]), [red, y]


def _split(index: Index, op: Op):
    """Slices of x along one axis that cover it, end to end: ``x.chunk(n, dim)``/``split``
    (two pieces: ``t2n_split2``; n pieces: ``t2n_split<n>`` with the n - 1 inner bounds)."""
    if op.kind != "slice" or len(op.args) != 1:
        return None
    x = op.args[0]
    if not _f32(x) or not all(isinstance(d, int) for d in x.shape):
        return None
    slices = [u for u, pos in index.readers(x) if u.kind == "slice" and pos == 0]
    if len(slices) < 2 or op is not min(slices, key=index.place):
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
    bounds.sort(key=lambda t: t[1])
    axis = bounds[0][0]
    if any(a != axis for a, *_ in bounds) or not 0 <= axis < x.rank or bounds[0][1] != 0 \
            or bounds[-1][2] != x.shape[axis] \
            or any(bounds[i][2] != bounds[i + 1][1] for i in range(len(bounds) - 1)) \
            or any(b >= e for _, b, e, _ in bounds):
        return None
    n = len(bounds)
    inner = [b for _, b, _, _ in bounds[1:]]
    names = ["mid"] if n == 2 else [f"b{i}" for i in range(1, n)]
    edges = ["0"] + names + ["end"]
    outs = [chr(ord("a") + i) for i in range(n)] if n <= 26 else [f"y{i}" for i in range(n)]
    params = ", ".join(["x: tensor<scalar>", "axis: integer"]
                       + [f"{m}: integer" for m in names] + ["end: integer"])
    frag = TextFragment(f"t2n_split{n}", params, ", ".join(f"{o}: tensor<scalar>" for o in outs),
                     [f"{o} = slice(x, axes = [axis], begin = [{edges[i]}], "
                      f"end = [{edges[i + 1]}], stride = [1])" for i, o in enumerate(outs)])
    attrs = {"axis": axis, **dict(zip(names, inner)), "end": bounds[-1][2]}
    call = Op(f"t2n_split{n}", [x], attrs, [s.outputs[0] for *_, s in bounds])
    # the call takes the place of the first slice: every output exists before any reader
    order = sorted((s for *_, s in bounds), key=index.place)
    return frag, call, order[1:] + order[:1]


def _literal_scalar(t) -> bool:
    return isinstance(t, Tensor) and t.literal is not None and t.rank == 0 \
        and scalar_const(t) is not None


def _made_single(index: Index, t, kind: str, reader: Op) -> Op | None:
    """The ``kind`` op producing ``t`` when ``reader`` is the only one reading ``t``."""
    op = index.made_by(t, kind)
    if op is None or not _single(index, t, reader) or len(op.outputs) != 1:
        return None
    return op


def _gelu_tanh(index: Index, y: Op):
    """GELU's tanh form written out, as transformers' ``gelu_new``/``NewGELUActivation``:
    ``y = (x * a) * (tanh((x + pow(x, e) * c) * k) + d)`` with literal a, e, c, k, d
    (0.5, 3, 0.044715, sqrt(2/pi), 1): one ``t2n_gelu_tanh`` call with the literals as
    arguments, so the body computes exactly what the ops did (``t2n_gelu_tanh3`` when the
    power is the cube the pow mapping writes as products)."""
    if y.kind != "mul" or len(y.args) != 2:
        return None
    h = _made_single(index, y.args[0], "mul", y)
    v = _made_single(index, y.args[1], "add", y)
    if h is None or v is None or len(h.args) != 2 or len(v.args) != 2:
        return None
    x, a = h.args
    t = _made_single(index, v.args[0], "tanh", v)
    if t is None or not _literal_scalar(a) or not _literal_scalar(v.args[1]):
        return None
    u = _made_single(index, t.args[0], "mul", t)
    if u is None or len(u.args) != 2 or not _literal_scalar(u.args[1]):
        return None
    s = _made_single(index, u.args[0], "add", u)
    if s is None or len(s.args) != 2 or s.args[0] is not x:
        return None
    q = _made_single(index, s.args[1], "mul", s)
    if q is None or len(q.args) != 2 or not _literal_scalar(q.args[1]):
        return None
    power = _power_of(index, q.args[0], x, q)
    if power is None:
        return None
    if not _f32(x, y.outputs[0]) or any(tuple(o.outputs[0].shape) != tuple(x.shape)
                                        for o in (h, *power, q, s, u, t, v, y)):
        return None
    p = power[-1]
    cube = len(power) == 2  # the pow mapping writes x ** 3 as (x * x) * x
    head = ["r = sqr(x)", "p = mul(r, x)"] if cube else ["p = pow(x, e)"]
    name = "t2n_gelu_tanh3" if cube else "t2n_gelu_tanh"
    frag = TextFragment(name, "x: tensor<scalar>, a: scalar, " + ("" if cube else "e: scalar, ")
                        + "c: scalar, k: scalar, d: scalar", "y: tensor<scalar>", [
                         "h = mul(x, a)", *head, "q = mul(p, c)", "s = add(x, q)",
                         "u = mul(s, k)", "t = tanh(u)", "v = add(t, d)", "y = mul(h, v)"])
    named = (("a", h), ("c", q), ("k", u), ("d", v)) + (() if cube else (("e", p),))
    lits = {n: scalar_const(o.args[1]) for n, o in named}
    return frag, Op(name, [x], lits, [y.outputs[0]]), [h, *power, q, s, u, t, v, y]


def _power_of(index: Index, t, x, reader: Op) -> list[Op] | None:
    """The ops making ``t`` as a literal power of ``x``, read only by ``reader``:
    ``[pow(x, e)]``, or ``[sqr(x), mul(sqr, x)]`` (a cube, as the pow mapping writes it)."""
    p = _made_single(index, t, "pow", reader)
    if p is not None:
        ok = len(p.args) == 2 and p.args[0] is x and _literal_scalar(p.args[1])
        return [p] if ok else None
    p = _made_single(index, t, "mul", reader)
    if p is None or len(p.args) != 2 or p.args[1] is not x:
        return None
    r = _made_single(index, p.args[0], "sqr", p)
    if r is None or len(r.args) != 1 or r.args[0] is not x:
        return None
    return [r, p]


def _nan_minmax(index: Index, y: Op):
    """``r = max(x, c); y = select(tract_core_is_nan(x), x, r)``: a max/min that keeps a
    NaN of x, as torch.clamp/clamp_min/maximum do (tract's max/min return the other
    operand). One ``t2n_max_nan``/``t2n_min_nan`` call."""
    if y.kind != "select" or len(y.args) != 3:
        return None
    cond, x, r = y.args
    n = _made_single(index, cond, "tract_core_is_nan", y)
    if n is None or len(n.args) != 1 or n.args[0] is not x:
        return None
    m = index.made_by(r, ("max", "min"))
    if m is None or not _single(index, r, y) or len(m.args) != 2 or m.args[0] is not x:
        return None
    c = m.args[1]
    if not isinstance(c, Tensor) or not _f32(x, c, y.outputs[0]) \
            or tuple(y.outputs[0].shape) != tuple(x.shape) \
            or tuple(r.shape) != tuple(x.shape) or not (c.rank == 0 or c.rank == x.rank):
        return None
    name = f"t2n_{m.kind}_nan"
    frag = TextFragment(name, "x: tensor<scalar>, c: tensor<scalar>", "y: tensor<scalar>", [
        f"r = {m.kind}(x, c)", "n = tract_core_is_nan(x)", "y = select(n, x, r)"])
    return frag, Op(name, [x, c], {}, [y.outputs[0]]), [m, n, y]


def _layer_norm_affine(index: Index, y: Op):
    """A layer norm and its elementwise affine (``t2n_layer_norm`` then
    ``t2n_scale_shift``, when the affine could not fold into a following layer): one
    ``t2n_layer_norm_affine`` call, as the ONNX route's ``LayerNormalization``."""
    if y.kind != "t2n_scale_shift" or len(y.args) != 3:
        return None
    ln = _made_single(index, y.args[0], "t2n_layer_norm", y)
    if ln is None:
        return None
    frag = TextFragment("t2n_layer_norm_affine", "x: tensor<scalar>, s: tensor<scalar>, "
                     "b: tensor<scalar>, axis: integer, eps: scalar", "y: tensor<scalar>", [
                         "m = mean_reduce(x, axes = [axis])", "c = sub(x, m)",
                         "n = tract_core_rms_norm(c, axis = axis, eps = eps)",
                         "t = mul(n, s)", "y = add(t, b)"])
    call = Op("t2n_layer_norm_affine", [ln.args[0], y.args[1], y.args[2]], dict(ln.attrs),
              [y.outputs[0]])
    return frag, call, [ln, y]
