"""Collapse chains of layout ops that say in two ops what one says.

The op mappings translate one aten node at a time, so a model's ``x.view(a).view(b)``,
``permute(...).transpose(-1, -2)`` (attention's key) or ``t.expand_as(x)`` feeding a
broadcasting division arrive as written. Three exact rewrites:

* ``reshape(reshape(x, s1), s2)`` -> ``reshape(x, s2)``: a reshape's result depends only on
  the element order and its own target shape (the graph never writes NNEF's "copy this
  axis" 0 in a target; a target holding one is left alone);
* ``transpose(transpose(x, p1), p2)`` -> ``transpose(x, [p1[i] for i in p2])``, or ``x``
  itself when that is the identity;
* ``tract_core_broadcast(t, shape)`` read by an element-wise binary op whose other operand
  already has ``shape`` (same rank): the op broadcasts ``t`` itself, with the same result.

The inner op must have no other reader (nothing would be saved otherwise). Streaming
exports are left alone, like the other layout passes.
"""

from __future__ import annotations

from t2n.walk.builder import Graph, Op, Tensor
from t2n.passes import GraphPass
from t2n.passes.rewrite import Index, enabled, replace_uses

# binary ops that broadcast their operands (NumPy rules, equal ranks) in tract
_BROADCASTING = frozenset({"add", "sub", "mul", "div", "pow", "max", "min", "and", "or",
                           "lt", "gt", "le", "ge", "eq", "ne"})


def run(g: Graph, session) -> None:
    if not enabled(session) or session.streaming is not None:
        return
    _chains(g, "reshape", _merge_reshapes)
    _chains(g, "transpose", _merge_transposes)
    _drop_broadcasts(g)


PASS = GraphPass("collapse", run, options=("optimize",))


def _chains(g: Graph, kind: str, merge) -> None:
    """Rewrite every ``kind(kind(x))`` pair, outermost last, so that chains of any length
    collapse in one sweep (each op reads the already-merged one before it)."""
    index = Index(g)
    for op in list(g.ops):
        if op.kind != kind or len(op.args) != 1:
            continue
        inner = index.made_by(op.args[0], kind)
        if inner is None or len(inner.args) != 1 or index.only_reader(op.args[0]) is None:
            continue
        merge(g, inner, op)


def _merge_reshapes(g: Graph, inner: Op, op: Op) -> None:
    if set(op.attrs) != {"shape"} or set(inner.attrs) != {"shape"}:
        return  # axis_start/axis_count forms depend on the input's shape
    if any(isinstance(d, int) and d == 0 for d in op.attrs["shape"]):
        return
    x = inner.args[0]
    if not isinstance(x, Tensor):
        return
    op.args = [x]
    if tuple(x.shape) == tuple(op.outputs[0].shape) and op.outputs[0] not in g.outputs \
            and x not in g.inputs:
        _bypass(g, op, x)


def _merge_transposes(g: Graph, inner: Op, op: Op) -> None:
    p1 = [int(a) for a in inner.attrs.get("axes", [])]
    p2 = [int(a) for a in op.attrs.get("axes", [])]
    x = inner.args[0]
    if set(op.attrs) != {"axes"} or set(inner.attrs) != {"axes"} or not isinstance(x, Tensor) \
            or sorted(p1) != list(range(x.rank)) or sorted(p2) != list(range(x.rank)):
        return
    perm = [p1[i] for i in p2]
    op.args = [x]
    op.attrs = {"axes": perm}
    if perm == list(range(x.rank)) and op.outputs[0] not in g.outputs:
        _bypass(g, op, x)


def _bypass(g: Graph, op: Op, x: Tensor) -> None:
    """``op`` now computes ``x`` itself: its readers read ``x`` (the op goes unread)."""
    replace_uses(g, op.outputs[0], x)


def _drop_broadcasts(g: Graph) -> None:
    index = Index(g)
    for op in list(g.ops):
        if op.kind not in _BROADCASTING or len(op.args) != 2:
            continue
        for pos in (0, 1):
            b = index.made_by(op.args[pos], "tract_core_broadcast")
            other = op.args[1 - pos]
            if b is None or len(b.args) != 1 or not isinstance(other, Tensor):
                continue
            t, out = b.args[0], b.outputs[0]
            if not isinstance(t, Tensor) or t.rank != out.rank or other.rank != out.rank \
                    or tuple(other.shape) != tuple(out.shape) \
                    or tuple(op.outputs[0].shape) != tuple(out.shape) \
                    or t.dtype != out.dtype:
                continue
            if not all(isinstance(d, int) and (d == 1 or d == o) or d == o
                       for d, o in zip(t.shape, out.shape)):
                continue
            args = list(op.args)
            args[pos] = t
            op.args = args
