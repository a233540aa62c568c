"""The capture strategies: one object per way of capturing a model, each yielding the
captured program with the reader that walks its IR.

* :class:`Trace`: ``torch.jit.trace`` of a Python module (through
  :class:`t2n.capture.model_io.Adapter`), read as TorchScript (:class:`t2n.walk.walker.Walker`);
* :class:`SavedTorchScript`: a ScriptModule (a file saved with ``torch.jit.save`` or a
  ``torch.jit.script`` result) called positionally: its own graph, inlined and typed; the
  trace of it only checks the inputs and names the outputs. Read as TorchScript too;
* :class:`Export`: ``torch.export`` (:mod:`t2n.capture.torch_export`), read as FX
  (:class:`t2n.walk.fx_walker.FxWalker`).

``export()`` picks one with :func:`capture_strategy` and does the same with any of them:
``program = strategy.capture(...)``, then ``program.walk(graph, inputs, symbols)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from t2n.capture import trace
from t2n.errors import UsageError
from t2n.walk.walker import Walker


@dataclass
class Program:
    """A captured program, ready to walk: ``walk(graph, inputs, symbols)`` runs its IR's
    reader over it (``symbols``: per user input, ``{axis: t2n symbol}`` of its dynamic axes)
    and returns the model's outputs as graph tensors."""

    walk: Callable
    output_names: list | None = None  # ModelOutput fields, cache tensors ... (None: unknown)
    tracer_warnings: list = field(default_factory=list)  # the tracer's, for the report
    warnings: list = field(default_factory=list)  # added to the graph's after the walk


class Trace:
    """``torch.jit.trace`` on the example inputs, read as TorchScript."""

    def capture(self, model, binding, symbols, input_names, bounds=None) -> Program:
        """``bounds``: ({symbol: least size}, {symbol: most size}) of the dynamic axes."""
        captured = trace.capture(model, binding.tensors, binding)
        if captured.n_inputs != len(binding.tensors):
            raise UsageError(f"the traced model takes {captured.n_inputs} tensor input(s), "
                             f"{len(binding.tensors)} given")

        def walk(g, inputs, _symbols):
            walker = Walker(g, captured.root, {})
            walker.path_prefix = captured.path_prefix
            outs = walker.run(captured.graph, inputs)
            # after the walk: its refusals name the op and the condition more precisely
            if symbols and not isinstance(model, torch.jit.ScriptModule):
                self._probe(model, binding, captured, symbols, bounds or ({}, {}))
            return outs

        return Program(walk, captured.output_names, list(captured.tracer_warnings))


    @staticmethod
    def _probe(model, binding, captured, symbols, bounds):
        """Refuse a trace whose graph changes with a dynamic axis' size
        (:mod:`t2n.capture.size_probe`)."""
        from t2n.capture import size_probe
        from t2n.stopwatch import phase

        with phase("size probe"):
            size_probe.check_structure(
                captured.graph, lambda tensors: trace.trace_graph(model, binding, tensors),
                binding.tensors, symbols, *bounds)


class SavedTorchScript(Trace):
    """A ScriptModule's own graph (:func:`t2n.capture.trace.capture` reads it rather than
    re-tracing), read as TorchScript."""


class Export:
    """``torch.export`` with the dynamic axes as Dims, read as FX."""

    def capture(self, model, binding, symbols, input_names, bounds=None) -> Program:
        from t2n.capture.torch_export import capture_export

        program = capture_export(model, binding, symbols, input_names, bounds)

        def walk(g, inputs, sym_handles):
            from t2n.walk.fx_walker import FxWalker

            return FxWalker(g, program, sym_handles).run(inputs)

        return Program(walk, program.t2n_output_names,
                       warnings=[f"the model is valid for {r} only (torch.export's guards)"
                                 for r in program.t2n_ranges])


STRATEGIES = {"trace": Trace(), "torchscript": SavedTorchScript(), "export": Export()}


# what a user chooses (capture=, --capture); None, the default, picks by the model's kind
# (:func:`default_capture`: torch.export for a Python module; docs/capture.md)
CHOICES = {"export": "torch.export", "trace": "torch.jit.trace",
           "auto": "torch.export, else torch.jit.trace saying why"}
USED = {**CHOICES, "torchscript": "the ScriptModule's own TorchScript graph"}


def check_capture(capture) -> str | None:
    """``capture`` when it is None or one of :data:`CHOICES`, else a UsageError naming them."""
    if capture is not None and capture not in CHOICES:
        raise UsageError(f"capture={capture!r}: choose " + " or ".join(
            f"{k!r} ({v})" for k, v in CHOICES.items()))
    return capture


