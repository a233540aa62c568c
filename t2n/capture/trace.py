"""From a user's model to one inlined TorchScript graph, without touching the model.

t2n captures with ``torch.jit.trace`` (supported on torch 2.x up to at least 2.13, where it
is deprecated but present). The deprecation notice is t2n's business, not the user's, so it
is filtered; tracer warnings that mean "this export is specialised to the traced path"
(data-dependent Python control flow) are re-issued as one clear t2n warning.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass

import torch

from t2n.capture.autograd_inline import inline_autograd_functions
from t2n.capture.constant_writes import trace_keeping_constants
from t2n.errors import ModelLoadError, T2NError, TraceError, UsageError
from t2n.capture.model_mode import eval_mode
from t2n.capture.script_types import complete_types
from t2n.stopwatch import timed


class SpecialisedTraceWarning(UserWarning):
    """The model's Python control flow read tensor values: the export follows the traced path."""


@dataclass
class Captured:
    graph: torch._C.Graph
    root: object  # the module whose attributes GetAttr nodes read
    n_inputs: int
    tracer_warnings: list
    output_names: list | None = None  # from the model's result (see model_io.flatten)
    path_prefix: str = ""  # module path of the user's model inside ``root``


def load_model(model):
    """The user's model as an ``nn.Module``: a module or ScriptModule as given, a path loaded
    with :func:`load_torchscript`; anything else is a UsageError."""
    if isinstance(model, (str, os.PathLike)):
        return load_torchscript(os.fspath(model))
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"model must be an nn.Module, a ScriptModule or a path, not "
                         f"{type(model).__name__}")
    return model


def load_torchscript(path: str):
    """Load a TorchScript archive saved with ``torch.jit.save`` (no unpickling of code)."""
    if not os.path.exists(path):
        raise ModelLoadError(f"model file not found: {path}")
    if os.path.isdir(path):
        raise ModelLoadError(f"model path is a directory, not a TorchScript file: {path}")
    try:
        return torch.jit.load(path, map_location="cpu")
    except Exception as e:  # torch raises RuntimeError/ValueError with multi-line texts
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"{path} is not a readable TorchScript archive ({first})") from None


@contextlib.contextmanager
def _quiet_trace(collected: list):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        msg = str(w.message)
        if "deprecated" in msg and "torch.jit" in msg:
            continue
        if issubclass(w.category, torch.jit.TracerWarning):
            if not _is_torch_shape_check(w.filename):
                collected.append(msg)
            continue
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _is_torch_shape_check(filename: str) -> bool:
    """PyTorch's recurrent modules compare sizes to their configuration while tracing
    (``check_input``: ``self.input_size != input.size(-1)``); that reads no data."""
    return filename.replace(os.sep, "/").endswith("torch/nn/modules/rnn.py")


@contextlib.contextmanager
def _mha_fastpath_off():
    """nn.MultiheadAttention / TransformerEncoderLayer in eval mode take fused kernels
    (``_native_multi_head_attention``, ``_transformer_encoder_layer_fwd``); with the fast
    path off the trace records their regular aten ops (linear, sdpa, layer_norm ...),
    which compute the same values."""
    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)


