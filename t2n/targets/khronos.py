"""The Khronos target: standard NNEF 1.0.5, readable by the reference parser and tools.

``lower`` walks the live ops once. An op the capability table marks native stays when its
operands have dtypes the standard gives it; an op with an exact standard form is rewritten
in place (its outputs keep their tensors, so consumers are untouched); everything else is
collected, and one :class:`UnsupportedOperatorsError` lists every such op with the aten op
and source line that produced it. Constants that tract reads inline but the standard does
not (array literals, typed ``tract_core_cast`` literals) become variables or plain literals.
"""

from __future__ import annotations

import math

import torch

from t2n.walk.builder import Graph, Op, Tensor, _flatten, format_dim
from t2n.errors import UnsupportedOperatorsError, UsageError
from t2n.targets.base import Target
from t2n.targets.capabilities import COMPARE, FLOAT, LOGICAL, khronos_rule

_NNEF_TYPE = {torch.float32: "scalar", torch.int64: "integer", torch.bool: "logical"}


class KhronosTarget(Target):
    def lower(self, g: Graph) -> None:
        if g.symbols:
            dyn = [f"{t.name} {list(map(format_dim, t.shape))}" for t in g.inputs
                   if any(not isinstance(d, int) for d in t.shape)]
            raise UsageError("target 'khronos' writes static shapes only (standard NNEF has "
                             "no symbolic sizes): export without dynamic_axes"
                             + (f" (dynamic: {', '.join(dyn)})" if dyn else ""))
        for t in g.inputs:
            if t.dtype not in _NNEF_TYPE:
                raise UsageError(f"target 'khronos': input {t.name} has dtype {t.dtype}; "
                                 "standard NNEF graphs take float32, int64 or bool inputs")
        problems: dict[str, list[tuple[str, str | None]]] = {}
        new_ops: list[Op] = []
        for op in g.live_ops():
            reason = _unsupported(op)
            if reason is None:
                rule = khronos_rule(op.kind)
                if rule.startswith("lower:"):
                    try:
                        new_ops += _rewrite(g, op, LOWERINGS[rule[6:]])
                    except _NoForm as e:
                        reason = str(e)
                else:
                    new_ops.append(op)
            if reason is not None:
                aten, where = (op.origin.op, op.origin.where) if op.origin else (op.kind, None)
                problems.setdefault(aten, []).append((reason, where))
        for t in g.outputs:
            if isinstance(t, Tensor) and t.dtype not in _NNEF_TYPE:
                problems.setdefault("output", []).append(
                    (f"output of dtype {t.dtype}: standard NNEF carries float32, int64 and "
                     "bool only", None))
        if problems:
            raise UnsupportedOperatorsError(problems, target="khronos")
        g.ops = new_ops
        _standard_literals(g)


class _NoForm(Exception):
    """A lowering that cannot express this particular instance (message = reason)."""


def _unsupported(op: Op) -> str | None:
    """Why ``op`` cannot be written for Khronos, or None when it can."""
    rule = khronos_rule(op.kind)
    if rule is None:
        return f"{op.kind} has no standard NNEF form (target 'khronos')"
    tensors = [a for a in _flatten(op.args) + _flatten(list(op.attrs.values()))
               if isinstance(a, Tensor)]
    for t in tensors + list(op.outputs):
        if t.dtype not in _NNEF_TYPE:
            return (f"{op.kind} on {t.dtype} tensors: standard NNEF carries float32, int64 "
                    "and bool only")
    if rule in (FLOAT, COMPARE):
        bad = next((t.dtype for t in tensors if t.dtype != torch.float32), None)
        if bad is not None:
            return (f"{op.kind} on {bad} operands: standard NNEF has {op.kind} for float "
                    "(scalar) tensors only")
    if rule == LOGICAL and any(t.dtype != torch.bool for t in tensors):
        return f"{op.kind} on non-logical operands"
    return None


