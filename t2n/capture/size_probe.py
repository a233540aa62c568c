"""Does the traced graph depend on the size of a dynamic axis? A second trace tells.

``torch.jit.trace`` records the ops one call runs. Python that reads a size as a number
(``for i in range(x.shape[1] // 4)``, ``if x.shape[1] > 8:``, ``torch.chunk(x,
x.shape[1] // 2)``, a gated delta net's ``range(num_chunks)``) is run once, at the
example's size, and its result is frozen into the graph: an archive with that axis dynamic
would compute the example's loop count for every size. Most such code leaves no tracer
warning (a size is a Python int, and ``range`` of an int is no tensor conversion), and
tracer warnings come also from harmless code (BERT's mask checks), so the warnings cannot
decide.

What decides is the graph itself: when dynamic axes are given, the model is traced once
more with every dynamic axis at another size (:func:`probe_sizes`: 129 more for a length,
three times the example's for a batch, within the user's bounds), and the two graphs are compared node by node (op
kinds and constant values: a size the trace read as a number shows up as a changed
constant or a changed op sequence). Any difference refuses the export, naming the
symbol(s) and the source line of the first node that differs. A graph that reads its
sizes through ``aten::size`` (every model the tracer can export dynamically) traces to
the same nodes at every size. Cost: one more trace, only for exports with dynamic axes.
"""

from __future__ import annotations

import os

import torch

from t2n.errors import ConversionError, T2NError


FAR = 129  # a length is probed this much longer: chunk loops of up to 129 change count
_BATCH_LIKE = 2  # an axis this small in the example (a batch) is probed at 3n + 1 only


def probe_sizes(n: int, least: int, most: int | None) -> list[int]:
    """Sizes to trace a dynamic axis of example size ``n`` at, best first, within [least,
    most]: ``n + 129`` for an axis longer than a batch (a loop over ``ceil(n / k)`` chunks,
    Qwen3-Next's chunks of 64, changes count for every ``k`` up to 129; odd, so a parity
    branch flips too; longer only by a constant, so the trace's compute stays near the
    example's), ``3n + 1`` for a batch, then ``3n + 1``, ``2n`` and ``n + 1`` for a model
    that rejects longer inputs (a position table)."""
    far = 3 * n + 1 if n <= _BATCH_LIKE else n + FAR
    out = []
    for c in (far, 3 * n + 1, 2 * n, n + 1):
        if most is not None:
            c = min(c, most)
        if c >= max(least, 1) and c != n and c not in out:
            out.append(c)
    return out


