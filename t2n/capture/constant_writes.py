"""Constants the traced code writes in place keep the value they had when the trace read them.

``torch.jit.trace`` records a tensor it did not see computed (``torch.tensor(0)``, a plain
tensor attribute) as a constant that holds *the tensor itself*, not a copy. When the model
then writes that tensor in place (transformers 5.25's linear-attention cache counts tokens
with ``cumulative_length_linear.add_(S)``), the trace records the write as an op, and the
constant, read after tracing, already holds the written value: the graph would apply the
write twice (a token counter reads ``S`` instead of ``0``, so positions start at ``S``).

:func:`written_constants` finds such constants in a traced graph (rare: most models write
only into tensors they computed). When there are any, :func:`trace_keeping_constants` traces
the model again under
:class:`KeepValuesBeforeWrites`, which swaps a copy into the constant just before the first
in-place op reaches it. Untouched models are traced once and unchanged.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

_AUGMENTED = frozenset({
    "__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
    "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
    "__imatmul__"})


def written_constants(graph) -> list:
    """The tensor ``prim::Constant`` nodes of ``graph`` that an in-place op writes, directly
    or through views of them."""
    found = {}  # by the constant's value id: a node's Python wrapper is not unique
    for node in graph.nodes():
        kind = node.kind()
        if not kind.endswith("_") or kind.endswith("__") or node.inputsSize() == 0:
            continue
        schema = _schema(node)
        if schema is None or not schema.arguments or not _writes(schema.arguments[0]):
            continue
        const = _constant_under(node.inputsAt(0).node())
        if const is not None:
            found.setdefault(const.output().unique(), const)
    return list(found.values())


def trace_keeping_constants(trace, graph_of):
    """``(traced, graph)``: ``trace()`` once, and again under :class:`KeepValuesBeforeWrites`
    when its graph writes a constant (``graph_of(traced)`` gives the graph)."""
    traced = trace()
    graph = graph_of(traced)
    if written_constants(graph):
        with KeepValuesBeforeWrites():
            traced = trace()
        graph = graph_of(traced)
    return traced, graph


class KeepValuesBeforeWrites(TorchFunctionMode):
    """While tracing: before an in-place op (``add_``, ``x[i] = v``, ``x += y``) runs on a
    tensor the graph holds as a constant (or a view of one), give that constant a copy of
    its current value, so the write no longer reaches it."""

    def __init__(self):
        super().__init__()
        self._copies: list[torch.Tensor] = []  # kept alive: identity marks a done constant

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if args and isinstance(args[0], torch.Tensor) and torch._C._is_tracing() and (
                (name.endswith("_") and not name.endswith("__")) or name in _AUGMENTED):
            self._keep(args[0])
        out = kwargs.get("out")
        if isinstance(out, torch.Tensor) and torch._C._is_tracing():
            self._keep(out)
        return func(*args, **kwargs)

    def _keep(self, tensor: torch.Tensor) -> None:
        const = _constant_under(torch._C._get_value_trace(tensor).node())
        if const is None:
            return
        value = const.t("value")
        if any(value is c for c in self._copies):
            return
        copy = value.clone()
        const.t_("value", copy)
        self._copies.append(const.t("value"))


def _constant_under(node):
    """The tensor constant ``node``'s value is a view of (``node`` itself when it is one),
    following ops whose result aliases their first argument (``to``, ``detach``, ``view``,
    ``select``, the pieces of a ``split`` ...); None when the value is computed."""
    while node.kind() != "prim::Constant":
        if node.kind() == "prim::ListUnpack" and node.inputsSize() == 1:
            node = node.inputsAt(0).node()  # one piece of a split/chunk/unbind
            continue
        schema = _schema(node)
        if schema is None or not schema.arguments or not schema.returns \
                or schema.returns[0].alias_info is None \
                or schema.arguments[0].alias_info is None or node.inputsSize() == 0:
            return None
        node = node.inputsAt(0).node()
    if "value" not in node.attributeNames() or node.kindOf("value") != "t":
        return None
    return node


def _schema(node):
    try:
        return torch._C.parse_schema(node.schema())
    except RuntimeError:  # "(no schema)": prim:: nodes
        return None


def _writes(argument) -> bool:
    return argument.alias_info is not None and argument.alias_info.is_write
