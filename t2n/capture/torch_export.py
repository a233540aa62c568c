"""``capture="export"``: the model captured with ``torch.export`` instead of the tracer.

``torch.export.export`` records the ATen ops the model runs, functionalised (in-place ops and
writes into views become ``slice_scatter``/``copy`` chains), with symbolic sizes for the
dynamic axes (one ``torch.export.Dim`` per t2n symbol, so two inputs sharing a symbol share
a Dim) and the guards PyTorch derived. Data-dependent Python control flow is an error here
(the tracer would freeze it silently), and a guard that pins a dynamic axis is reported as a
frozen axis. Decompositions run only for ops that have no mapping, so the walker sees the
same ops the trace path sees wherever t2n maps them.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings

import torch

from t2n.capture import model_io
from t2n.walk import registry
from t2n.errors import T2NError, TraceError, UsageError
from t2n.capture.inplace_ops import functionalize_simple_writes
from t2n.capture.model_mode import eval_mode
from t2n.capture.leaf_ops import Leaves
from t2n.capture.user_frames import user_line
from t2n.capture.small_examples import confirm_on_example, size_oblivious, small_axes
from t2n.stopwatch import timed


class _Flat(torch.nn.Module):
    """The user's model called as the binding says, its result flattened to named tensors
    (:func:`t2n.capture.model_io.flatten`): export sees tensors in and tensors out, whatever the
    model returns (``ModelOutput``, cache objects that are no pytree)."""

    def __init__(self, model, binding):
        super().__init__()
        self.model = model
        self.binding = binding
        names: list[str] = []

        def record(found: list[str]) -> None:
            names[:] = found

        # closures, not attributes: export may run forward on a copy of this module
        self.record_names = record
        self.names = lambda: list(names) or None

    def forward(self, *tensors):
        names, outs = model_io.flatten(self.binding.call(self.model, tensors))
        self.record_names(names)
        return tuple(outs)


PREFIX = "model."  # state_dict names of the wrapped model inside _Flat


def _distinct(tensors) -> tuple:
    """The example inputs with a tensor given twice (one object as two inputs) copied:
    torch.export reads one object passed twice as one input, so the graph would use only
    the last placeholder and an archive run with two different inputs there would compute
    from one of them."""
    seen: set[int] = set()
    out = []
    for t in tensors:
        out.append(t.clone() if id(t) in seen else t)
        seen.add(id(t))
    return tuple(out)


def _dynamic_shapes(n: int, symbols: dict[int, dict[int, str]]):
    """Every dynamic axis as ``Dim.DYNAMIC``: export may narrow an axis's range (a model
    valid up to its position table's length) without failing; :func:`_frozen_axes` then
    refuses an axis export had to fix to one size, and the walker maps each axis's symbol
    back to the t2n symbol of its name."""
    from torch.export import Dim

    return {"tensors": tuple({axis: Dim.DYNAMIC for axis in symbols[i]} if symbols.get(i)
                             else None for i in range(n))}


def _frozen_axes(ep, symbols, input_names) -> tuple[list[str], list[str]]:
    """(axes export fixed to their example size, range notes of the dynamic ones)."""
    from torch.export.graph_signature import InputKind
    from torch.utils._sympy.numbers import int_oo

    users = [n for n, s in zip([n for n in ep.graph.nodes if n.op == "placeholder"],
                               ep.graph_signature.input_specs)
             if s.kind == InputKind.USER_INPUT]
    frozen, ranges, seen = [], [], set()
    for i, axes in symbols.items():
        shape = users[i].meta["val"].shape
        for axis, name in axes.items():
            d = shape[axis]
            if not isinstance(d, torch.SymInt) or d.node.expr.is_number:
                frozen.append(f"{input_names[i]} axis {axis} ({name}) = {int(d)}")
                continue
            vr = ep.range_constraints.get(d.node.expr)
            if vr is not None and name not in seen and (vr.upper != int_oo or int(vr.lower) > 2):
                seen.add(name)
                ranges.append(f"{name} in [{vr.lower}, {vr.upper}]")
    return frozen, ranges


def _refuse_specialised(ep, model, binding, symbols, bounds) -> None:
    """torch.export's guards that pin a dynamic axis to sizes the user did not ask for
    (:mod:`t2n.capture.export_guards`)."""
    from t2n.capture import export_guards
    from t2n.capture.size_probe import resized

    most = bounds[1]
    names, hints = _export_symbols(ep, symbols, binding.tensors)
    def run(sizes):
        tensors = list(binding.tensors)
        for i, axes in symbols.items():
            for axis, name in axes.items():
                if name in sizes:
                    tensors[i] = resized(tensors[i], axis, sizes[name])
        binding.call(model, tuple(tensors))

    export_guards.refuse_narrow_guards(ep, names, hints, most, run)
    export_guards.refuse_specialised_ranges(ep, names, most, run)


def _export_symbols(ep, symbols, tensors) -> tuple[dict, dict]:
    """({export's size symbol: t2n symbol name}, {export's size symbol: example size})."""
    from torch.export.graph_signature import InputKind

    users = [n for n, s in zip([n for n in ep.graph.nodes if n.op == "placeholder"],
                               ep.graph_signature.input_specs)
             if s.kind == InputKind.USER_INPUT]
    names, hints = {}, {}
    for i, axes in symbols.items():
        shape = users[i].meta["val"].shape
        for axis, name in axes.items():
            d = shape[axis]
            if isinstance(d, torch.SymInt) and d.node.expr.is_symbol:
                names[d.node.expr] = name
                hints[d.node.expr] = int(tensors[i].shape[axis])
    return names, hints


def _decompositions_of_unmapped() -> dict:
    """torch.export's default decompositions of the aten ops t2n has no mapping for (an op
    t2n maps reaches the walker as it is, as on the trace path)."""
    return {op: fn for op, fn in torch.export.default_decompositions().items()
            if isinstance(op, torch._ops.OpOverload) and op.namespace == "aten"
            and registry.lookup(op._schema.name.split("::", 1)[1]) is None}


def _may_need_lowering(ep) -> bool:
    """Whether :func:`_needs_lowering` can be true: an aten op without a mapping, an op
    that mutates its inputs or a higher-order op is called (most programs call none, and
    need no decomposition table)."""
    for n in ep.graph.nodes:
        t = n.target
        if n.op != "call_function":
            continue
        if isinstance(t, torch._ops.HigherOrderOperator):
            return True
        if isinstance(t, torch._ops.OpOverload) and (t._schema.is_mutable or (
                t.namespace == "aten"
                and registry.lookup(t._schema.name.split("::", 1)[1]) is None)):
            return True
    return False


def _needs_lowering(ep, table: dict) -> bool:
    """Whether ``run_decompositions`` would change the program: an op of ``table`` (an op
    t2n does not map) or an op that mutates its inputs (functionalised by it) is called, or
    a higher-order op (a grad-mode region) is. A program of mapped functional ATen ops only
    is kept as ``torch.export`` captured it: the re-trace would rebuild the same graph."""
    for n in ep.graph.nodes:
        if n.op != "call_function":
            continue
        t = n.target
        if isinstance(t, torch._ops.OpOverload):
            if t in table or t._schema.is_mutable:
                return True
        elif isinstance(t, torch._ops.HigherOrderOperator):
            return True
    return False


@timed("capture")
def capture_export(model, binding, symbols: dict[int, dict[int, str]], input_names,
                   bounds=None):
    """The ``ExportedProgram`` of ``model`` called as ``binding`` says (eval mode, no grad),
    functionalised, with decompositions applied to the ops t2n does not map."""
    if not isinstance(model, torch.nn.Module) or isinstance(model, torch.jit.ScriptModule):
        raise UsageError("capture='export' takes an nn.Module (a TorchScript file can only be "
                         "exported with capture='trace')")
    with eval_mode(model), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outputs = _runs_on_the_example(model, binding)  # fake tensors check less
        small = small_axes(symbols, binding.tensors, input_names) if symbols else []
        try:
            flat = _Flat(model, binding)
            with Leaves(), _quiet_torch(), size_oblivious(bool(small)):
                ep = torch.export.export(
                    flat, _distinct(binding.tensors),
                    dynamic_shapes=_dynamic_shapes(len(binding.tensors), symbols)
                    if symbols else None)
        except Exception as e:  # torch.export's own diagnosis, as one clear line
            if isinstance(e, T2NError):  # t2n's own refusal (an output it cannot take)
                raise
            raise _export_error(e, symbols, input_names, binding.tensors) from e
        if small:  # a size of 1 captured as any size: the program must still be the model's
            confirm_on_example(ep, model_io.flatten(outputs)[1], _distinct(binding.tensors),
                               small)
        frozen, ranges = _frozen_axes(ep, symbols, input_names)
        if frozen:
            raise UsageError("the model fixes dynamic axes to their example size (torch."
                             "export guards on them): " + ", ".join(frozen) + "; export "
                             "them static, or change the code that needs the fixed size")
        if symbols:
            _refuse_specialised(ep, model, binding, symbols, bounds or ({}, {}))
        # one re-trace: functionalise, and decompose the ops t2n does not map (the
        # decompositions apply recursively, to the unmapped ops they emit too). Each
        # run_decompositions re-traces the whole program: most of an export's time.
        functionalize_simple_writes(ep.graph)  # relu_ -> relu where no one can tell
        if _may_need_lowering(ep):  # the table costs a walk of torch's decompositions
            table = _decompositions_of_unmapped()
            if _needs_lowering(ep, table):
                ep = ep.run_decompositions(table)
    ep.t2n_ranges = ranges  # the sizes the model is valid for, said in the report
    ep.t2n_output_names = flat.names()
    return ep


def _export_error(e: Exception, symbols, input_names, tensors=()) -> Exception:
    text = str(e).strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(e).__name__)
    first = first[:400] + user_line(text, e)
    name = type(e).__name__
    # a value read from a tensor ("Could not extract specialized integer from data-dependent
    # expression u0") is no dynamic axis, whatever words it shares with a frozen one's
    data_dependent = "GuardOnDataDependent" in name or "data-dependent" in text
    if not data_dependent and (
            "Constraint" in name or "specializ" in text or "Not all values of" in text):
        axes = ", ".join(f"{input_names[i]} axis {a} = {s}" for i, d in symbols.items()
                         for a, s in d.items())
        small = small_axes(symbols, tensors, input_names)
        if small:  # torch.export specialises sizes 0 and 1, whatever the model does
            return UsageError("a dynamic axis has size 0 or 1 in the example inputs ("
                              + ", ".join(small) + "), which torch.export fixes: give "
                              "examples of size >= 2 on dynamic axes (or use capture='trace')")
        error = UsageError("a dynamic axis is frozen by the model: torch.export found that "
                           f"the code needs a fixed size ({axes}): {first}")
        # the trace reads sizes its own way (the size probe), so it may keep the axis
        error.another_capture_may_help = True
        return error
    if data_dependent:
        error = TraceError("torch.export cannot capture the model: its Python control flow "
                           f"or a size depends on tensor values ({first})")
    else:
        error = TraceError(f"torch.export failed on the example inputs: {name}: {first}")
    error.another_capture_may_help = True  # t2n.capture.strategies.capture_failure_note
    return error


@contextlib.contextmanager
def _quiet_torch():
    """torch.export prints the partial graph of a failed capture on stderr and logs
    warnings about it; t2n's error names the cause and the model's line in one line, so
    both are held back while it runs (the log level of torch's loggers is restored)."""
    torch_log = logging.getLogger("torch")
    level = torch_log.level
    torch_log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        torch_log.setLevel(level)


def _runs_on_the_example(model, binding):
    """The outputs of ``model`` run on the example inputs (eval mode, no grad) before
    torch.export: a model PyTorch cannot run on them is refused with its own error, as the
    trace refuses it (torch.export's fake tensors let some through: an int64 input to a
    float ``nn.Linear``), and a failure of torch.export afterwards is torch.export's own."""
    try:
        return binding.call(model)
    except T2NError:
        raise
    except Exception as e:
        text = str(e).strip().splitlines()
        raise TraceError("the model failed on the example inputs: "
                         f"{type(e).__name__}: {text[0] if text else ''}"
                         f"{user_line(str(e), e)}") from e