def _rewrite(g: Graph, op: Op, lowering) -> list[Op]:
    """The standard ops replacing ``op``; the last ones write ``op``'s own output tensors."""
    saved, g.ops = g.ops, []
    node, g.node = g.node, None
    try:
        results = lowering(g, op)
        emitted = g.ops
    finally:
        g.ops, g.node = saved, node
    for new, old in zip(results, op.outputs):
        if new is old:
            continue
        producer = next((o for o in emitted if new in o.outputs), None)
        if producer is None:  # the result is an existing tensor or constant: copy it
            producer = Op("copy", [new], {}, [new])
            emitted.append(producer)
        producer.outputs[producer.outputs.index(new)] = old
    for o in emitted:
        o.origin = op.origin
    return emitted


# ---------------------------------------------------------------------------- lowerings
def _arg(op: Op, i: int, name: str, default=None):
    if name in op.attrs:
        return op.attrs[name]
    return op.args[i] if len(op.args) > i else default


def _cast(g, op):
    to = _arg(op, 1, "to")
    target = {"f32": torch.float32, "i64": torch.int64, "bool": torch.bool}.get(str(to).lower())
    if target is None:
        raise _NoForm(f"cast to {to}: standard NNEF carries float32, int64 and bool only")
    x = op.args[0]
    if isinstance(x, Tensor) and x.dtype == target:
        return [x]
    return [g.op(f"cast<{_NNEF_TYPE[target]}>", x, out_dtype=target,
                 out_shape=op.outputs[0].shape)]


def _gather(g, op):
    x, idx = op.args[0], op.args[1]
    axis = _arg(op, 2, "axis", 0)
    if idx.is_const and (idx.value < 0).any():
        idx = g.const(torch.where(idx.value < 0, idx.value + x.shape[axis], idx.value))
    return [g.op("gather", x, idx, axis=axis, out_shape=op.outputs[0].shape)]


def _silu(g, op):
    return [g.op("silu", op.args[0])]


def _hard_swish(g, op):
    # PyTorch: x * relu6(x + 3) / 6
    x = op.args[0]
    r = g.op("clamp", g.op("add", x, 3.0), 0.0, 6.0, out_shape=x.shape)
    return [g.op("div", g.op("mul", x, r), 6.0)]


def _gelu_tanh(g, op):
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    x = op.args[0]
    x3 = g.op("mul", g.op("mul", x, x), x)
    inner = g.op("mul", g.op("add", x, g.op("mul", x3, 0.044715)), math.sqrt(2.0 / math.pi))
    return [g.op("mul", g.op("mul", x, 0.5), g.op("add", g.op("tanh", inner), 1.0))]


# Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7 everywhere, below float32's resolution of erf)
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _erf(g, op):
    x = op.args[0]
    ax = g.op("abs", x)
    t = g.op("div", 1.0, g.op("add", g.op("mul", ax, _ERF_P), 1.0), out_shape=x.shape)
    poly = g.op("mul", t, _ERF_A[4])
    for a in reversed(_ERF_A[:4]):
        poly = g.op("mul", g.op("add", poly, a), t)
    e = g.op("exp", g.op("neg", g.op("mul", ax, ax)))
    y = g.op("sub", 1.0, g.op("mul", poly, e), out_shape=x.shape)
    return [g.op("mul", g.op("sign", x), y)]


def _axes(op: Op) -> list[int]:
    axes = _arg(op, 1, "axes")
    if isinstance(axes, Tensor):
        if not axes.is_const:
            raise _NoForm("softmax over runtime axes")
        axes = axes.value.reshape(-1).tolist()
    return [int(a) for a in (axes if isinstance(axes, (list, tuple)) else [axes])]


def _softmax(g, op):
    return [g.op("softmax", op.args[0], axes=_axes(op))]


def _log_softmax(g, op):
    x, axes = op.args[0], _axes(op)
    kept = tuple(1 if i in [a % x.rank for a in axes] else d for i, d in enumerate(x.shape))
    m = g.op("max_reduce", x, axes=axes, out_shape=kept)
    s = g.op("sub", x, m)
    z = g.op("sum_reduce", g.op("exp", s), axes=axes, out_shape=kept)
    return [g.op("sub", s, g.op("log", z))]


