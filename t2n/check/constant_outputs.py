"""Outputs that depend on no input: constants in the archive.

A model whose result goes through code the trace cannot see (``np.tanh(x.numpy())``, a
Python float read from a tensor) is recorded with that result as a constant: the archive
then returns the example's output for every input. Outputs can be constant on purpose too
(a fixed table, a size), so such an output is reported, not refused: a warning on export,
and a failed check unless the user declares it (``constant_outputs=[name]``).

An output is input-dependent when a graph input reaches it through the ops' tensor
arguments, or when an op on its path reads a dynamic axis' symbol (``zeros(B, 4)``
depends on the input's size, not on a tensor edge). One pass over the ops, in emission
order (which is a topological order: the writer emits the ops so).
"""

from __future__ import annotations

from t2n.walk.builder import Graph, _flatten
from t2n.errors import UsageError
from t2n.write.nnef_text import _SymDim
from t2n.walk.tensors import Tensor


def input_independent(g: Graph) -> list[str]:
    """Names of the graph's outputs that no input reaches, in output order."""
    reached = {id(t) for t in g.inputs}
    for op in g.ops:
        values = _flatten(op.args) + _flatten(list(op.attrs.values()))
        if any(id(v) in reached for v in values if isinstance(v, Tensor)) or \
                any(_symbolic(v) for v in values) or \
                any(_symbolic(d) for o in op.outputs for d in o.shape):
            reached.update(id(o) for o in op.outputs)
    return [name for name, t in zip(g.output_names, g.outputs)
            if id(t) not in reached and not any(_symbolic(d) for d in t.shape)
            and 0 not in t.shape]  # an empty output holds no value to freeze


def undeclared(g: Graph, out_names: list[str], declared) -> list[str]:
    """Outputs that depend on no input and are not declared ``constant_outputs``: warned
    about now (the session's warnings), failed by the check."""
    declared = [declared] if isinstance(declared, str) else list(declared or ())
    unknown = [n for n in declared if n not in out_names]
    if unknown:
        raise UsageError(f"constant_outputs names {', '.join(unknown)}, which is not an output "
                         f"(outputs: {', '.join(out_names)})")
    found = [n for n in input_independent(g) if n not in declared]
    if found:
        g.session.warnings.append(warning(found))
    return found


def _symbolic(v) -> bool:
    expr = v.expr if isinstance(v, _SymDim) else v
    return bool(getattr(expr, "free_symbols", None))


def warning(names: list[str]) -> str:
    """The export's warning about undeclared constant outputs."""
    listed = ", ".join(names)
    return (f"output(s) {listed} depend on no input: the archive returns the same values for "
            "every input (a result computed outside torch, e.g. through NumPy or .item(), "
            "is frozen by the trace); if that is intended, declare constant_outputs="
            f"{names!r} (--constant-output NAME)")


def check_message() -> str:
    """Why a check fails an undeclared constant output."""
    return ("depends on no input (constant in the archive); declare it with "
            "constant_outputs / --constant-output if that is intended")
