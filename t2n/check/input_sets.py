"""The check over several input sets: the example, fresh values of its shapes, and the
dynamic axes at another size (:mod:`t2n.check.fresh_inputs`).

PyTorch eager computes each set's reference on the user's model (its buffers restored after
each run: a forward that updates state leaves the model as it was); the engine (tract, or
nnef-tools for ``khronos``) runs every compared set in ONE child, loading the archive once.
A resized set PyTorch itself rejects (a position table shorter than the new length, a size
that must be a multiple of something) is reported "not comparable", never a failure; the
same-shape fresh set is always attempted.

Each output gets one :class:`~t2n.check.compare.OutputCheck` over all the sets: failed when any set
fails (its figures and ``input_set`` are the first failing set's), else the worst figures.
An output that depends on no input fails unless declared constant
(:mod:`t2n.check.constant_outputs`).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from t2n.check import constant_outputs
from t2n.capture import model_io
from t2n.check.compare import OutputCheck, compare
from t2n.check.eager import torch_outputs
from t2n.errors import CheckFailedError, TractError


@dataclass
class InputSet:
    """One set of inputs a check ran (or could not run) PyTorch and the engine on."""

    name: str  # "example", "fresh", "fresh B=3", or the caller's own names
    tensors: tuple
    comparable: bool = True
    reason: str = ""  # why PyTorch could not run it (not comparable)

    def shapes(self) -> list[list[int]]:
        ts = self.tensors.values() if isinstance(self.tensors, dict) else self.tensors
        return [list(t.shape) for t in ts]

    def to_json(self) -> dict:
        return {"name": self.name, "shapes": self.shapes(), "compared": self.comparable,
                "reason": self.reason}

    def line(self) -> str:
        return f"input set {self.name}: not comparable ({self.reason})"


@dataclass
class SetsCheck:
    """What :func:`check_sets` found."""

    checks: list[OutputCheck]
    sets: list[InputSet]
    example_outputs: list  # the engine's outputs on the first set (the example)

    @property
    def compared(self) -> list[str]:
        return [s.name for s in self.sets if s.comparable]


def check_sets(path: str, model, sets: list[InputSet], out_names: list[str], *, run_sets,
               engine: str = "tract", rtol: float, atol: float, input_names=None,
               atol_for: dict | None = None, fresh=None, constant: tuple = ()) -> SetsCheck:
    """Compare the archive at ``path`` with ``model`` on ``sets`` (PyTorch must run them:
    the example, the caller's own) and, when ``fresh`` (a
    :class:`t2n.check.fresh_inputs.FreshInputs`) is given, on its fresh sets.
    ``run_sets(path, [inputs...])`` is the engine's multi-set runner; ``constant`` names
    the outputs that depend on no input and were not declared."""
    sets = list(sets)
    with preserved_state(model):
        expected = [torch_outputs(model, s.tensors, input_names) for s in sets]
        if fresh is not None:
            for s, ref in _fresh_sets(model, fresh, input_names):
                sets.append(s)
                expected.append(ref)
    compared = [(s, e) for s, e in zip(sets, expected) if s.comparable]
    inputs = [[a.detach().numpy() for a in model_io.bind(model, s.tensors, input_names).tensors]
              for s, _ in compared]
    got = _run(run_sets, path, inputs, [s for s, _ in compared], engine)
    atol_for = atol_for or {}
    per_output: list[list[tuple[str, OutputCheck]]] = [[] for _ in out_names]
    for (s, exp), outs in zip(compared, got):
        if len(outs) != len(exp):
            raise CheckFailedError(f"{engine} returned {len(outs)} outputs, PyTorch "
                                   f"{len(exp)} (input set {s.name})")
        for k, (n, e, a) in enumerate(zip(out_names, exp, outs)):
            per_output[k].append((s.name, compare(n, e, a, rtol=rtol,
                                                  atol=max(atol, atol_for.get(n, 0.0)))))
    checks = [merge(n, results, n in constant) for n, results in zip(out_names, per_output)]
    return SetsCheck(checks, sets, got[0] if got else [])


def _fresh_sets(model, fresh, input_names):
    """(InputSet, PyTorch outputs or None) of each fresh set: the same shapes, then each
    resized attempt near the example's sizes up to the first one PyTorch accepts, then the
    same far from them (those PyTorch rejects are reported "not comparable")."""
    name, tensors = fresh.same_shapes()
    yield _try(model, name, tensors, input_names)
    near = fresh.size_candidates()
    for group, first in ((near, 0), (fresh.far_candidates(), len(near))):
        for k, sizes in enumerate(group):
            name, tensors = fresh.resized(sizes, first + k)
            s, ref = _try(model, name, tensors, input_names)
            yield s, ref
            if s.comparable:
                break


def _try(model, name, tensors, input_names):
    try:
        return InputSet(name, tensors), torch_outputs(model, tensors, input_names)
    except Exception as e:  # PyTorch rejects these inputs: not a fault of the export
        text = str(e).strip().splitlines()
        why = f"PyTorch rejects it: {type(e).__name__}: {text[0] if text else ''}"
        return InputSet(name, tensors, comparable=False, reason=why[:300]), None


def _run(run_sets, path, inputs, sets, engine):
    from t2n.check.tract_runner import TractRunError

    try:
        results = run_sets(path, inputs)
    except TractRunError as e:
        k = getattr(e, "set_index", 0)
        where = "" if sets[k].name == "example" else f" on input set {sets[k].name}"
        raise TractError(f"{engine} could not run {path}{where}: {e}",
                         crashed=e.crashed) from None
    for s, r in zip(sets, results):
        if isinstance(r, TractRunError):
            where = "" if s.name == "example" else (
                f" on input set {s.name} (shapes {s.shapes()}, which PyTorch runs)")
            raise TractError(f"{engine} could not run {path}{where}: {r}", crashed=False)
    return results


def merge(name: str, results: list[tuple[str, OutputCheck]], constant: bool) -> OutputCheck:
    """One output's check over its input sets."""
    bad = [(s, c) for s, c in results if not c.ok]
    if bad:
        s, c = bad[0]
        others = [o for o, _ in bad[1:]]
        msg = f"on input set {s}" + (f": {c.message}" if c.message else "")
        if others:
            msg += f"; fails on {', '.join(others)} too"
        if constant:
            msg += "; " + constant_outputs.check_message()
        return OutputCheck(name, False, c.max_abs_err, c.max_rel_err, msg, input_set=s)
    s, worst = max(results, key=lambda sc: _order(sc[1]))
    notes = "; ".join(dict.fromkeys(c.message for _, c in results if c.message))
    if constant:
        notes = "; ".join(m for m in (constant_outputs.check_message(), notes) if m)
    return OutputCheck(name, not constant, worst.max_abs_err, worst.max_rel_err, notes,
                       input_set=s)


def _order(c: OutputCheck) -> tuple:
    a = c.max_abs_err
    return (math.isnan(a) or math.isinf(a), a if math.isfinite(a) else 0.0)


@contextlib.contextmanager
def preserved_state(model):
    """Run the check's PyTorch calls on ``model`` and leave it as it was: buffers a
    forward updates (a step counter, running statistics of a layer that updates them in
    any mode) get their values back after the block."""
    saved = []
    if isinstance(model, torch.nn.Module):
        script = isinstance(model, torch.jit.ScriptModule)
        for module in ([model] if script else model.modules()):
            buffers = model.named_buffers() if script else \
                [(n, t) for n, t in module._buffers.items() if t is not None]
            for name, t in buffers:
                saved.append((module, name, t, t._version, t.detach().clone()))
    try:
        yield
    finally:
        with torch.no_grad():
            for module, name, t, version, value in saved:
                if t._version != version:
                    t.copy_(value)
                if not isinstance(module, torch.jit.ScriptModule) and \
                        module._buffers.get(name) is not t:  # reassigned in forward
                    module._buffers[name] = t