@timed("capture")
def capture(model, args, binding=None) -> Captured:
    """Trace ``model`` on ``args`` in eval mode without grad; restore the training flag.

    ``binding`` (a :class:`t2n.capture.model_io.Binding`) says how the inputs reach ``forward``;
    without one they go positionally. A Python module is traced through
    :class:`t2n.capture.model_io.Adapter`, which flattens ModelOutputs and caches to named tensors.
    """
    from t2n.capture import model_io

    if binding is None:
        binding = model_io.bind(model, args, None)
    args = binding.tensors
    collected: list[str] = []

    def trace():
        collected.clear()  # the warnings of the trace that is kept
        return _trace(model, binding, args, collected)

    if isinstance(model, torch.jit.ScriptModule):  # its graph holds no traced constants
        (traced, adapter, script_names) = trace()
        graph = _graph_of(traced)
    else:  # a constant the model writes in place: t2n.capture.constant_writes
        (traced, adapter, script_names), graph = trace_keeping_constants(
            trace, lambda t: _graph_of(t[0]))
    root = traced if isinstance(traced, torch.jit.ScriptModule) else None
    torch._C._jit_pass_dce(graph)
    if root is not None:
        complete_types(graph, root, args)  # a loaded or scripted module has no types
    for msg in collected:
        if "might cause the trace to be incorrect" in msg or "Converting a tensor to" in msg:
            warnings.warn(SpecialisedTraceWarning(
                "data-dependent control flow or a tensor read as a Python value: the export "
                f"reproduces the traced path only ({msg.split('.')[0]})"), stacklevel=3)
    n_inputs = len(list(graph.inputs())) - (1 if root is not None else 0)
    if adapter is not None:
        if not adapter.output_names:
            raise TraceError("the model returned no tensor")
        return Captured(graph, root, n_inputs, collected, adapter.output_names,
                        model_io.Adapter.PREFIX)
    return Captured(graph, root, n_inputs, collected, script_names)


def _trace(model, binding, args, collected: list):
    """``(traced, adapter, script_names)``: ``model`` traced once on ``args``."""
    from t2n.capture import model_io

    adapter = None
    script_names = None
    # a ScriptModule is traced in the mode it has
    with eval_mode(None if isinstance(model, torch.jit.ScriptModule) else model):
        with torch.no_grad(), _quiet_trace(collected), _mha_fastpath_off(), \
                inline_autograd_functions():
            try:
                if isinstance(model, torch.jit.ScriptModule) and not binding.keywords:
                    # tracing a ScriptModule is a no-op: this checks the inputs (and names
                    # the outputs)
                    script_names = _names_or_none(binding.call(model))
                    traced = torch.jit.trace(model, args, check_trace=False, strict=False)
                else:
                    adapter = model_io.Adapter(model, binding)
                    traced = torch.jit.trace(adapter, args, check_trace=False, strict=False)
            except T2NError:
                raise
            except Exception as e:
                text = str(e).strip().splitlines()
                if text and "TorchScript interpreter" in text[0]:
                    # the interpreter's last line holds the actual error, as "Type: message"
                    text = [text[-1].removeprefix(f"{type(e).__name__}: ")]
                if text and text[0].startswith("Tracer cannot infer type of"):
                    text = ["the model's output holds a value that is not a tensor (outputs "
                            "must be tensors, or tuples, lists or dicts of tensors)"]
                raise TraceError("the model failed while being traced on the example inputs: "
                                 f"{type(e).__name__}: {text[0] if text else ''}") from e
    return traced, adapter, script_names


def _graph_of(traced):
    if isinstance(traced, torch.jit.ScriptModule):
        return traced.inlined_graph if hasattr(traced, "inlined_graph") else traced.graph
    return traced.graph


def trace_graph(model, binding, tensors):
    """The inlined graph of ``model`` (a Python module) traced on ``tensors`` bound as
    ``binding`` says, warnings swallowed: the second trace of
    :mod:`t2n.capture.size_probe`, compared with the export's own."""
    from t2n.capture import model_io

    binding = model_io.Binding(tuple(tensors), binding.names, binding.n_positional)

    def traced_graph():
        with eval_mode(model), torch.no_grad(), warnings.catch_warnings(), \
                _mha_fastpath_off(), inline_autograd_functions():
            warnings.simplefilter("ignore")
            return torch.jit.trace(model_io.Adapter(model, binding), binding.tensors,
                                   check_trace=False, strict=False).inlined_graph

    graph, _ = trace_keeping_constants(traced_graph, lambda g: g)  # as capture() traces
    torch._C._jit_pass_dce(graph)
    return graph


def _names_or_none(result):
    from t2n.capture import model_io

    try:
        return model_io.flatten(result)[0]
    except T2NError:
        return None  # the walker names the offending output
