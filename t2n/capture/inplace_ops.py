"""In-place ops of a ``torch.export`` program read as their functional op where nothing can
observe the difference, so the program needs no functionalising re-trace.

``torch.export`` records ``nn.ReLU(inplace=True)`` and ``out += identity`` as ``relu_`` and
``add_``; ``run_decompositions`` removes them by re-tracing the whole program (most of an
export's capture time on a CNN). The common case needs none of it: an in-place op writing
into a fresh intermediate (not an input, weight or view; no view of it taken) whose old
value no later node reads computes exactly what its functional form computes, and the
later nodes already read the in-place node's result. Anything else (a write into a view, an
input or a buffer, a value read again after the write) is left for ``run_decompositions``.
"""

from __future__ import annotations

import operator

import torch


def functionalize_simple_writes(graph: torch.fx.Graph) -> None:
    """Retarget each in-place node of ``graph`` that :func:`_rewritable` proves safe to its
    functional overload (``relu_.default`` -> ``relu.default``), in place."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    for node in graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload) \
                or not node.target._schema.is_mutable:
            continue
        functional = _functional(node.target)
        if functional is not None and _rewritable(node, order):
            node.target = functional


def _functional(op):
    """``aten::name_.overload`` -> ``aten::name.overload`` when ``op`` writes its first
    argument only and returns it, and the functional overload takes the same arguments."""
    schema = op._schema
    name = schema.name.split("::", 1)[1]
    args, rets = schema.arguments, schema.returns
    if op.namespace != "aten" or not name.endswith("_") or name.endswith("__") or not args \
            or len(rets) != 1:
        return None
    written = [a for a in args if a.alias_info is not None and a.alias_info.is_write]
    if written != [args[0]] or rets[0].alias_info is None \
            or rets[0].alias_info.before_set != args[0].alias_info.before_set:
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    functional = getattr(packet, op._overloadname, None) if packet is not None else None
    if functional is None or functional._schema.is_mutable:
        return None
    if [(a.name, str(a.type)) for a in functional._schema.arguments] != \
            [(a.name, str(a.type)) for a in args]:
        return None
    return functional


def _rewritable(node, order: dict) -> bool:
    """The written value is a fresh intermediate no one else sees after the write."""
    target = node.args[0] if node.args else None
    if not isinstance(target, torch.fx.Node) or not _fresh(target):
        return False
    for user in target.users:
        if user is node:
            continue
        # a later read sees the write; a view shares it; another write to the same value
        # (a second in-place op on it) reads the old value where torch reads the new
        if order[user] > order[node] or _aliases(user) or _writes(user):
            return False
    return True


def _fresh(n) -> bool:
    """``n`` is a new tensor computed in the graph (no input, weight, constant or view)."""
    if n.op != "call_function":
        return False
    if n.target is operator.getitem:  # one result of a multi-result op
        return isinstance(n.args[0], torch.fx.Node) and _fresh(n.args[0])
    return isinstance(n.target, torch._ops.OpOverload) and not _aliases(n)


def _aliases(n) -> bool:
    """Whether node ``n``'s result may share memory with an argument (a view, an in-place
    or out= op, or anything that is not a plain aten op)."""
    if n.op != "call_function":
        return n.op != "output"
    if n.target is operator.getitem:
        return isinstance(n.args[0], torch.fx.Node) and _aliases(n.args[0])
    if not isinstance(n.target, torch._ops.OpOverload):
        return True
    return any(r.alias_info is not None for r in n.target._schema.returns)


def _writes(n) -> bool:
    return n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) \
        and n.target._schema.is_mutable
