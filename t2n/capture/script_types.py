"""Tensor types for TorchScript graphs that carry none.

A graph traced in this process records each value's dtype, sizes and strides, but a graph read
from a file saved with ``torch.jit.save`` (traced or scripted) has lost them, and a scripted
module was never traced: its values are bare ``Tensor``. The walker needs PyTorch's dtype and
sizes for every value (result dtypes, promotions, shapes), so this module runs the graph once
on the example inputs with every untyped top-level tensor value returned as an extra output,
and gives each value the complete type of the tensor it held, as tracing would have.

A graph traced in this process leaves only its ``prim::GetAttr`` values (the module's
parameters and buffers) untyped: those are typed from the module's attributes themselves, the
very tensors a run would return, so such a graph is not run a second time.
"""

from __future__ import annotations

import torch

from t2n.stopwatch import timed


def _untyped(v) -> bool:
    t = v.type()
    return t.kind() == "TensorType" and (t.dtype() is None or t.sizes() is None)


def _typed(t: torch.Tensor):
    return torch._C.TensorType.create_from_tensor(t)


@timed("types")
def complete_types(graph: torch._C.Graph, root, args) -> None:
    """Type ``graph``'s untyped tensor values in place from one run of it on ``args``.

    ``root`` is the module whose ``_c`` is the graph's first input (``self``). The graph is
    left as it was apart from the types: the extra outputs are removed after the run. Values
    inside blocks (scripted loops/ifs) keep their types; a graph that fails to run is left
    untouched (the walker then reports what it cannot convert)."""
    ins = list(graph.inputs())[1:]
    _type_attributes(graph, root)
    vals = [v for n in graph.nodes() for v in n.outputs() if _untyped(v)]
    if not any(_untyped(v) for v in ins) and not vals:
        return
    outs = list(graph.outputs())
    tup = graph.create("prim::TupleConstruct", outs + vals)
    graph.appendNode(tup)
    tup.output().setType(torch._C.TupleType([v.type() for v in outs + vals]))
    for _ in outs:
        graph.eraseOutput(0)
    graph.registerOutput(tup.output())
    try:
        fn = torch._C._create_function_from_graph("t2n_complete_types", graph)
        with torch.no_grad():
            res = fn(root._c, *args)
    except Exception:  # noqa: BLE001 - the walker's own checks name the failing op
        return
    finally:
        graph.eraseOutput(0)
        for v in outs:
            graph.registerOutput(v)
        tup.destroy()
    for v, a in zip(ins, args):
        if isinstance(a, torch.Tensor) and _untyped(v):
            v.setType(_typed(a))
    for v, t in zip(vals, res[len(outs):]):
        if isinstance(t, torch.Tensor):
            v.setType(_typed(t))


# ops after which an attribute read may hold another tensor, or one of another shape, than
# the module's attribute before the run: such graphs are typed by running them
_MUTATING = frozenset(("prim::SetAttr", "aten::resize_", "aten::resize_as_", "aten::set_"))


def _type_attributes(graph: torch._C.Graph, root) -> None:
    """Type the untyped top-level ``prim::GetAttr`` values that read a tensor attribute of
    ``root`` (through submodules): the tensor a run would return is that attribute itself,
    whose complete type is known without running anything."""
    def mutates(block) -> bool:
        return any(n.kind() in _MUTATING or any(mutates(b) for b in n.blocks())
                   for n in block.nodes())

    if mutates(graph):
        return
    objects = {list(graph.inputs())[0]: root._c}
    for n in graph.nodes():
        if n.kind() != "prim::GetAttr":
            continue
        owner = objects.get(n.input())
        name = n.s("name")
        if owner is None or not hasattr(owner, "hasattr") or not owner.hasattr(name):
            continue
        value = owner.getattr(name)
        out = n.output()
        if isinstance(value, torch.Tensor):
            if _untyped(out):
                out.setType(_typed(value))
        else:
            objects[out] = value
