"""torch.export's guards that hold at the example's sizes but not over the range it reports.

``torch.export`` runs the model's Python with symbolic sizes; Python that needs a number
(``range(x.shape[1] // 4)``) makes it guard on that value (``Eq(s0//4, 2)``) and go on with
the example's. Its ``range_constraints`` keep only what is a plain bound of one symbol
(``s0 >= 8``), so the program looks valid for every size from 8 up, while its unrolled loop
is right for 8 to 11 only. :func:`refuse_narrow_guards` evaluates every equality guard of
one symbol at sizes spread over its range (the reported one, within the user's bounds) and
refuses the export when one fails: such a guard pins the graph to sizes no range can
describe. Bounds are the reported range already, and ``Ne`` guards (an odd length, from a
slice whose end equals the size) mark sizes that take another path to the same values.

Guards raised by torch's own stride bookkeeping (:data:`LAYOUT_CHECKS`: is a result
contiguous, is an axis of size 1 whose stride does not matter) are not read either: they
decide whether torch's meta kernels return a view or a copy, never a value, so the graph
computes the same numbers at sizes where they fail. ``reshape(-1, 12)`` of ``B`` rows of 4
guards ``B // 3 == 1`` there at ``B = 3``, a crop to ``S - 3`` guards ``Max(1, S - 3) ==
S - 3``: sizes of 1 and 0 skip a stride comparison.
"""

from __future__ import annotations

from t2n.errors import UsageError


# torch functions that only compare or compute strides (torch/_prims_common): a guard they
# raise picks a memory layout (view or copy), not the values the graph computes
LAYOUT_CHECKS = frozenset({
    "check_contiguous_sizes_strides", "is_contiguous", "is_channels_last_contiguous_2d",
    "is_channels_last_contiguous_3d", "_is_non_overlapping_and_dense_or_false",
    "is_non_overlapping_and_dense", "compute_elementwise_output_logical_to_physical_perm",
    "make_contiguous_strides_for",
})


def _layout_only(guard) -> bool:
    """Whether ``guard`` (a ShapeGuard) comes from one of torch's :data:`LAYOUT_CHECKS`."""
    import os

    import torch

    loc = getattr(getattr(guard, "sloc", None), "framework_loc", None)
    name, path = getattr(loc, "name", None), getattr(loc, "filename", "") or ""
    return name in LAYOUT_CHECKS and path.startswith(os.path.dirname(torch.__file__))


def _trials(n: int, lower: int, upper) -> list[int]:
    """Sizes in [lower, upper] around and far from the example size ``n``."""
    out = []
    for c in (n + 1, n - 1, 2 * n, 3 * n + 1, 4 * n + 3, 8 * n + 5, lower, lower + 1):
        if c >= lower and (upper is None or c <= upper) and c != n and c not in out:
            out.append(c)
    return out


def refuse_narrow_guards(ep, names: dict, hints: dict, most: dict, run) -> None:
    """``names``: {export symbol: t2n symbol name}, ``hints``: {export symbol: example size},
    ``most``: {t2n symbol: the user's most size}, ``run(sizes)`` calls the model eagerly
    at {t2n symbol: size}. Raises a UsageError naming the symbol and the guard when a guard
    fails inside the reported range at a size PyTorch runs (a size PyTorch rejects too, an
    odd length for ``reshape(B, 2, S // 2)``, is a limit of the model the walk reports)."""
    from torch.utils._sympy.numbers import int_oo

    env = _shape_env(ep)
    if env is None or not names:
        return
    import sympy

    for guard in env.guards:
        expr = guard.expr
        syms = [s for s in expr.free_symbols if s in names]
        if not isinstance(expr, sympy.Eq) or len({names[s] for s in syms}) != 1 \
                or _layout_only(guard):
            # bounds are the reported range; an Ne guard (``S`` odd, from a slice's
            # end == size shortcut) names sizes taking another path to the same values
            continue
        for s in syms:
            vr = ep.range_constraints.get(s)
            lower = int(vr.lower) if vr is not None else 1
            upper = None if vr is None or vr.upper == int_oo else int(vr.upper)
            if most.get(names[s]) is not None:
                upper = most[names[s]] if upper is None else min(upper, most[names[s]])
            tied = [t for t in names if names[t] == names[s]]  # one t2n symbol, one size
            for size in _trials(hints[s], lower, upper):
                values = dict(hints)
                values.update({t: size for t in tied})
                try:
                    holds = bool(expr.xreplace(values))
                except (TypeError, ZeroDivisionError):
                    # not a number there (``Mod(2*B, B // 3)`` at B = 2): an earlier guard,
                    # one making the divisor nonzero, fails at that size and is read itself
                    continue
                if not holds and _runs(run, {names[s]: size}):
                    text = str(expr.xreplace({k: _named(v) for k, v in names.items()}))
                    raise UsageError(
                        f"dynamic axis {names[s]}: torch.export fixed the model to sizes where "
                        f"{text} (it fails at {names[s]}={size}): the model's Python reads "
                        f"{names[s]} as a number (a loop over range(...) of it, a split into a "
                        "number of pieces computed from it), so the captured graph holds for "
                        f"the example's size only; keep {names[s]} static or make that code "
                        "size-generic")


def _runs(run, sizes) -> bool:
    try:
        run(sizes)
    except Exception:
        return False
    return True


def _named(name: str):
    import sympy

    return sympy.Symbol(name, integer=True)


def _shape_env(ep):
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            mode = getattr(val, "fake_mode", None)
            if mode is not None and mode.shape_env is not None:
                return mode.shape_env
    return None


def refuse_specialised_ranges(ep, names: dict, most: dict, run) -> None:
    """Refuse a range torch.export narrowed below the user's where PyTorch itself runs the
    model: ``if x.shape[1] > 8:`` makes export keep the example's branch and report
    ``S <= 8``; PyTorch at S = 9 takes the other branch, which the archive does not hold.
    A bound PyTorch also stops at (a position table's length) stays a noted range, and so
    do least sizes: export raises them to keep sizes of 0 and 1 apart (``arange((P - 1) //
    2 + 1)`` is reported valid from P = 3) where the archive holds every size.
    ``run(sizes)`` calls the model eagerly with the axes of each t2n symbol at
    ``sizes[symbol]`` and raises when PyTorch rejects them; ``most`` holds the user's most
    sizes."""
    from torch.utils._sympy.numbers import int_oo

    done = set()
    for s, name in names.items():
        vr = ep.range_constraints.get(s)
        if vr is None or name in done:
            continue
        done.add(name)
        outside = []
        if vr.upper != int_oo and (most.get(name) is None or int(vr.upper) < most[name]):
            outside.append(int(vr.upper) + 1)
        for size in outside:
            if not _runs(run, {name: size}):
                continue  # PyTorch rejects it too: a real bound of the model
            raise UsageError(
                f"dynamic axis {name}: torch.export specialised the model to {name} in "
                f"[{vr.lower}, {vr.upper}] (a branch on {name} in the model's Python), but "
                f"PyTorch also runs {name}={size}, on another path the archive would not "
                f"hold; give {name} that range in dynamic_axes (({name!r}, least, most)), "
                "keep it static, or make that code size-generic")
