"""Caches that tract keeps between runs: ``concat([past, new])`` -> ``tract_transformers_dyn_kv_cache``.

A decoder step exported with its cache as tensors takes the past keys/values as inputs and
returns ``concat([past, new], axis)`` as outputs; the caller feeds each step's outputs back
as the next step's inputs, so the whole past crosses the API twice per step (copied in,
copied out). tract's stateful operator ``tract_transformers_dyn_kv_cache`` (registry
``tract_transformers``) computes the same concatenation with the past it keeps in the
run's ``State``: a ``tract.State`` starts with an empty cache (the past axis's symbol is
0 then), and each of its runs appends ``new`` and returns the concatenation, which the
rest of the graph reads as before. The symbol of the past axis (``P``) is resolved from
the kept cache at each run (verified in tract 0.23.9), so the positions and masks the
graph computes from ``P`` stay right.

The option ``stateful_caches={input_name: output_name, ...}`` names the pairs to fold.
Each input must be read by exactly one op, a two-input ``concat`` with the input first,
whose result is that graph output, and whose one dynamic axis is a lone symbol in both
operands (tract's op resizes one axis); anything else is refused naming the pair. The
pairs leave the graph's inputs and outputs; the concatenation stays readable inside the
graph. The archive then declares ``extension tract_registry tract_transformers;`` and loads
with ``tract.nnef().with_tract_transformers()``.
"""

from __future__ import annotations

from t2n.dtypes import tract_name
from t2n.errors import UsageError
from t2n.passes import GraphPass
from t2n.walk.builder import Graph

OPTION = "stateful_caches"
REGISTRY = "tract_registry tract_transformers"
EXTENSIONS = "extensions"  # g.shared key: the extension lines the graph's ops need


def run(g: Graph, session) -> None:
    pairs = session.options.get(OPTION)
    if not pairs:
        return
    if not session.target.can("stateful_cache"):
        raise UsageError(f"{OPTION}: target {session.target.name} has no stateful cache "
                         "(tract's tract_transformers_dyn_kv_cache)")
    if session.check.run:
        raise UsageError(f"{OPTION}: check=True compares outputs on the example inputs, "
                         "which the folded caches no longer take (t2n llm --check generates "
                         "with the State instead)")
    if not isinstance(pairs, dict):
        raise UsageError(f"{OPTION} must be a dict of input name -> output name")
    inputs = {t.name: t for t in g.inputs}
    outputs = dict(zip(g.output_names, g.outputs))
    readers: dict[int, list] = {}
    for op in g.ops:
        for a in _tensors(op.args) + _tensors(list(op.attrs.values())):
            readers.setdefault(id(a), []).append(op)
    folded_in, folded_out = set(), set()
    for name, out_name in pairs.items():
        past, present = inputs.get(name), outputs.get(out_name)
        if past is None or present is None:
            raise UsageError(f"{OPTION}: {name!r} -> {out_name!r}: no graph "
                             f"{'input' if past is None else 'output'} of that name")
        ops = readers.get(id(past), [])
        op = ops[0] if len(ops) == 1 else None
        if op is None or op.kind != "concat" or len(op.args) != 1 \
                or len(op.args[0]) != 2 or op.args[0][0] is not past \
                or op.outputs[0] is not present:
            raise UsageError(f"{OPTION}: {name!r} is not only the first operand of a "
                             f"two-input concat giving {out_name!r}")
        new, axis = op.args[0][1], op.attrs["axis"] % past.rank
        if not (_lone_symbol(past.shape[axis]) and _lone_symbol(new.shape[axis])) or any(
                a != b for i, (a, b) in enumerate(zip(past.shape, new.shape)) if i != axis) \
                or past.dtype != new.dtype:
            raise UsageError(f"{OPTION}: {name!r} {list(past.shape)} and the new "
                             f"{list(new.shape)}: one axis of a symbol each, the others "
                             "equal, one dtype")
        op.kind = "tract_transformers_dyn_kv_cache"
        op.args = [new]
        op.attrs = {"name": name, "axis": axis, "datum_type": tract_name(past.dtype),
                    "past_sequence_shape": list(past.shape),
                    "input_sequence_shape": list(new.shape)}
        folded_in.add(id(past))
        folded_out.add(id(present))
    g.inputs = [t for t in g.inputs if id(t) not in folded_in]
    kept = [(t, n) for t, n in zip(g.outputs, g.output_names) if id(t) not in folded_out]
    g.outputs, g.output_names = [t for t, _ in kept], [n for _, n in kept]
    g.shared.setdefault(EXTENSIONS, [])
    if REGISTRY not in g.shared[EXTENSIONS]:
        g.shared[EXTENSIONS].append(REGISTRY)


def _lone_symbol(d) -> bool:
    import sympy  # here: a static export loads no sympy (tests/test_import_cost.py)

    return isinstance(d, sympy.Symbol)


def _tensors(values) -> list:
    from t2n.walk.builder import _flatten
    from t2n.walk.tensors import Tensor

    return [a for a in _flatten(values) if isinstance(a, Tensor)]


PASS = GraphPass(name="stateful_cache", run=run, options=(OPTION,))