def default_capture(model, binding=None) -> tuple[str, str | None]:
    """The capture of ``capture=None`` and, when it is not torch.export, why: torch.export
    for an ``nn.Module``; a ScriptModule (a ``torch.jit.save`` file) is read as its own
    graph; a model holding TorchScript objects (the packed weights of torch.ao's quantized
    modules, which torch.export cannot trace) is traced, and so is one holding torch.ao
    quantized modules without packed weights (``QFunctional`` add/cat, quantized batch norm
    and activations, ``Quantize``) or an FX graph calling ``quantized::`` ops: their ops have
    no fake kernel (``quantized::add``), take their scale as a Python float that
    torch.export hands them as a fake tensor (``quantized::batch_norm2d``,
    ``quantized::hardswish``), or read their scale buffer as a number (``Quantize``)."""
    if isinstance(model, torch.jit.ScriptModule):
        used = resolve_capture("trace", model, binding)
        return used, (None if used == "torchscript" else "a ScriptModule called with keywords")
    holder = _script_object_holder(model)
    if holder is not None:
        return "trace", (f"{holder} holds TorchScript objects (torch.ao quantized packed "
                         "weights), which torch.export cannot trace")
    holder = _quantized_op_holder(model)
    if holder is not None:
        return "trace", (f"{holder} runs torch.ao quantized ops, which torch.export cannot "
                         "trace")
    return "export", None


def _script_object_holder(model: torch.nn.Module) -> str | None:
    """The qualified name (or class) of the first submodule holding a ``ScriptObject``."""
    for name, module in model.named_modules():
        if any(isinstance(v, torch._C.ScriptObject) for v in vars(module).values()):
            return f"{name} ({type(module).__name__})" if name else type(module).__name__
    return None


# torch.ao's quantized modules (their ops run on quantized tensors); the reference modules
# (``.reference``) and the float stand-ins a model holds before conversion
# (``FloatFunctional``) compute in float and stay with torch.export
_QUANTIZED_MODULES = ("torch.ao.nn.quantized.", "torch.ao.nn.intrinsic.quantized.")
_FLOAT_STAND_INS = ("FloatFunctional", "FXFloatFunctional")


def _quantized_op_holder(model: torch.nn.Module) -> str | None:
    """The qualified name (and class) of the first submodule that is a torch.ao quantized
    module, or an FX graph module calling a ``quantized::`` op; None when there is none."""
    for name, module in model.named_modules():
        kind = type(module).__module__ + "."
        where = f"{name} ({type(module).__name__})" if name else type(module).__name__
        if kind.startswith(_QUANTIZED_MODULES) and ".reference." not in kind and \
                type(module).__name__ not in _FLOAT_STAND_INS:
            return where
        graph = getattr(module, "graph", None) if isinstance(module, torch.fx.GraphModule) \
            else None
        if graph is not None and any(n.op == "call_function" and str(n.target).startswith(
                "quantized.") for n in graph.nodes):
            return where
    return None


def resolve_capture(capture: str, model, binding=None) -> str:
    """The strategy's name for ``capture=`` ("trace" or "export"): a ScriptModule called
    positionally is read as it is saved ("torchscript") rather than traced."""
    if capture is None:
        return default_capture(model, binding)[0]
    if capture == "trace" and isinstance(model, torch.jit.ScriptModule) \
            and not (binding is not None and binding.keywords):
        capture = "torchscript"
    return capture


def capture_strategy(capture: str | None, model, binding=None):
    """The strategy for ``capture=``; see :func:`resolve_capture`."""
    return STRATEGIES[resolve_capture(capture, model, binding)]


def capture_order(capture: str | None, model, binding=None) -> list[str]:
    """The captures to try, in order. ``"auto"``: torch.export, and the trace when it fails
    (:func:`fallback_note` says why); a ScriptModule or a function, which torch.export does
    not take, goes straight to the trace (a ScriptModule: its own graph). None: the one
    :func:`default_capture` picks, with no fallback."""
    if capture != "auto":
        return [resolve_capture(capture, model, binding)]
    if not isinstance(model, torch.nn.Module) or isinstance(model, torch.jit.ScriptModule):
        return [resolve_capture("trace", model, binding)]
    return ["export", "trace"]


def fallback_note(failed: str, error: BaseException, used: str) -> str:
    """One line: why ``failed`` did not capture the model and which capture did."""
    from t2n.specs import first_line

    why = first_line(error) or type(error).__name__
    if len(why) > 300:
        why = why[:297] + "..."
    return (f"capture='auto': {USED[failed]} failed ({type(error).__name__}: {why}); "
            f"captured with {USED.get(used, used)}")


def capture_failure_note(asked: str | None, failed: str, error: BaseException) -> str | None:
    """The note a failed torch.export capture (asked for, or chosen by ``capture=None``)
    adds to its error when the failure is torch.export's own (data-dependent control flow,
    Python it cannot follow): the other captures, which may take the model."""
    if asked in (None, "export") and failed == "export" \
            and getattr(error, "another_capture_may_help", False):
        return ("capture='trace' (--capture trace) records the example's path instead, "
                "capture='auto' tries torch.export then the trace")
    return None


def capture_report(asked: str | None, used: str, model=None, binding=None) -> str | None:
    """The report's line naming the capture used, when the user let t2n choose (None or
    ``"auto"``), with the reason when None's choice is not torch.export."""
    if asked not in (None, "auto"):
        return None
    # the reason is asked again only when None did not pick torch.export (a walk of the
    # modules, which resolve_capture already made for the choice itself)
    why = default_capture(model, binding)[1] if asked is None and used != "export" else None
    return f"capture: {used} ({USED.get(used, used)})" + (f": {why}" if why else "")