def resized(t: torch.Tensor, axis: int, size: int) -> torch.Tensor:
    """``t`` with ``axis`` at ``size``: its own values repeated along the axis (token ids
    stay valid ids, a mask of ones stays ones), zeros when the example axis is empty."""
    n = t.shape[axis]
    if n == 0:
        shape = list(t.shape)
        shape[axis] = size
        return torch.zeros(shape, dtype=t.dtype)
    reps = [1] * t.dim()
    reps[axis] = -(-size // n)
    return t.repeat(reps).narrow(axis, 0, size).contiguous()


def signature(graph) -> list[tuple[str, object]]:
    """(op kind, constant value or tensor constant's shape) of each node, in order."""
    out = []
    for node in graph.nodes():
        kind = node.kind()
        value = None
        if kind == "prim::Constant" and node.hasAttribute("value"):
            attr = node.kindOf("value")
            v = getattr(node, attr)("value")
            value = (tuple(v.shape), str(v.dtype)) if isinstance(v, torch.Tensor) else repr(v)
        out.append((kind, value, node))
    return out


def first_difference(a, b):
    """Index of the first node that differs between two signatures, or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x[:2] != y[:2]:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def source_line(node) -> str | None:
    """``file.py:LINE`` of the innermost frame outside torch and t2n that made ``node``."""
    try:
        text = node.sourceRange()
    except Exception:
        return None
    skip = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, _t2n()))
    for line in text.splitlines():
        path, _, rest = line.partition("(")
        if not rest or path.startswith(skip) or path.startswith("<"):
            continue
        return f"{path}:{rest.split(')', 1)[0]}"
    return None


def _t2n():
    import t2n

    return t2n


def check_structure(trace_graph, retrace, args, symbols: dict[int, dict[int, str]],
                    least: dict[str, int], most: dict[str, int]) -> None:
    """Refuse (ConversionError) when the graph traced at other sizes of the dynamic axes
    differs from ``trace_graph``. ``retrace(tensors)`` traces the model on other inputs and
    returns its graph (or raises when the model rejects them); ``symbols`` maps input index
    -> {axis: symbol}, ``least``/``most`` give each symbol's bounds."""
    sizes = _example_sizes(args, symbols)
    if not sizes:
        return
    base = signature(trace_graph)
    per = {s: probe_sizes(n, least.get(s, 1), most.get(s)) for s, n in sizes.items()}
    for k in range(max((len(c) for c in per.values()), default=0)):
        trial = {s: c[min(k, len(c) - 1)] for s, c in per.items() if c}
        graph = _traced_at(retrace, args, symbols, trial)
        if graph is None:
            continue  # the model rejects these sizes: try nearer ones
        other = signature(graph)
        i = first_difference(base, other)
        if i is None:
            return
        culprits = _culprits(retrace, args, symbols, trial, base) if len(trial) > 1 else trial
        _refuse(base, other, i, sizes, culprits)
    return


def _example_sizes(args, symbols) -> dict[str, int]:
    out: dict[str, int] = {}
    for i, axes in symbols.items():
        for axis, sym in axes.items():
            out.setdefault(sym, int(args[i].shape[axis]))
    return out


def _traced_at(retrace, args, symbols, trial: dict[str, int]):
    tensors = list(args)
    for i, axes in symbols.items():
        for axis, sym in axes.items():
            if sym in trial:
                tensors[i] = resized(tensors[i], axis, trial[sym])
    try:
        return retrace(tuple(tensors))
    except T2NError:
        return None
    except Exception:
        return None


def _culprits(retrace, args, symbols, trial, base) -> dict[str, int]:
    """The symbols whose size alone changes the graph (all of ``trial`` when none alone)."""
    found = {}
    for s, n in trial.items():
        graph = _traced_at(retrace, args, symbols, {s: n})
        if graph is not None and first_difference(base, signature(graph)) is not None:
            found[s] = n
    return found or trial


_PLUMBING = ("prim::Constant", "prim::ListConstruct", "prim::TupleConstruct")


def _first_op(sig, i: int):
    """The first node from ``i`` on that is an op rather than a constant or a list."""
    return next((n for _, _, n in sig[i:] if n.kind() not in _PLUMBING), None)


def _refuse(base, other, i: int, sizes: dict[str, int], culprits: dict[str, int]):
    node = (base[i] if i < len(base) else other[i])[2]
    op = _first_op(base, i) or _first_op(other, i) or node
    here = source_line(node) if i < len(base) else None
    there = source_line(other[i][2]) if i < len(other) else None
    probe = " ".join(f"{s}={n}" for s, n in culprits.items())
    # the example's line, and the line the other size reaches there (a branch's other arm,
    # the loop body one more iteration runs)
    where = ", ".join([w for w in (here, there and there != here and f"{there} at {probe}")
                       if w]) or None
    names = ", ".join(culprits)
    at = ", ".join(f"{s}={sizes[s]} and {s}={n}" for s, n in culprits.items())
    raise ConversionError(
        op.kind(),
        f"the traced graph changes with the size of dynamic axis {names} (traced at {at}): "
        "the model's Python reads that size as a number (a loop over range(...) of it, a "
        "branch on it, a split into a number of pieces computed from it), which the trace "
        f"fixes to the example's size; keep {names} static (drop it from dynamic_axes), make "
        "that code size-generic, or try capture='export' (it follows sizes computed in "
        "Python, and refuses what it cannot follow)", where)