def _rms_norm(g, op):
    x = op.args[0]
    scaled = op.kind == "tract_core_scaled_rms_norm"
    scale = _arg(op, 1, "scale") if scaled else None
    axis = int(_arg(op, 2 if scaled else 1, "axis"))
    eps = float(_arg(op, 3 if scaled else 2, "eps", 1e-6))
    kept = tuple(1 if i == axis % x.rank else d for i, d in enumerate(x.shape))
    ms = g.op("mean_reduce", g.op("mul", x, x), axes=[axis % x.rank], out_shape=kept)
    y = g.op("mul", x, g.op("rsqrt", g.op("add", ms, eps)))
    return [g.op("mul", y, scale) if scaled else y]


def _broadcast(g, op):
    x = op.args[0]
    shape = [int(d) for d in op.outputs[0].shape]
    if x.rank < len(shape):
        x = g.op("unsqueeze", x, axes=list(range(len(shape) - x.rank)),
                 out_shape=(1,) * (len(shape) - x.rank) + tuple(x.shape))
    reps = [s // d if d != s else 1 for s, d in zip(shape, x.shape)]
    if all(r == 1 for r in reps):
        return [x]
    return [g.op("tile", x, repeats=reps, out_shape=shape)]


def _constant(g, op):
    out = op.outputs[0]
    if op.kind == "tract_core_shape_of":
        value = torch.tensor([int(d) for d in op.args[0].shape], dtype=torch.int64)
    else:  # tract_core_range(start, end, step) with literal bounds
        bounds = [_arg(op, i, n) for i, n in enumerate(("start", "end", "step"))]
        vals = [b.value.item() if isinstance(b, Tensor) and b.is_const else b for b in bounds]
        if any(isinstance(v, Tensor) or not isinstance(v, (int, float)) for v in vals):
            raise _NoForm("tract_core_range with runtime bounds")
        value = torch.arange(*vals, dtype=out.dtype)
    return [g.variable(value.reshape(out.shape).to(out.dtype))]


def _xor(g, op):
    a, b = op.args[0], op.args[1]
    return [g.op("and", g.op("or", a, b), g.op("not", g.op("and", a, b)))]


def _float_only(op: Op) -> None:
    bad = next((t.dtype for t in _flatten(op.args) if isinstance(t, Tensor)
                and t.dtype != torch.float32), None)
    if bad is not None:
        raise _NoForm(f"{op.kind} on {bad} operands: standard NNEF has {op.kind} for float "
                      "(scalar) tensors only")


def _deconv(g, op):
    """The standard ``deconv`` filter is ``[C_in, C_out/groups, k...]`` (PyTorch's layout;
    the Khronos shape rules check ``filter[0] == input channels``), tract's is
    ``[C_out, C_in/groups, k...]`` (what the graph holds, t2n's conv mapping): regroup it
    back, per group, for any rank (1-D/2-D/3-D), dilation and padding."""
    x, w = op.args[0], op.args[1]
    _float_only(op)
    groups = int(op.attrs.get("groups", 1) or 1)
    c_out, c_in_g = w.shape[0], w.shape[1]
    kernel = list(w.shape[2:])
    if c_out % groups:
        raise _NoForm(f"deconv filter of {c_out} rows in {groups} groups")
    c_out_g = c_out // groups
    if w.is_const:
        data = w.value.reshape(groups, c_out_g, c_in_g, *kernel).transpose(1, 2)
        data = data.reshape(groups * c_in_g, c_out_g, *kernel).contiguous()
        var = next((v for v in g.variables if v.tensor is w), None)
        w2 = g.variable(data, var.label if var else None)
    else:
        w2 = g.op("reshape", w, shape=[groups, c_out_g, c_in_g] + kernel,
                  out_shape=[groups, c_out_g, c_in_g] + kernel)
        perm = [0, 2, 1] + list(range(3, 3 + len(kernel)))
        w2 = g.op("transpose", w2, axes=perm, out_shape=[groups, c_in_g, c_out_g] + kernel)
        w2 = g.op("reshape", w2, shape=[groups * c_in_g, c_out_g] + kernel,
                  out_shape=[groups * c_in_g, c_out_g] + kernel)
    args = [x, w2] + list(op.args[2:])
    y = op.outputs[0]
    return [g.op("deconv", *args, out_shape=list(y.shape), out_dtype=y.dtype, **op.attrs)]


def _linear(g, op):
    """The standard ``linear`` takes a rank-2 input and filter only: any other rank is
    ``matmul(x, W, transposeB = true)`` with the filter lifted to the input's rank (NNEF's
    ``matmul`` wants equal ranks), plus the bias at the output's rank."""
    x, w = op.args[0], op.args[1]
    _float_only(op)
    b = op.args[2] if len(op.args) > 2 else None
    y = op.outputs[0]
    if x.rank == 2 and w.rank == 2 and (not isinstance(b, Tensor) or b.rank <= 2):
        return [g.op("linear", *op.args, out_shape=list(y.shape), out_dtype=y.dtype,
                     **op.attrs)]
    if w.rank < x.rank:
        lifted = [1] * (x.rank - w.rank) + list(w.shape)
        w = g.reshaped_const(w, lifted) if w.is_const else g.op(
            "unsqueeze", w, axes=list(range(x.rank - w.rank)), out_shape=lifted)
    t = g.op("matmul", x, w, transposeA=False, transposeB=True, out_shape=list(y.shape),
             out_dtype=y.dtype)
    if b is None or (isinstance(b, Tensor) and b.is_const and not bool(b.value.any())):
        return [t]
    if isinstance(b, Tensor) and b.rank != y.rank:
        lifted = [1] * (y.rank - b.rank) + list(b.shape)
        b = g.reshaped_const(b, lifted) if b.is_const else g.op(
            "unsqueeze", b, axes=list(range(y.rank - b.rank)), out_shape=lifted)
    return [g.op("add", t, b, out_shape=list(y.shape), out_dtype=y.dtype)]


LOWERINGS = {
    "deconv": _deconv, "linear": _linear,
    "cast": _cast, "gather": _gather, "silu": _silu, "hard_swish": _hard_swish,
    "gelu_tanh": _gelu_tanh, "erf": _erf, "softmax": _softmax, "log_softmax": _log_softmax,
    "rms_norm": _rms_norm, "broadcast": _broadcast, "constant": _constant, "xor": _xor,
}


# ---------------------------------------------------------------------------- literals
def _standard_literals(g: Graph) -> None:
    """Array literals become variables; typed scalar literals become plain ones."""
    memo: dict[int, Tensor] = {}

    def fix(v):
        if isinstance(v, list):
            return [fix(x) for x in v]
        if isinstance(v, tuple):
            return tuple(fix(x) for x in v)
        if not isinstance(v, Tensor) or v.literal is None:
            return v
        plain = v.dtype == torch.float32 and v.rank == 0
        if plain:
            return v
        if id(v) not in memo:
            if v.rank == 0 and v.dtype in (torch.int64, torch.bool):
                item = v.value.item()
                text = ("true" if item else "false") if v.dtype == torch.bool else str(int(item))
                memo[id(v)] = Tensor(text, (), v.dtype, value=v.value, literal=text)
            else:
                memo[id(v)] = g.variable(v.value.contiguous())
        return memo[id(v)]

    for op in g.ops:
        op.args = [fix(a) for a in op.args]
        op.attrs = {k: fix(a) for k, a in op.attrs.items()}
    g.outputs = [fix(t) for t in g.outputs]


KHRONOS = KhronosTarget(name="khronos", extensions=(), declares_symbols=False,
                        checker="nnef-tools", help="standard NNEF 1.0.5: standard operations, "
                        "static shapes")
