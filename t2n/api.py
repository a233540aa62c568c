"""``t2n.export``: the public entry point, shaped like ``torch.onnx.export``.

:func:`export` reads as its pipeline: the session (every choice checked before the
capture) -> capture -> walk -> passes -> the target's lowering -> write -> verify; each
stage lives in its own package (t2n.capture, t2n.walk, t2n.passes, t2n.targets,
t2n.write, t2n.check) and shares what is not the graph through the
:class:`t2n.session.ExportSession`.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass

import torch

from t2n import dtypes, extensions, passes
from t2n import streaming as _stream
from t2n.capture import model_io
from t2n.capture.strategies import (STRATEGIES, capture_failure_note, capture_order,
                                    capture_report, fallback_note)
from t2n.capture.trace import load_model
from t2n.check import constant_outputs
from t2n.check.compare import DEFAULT_ATOL, DEFAULT_RTOL, OutputCheck
from t2n.check.eager import torch_outputs  # noqa: F401  (t2n.api.torch_outputs, for tests)
from t2n.check.verify import check_archive_sets, start_engine, verify
from t2n.errors import ConversionError, UsageError
from t2n.result import ExportResult, TensorInfo
from t2n.session import open_session
from t2n.heap import young_collections_only
from t2n.stopwatch import phase, timed_export
from t2n.walk.builder import Graph, safe_identifier

__all__ = ["export", "export_graph", "check_archive", "ExportResult", "TensorInfo"]


@timed_export
@young_collections_only  # t2n.heap: collections skip the heap the export found
def export(model, args, f, *, input_names=None, output_names=None, dynamic_axes=None,
           check: bool = False, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
           weights: str = "f32", streaming: str | None = None, pulse: int | None = None,
           target: str = "tract", capture: str | None = None, dtype: str | None = None,
           **options) -> ExportResult:
    """Export ``model`` run on ``args`` to the NNEF archive ``f`` (docs/api.md has every
    argument and option).

    ``capture`` captures the model (None, the default: by the model's kind, torch.export
    for an ``nn.Module``, :mod:`t2n.capture.strategies`; "export"; "trace"; "auto"), every
    aten op is mapped, the
    passes and the ``target`` ("tract", "khronos") shape the graph, ``weights`` ("f32",
    "f16", "q4_0") says how weights are stored and ``streaming``/``pulse`` make a
    streaming export; a bfloat16 model needs ``dtype`` ("f32"/"f16"). The archive is
    written beside ``f`` and reaches ``f`` only when the export succeeds (only an NNEF
    archive at ``f`` is replaced; :mod:`t2n.write.output_paths`): its engine loads it,
    and ``check=True`` compares it with PyTorch on the example and fresh inputs
    (``rtol``/``atol``; :mod:`t2n.check.verify`), raising :class:`CheckFailedError` on a
    mismatch.
    """
    started = time.perf_counter()
    model = load_model(model)
    binding = model_io.bind(model, args, input_names)
    session = open_session(model, binding.tensors, f, check=check, rtol=rtol, atol=atol,
                           weights=weights, streaming=streaming, pulse=pulse, target=target,
                           capture=capture, dtype=dtype, options=options)
    f = os.fspath(f)
    start_engine(session)  # its start overlaps the capture
    built = _build(session, binding, output_names, dynamic_axes,
                   (streaming, pulse) if streaming is not None or pulse is not None else None)
    g = built.graph
    with phase("lower"):
        session.target.lower(g)
    constant = constant_outputs.undeclared(g, built.output_names, options.get("constant_outputs"))
    from t2n.write.durable import flushing
    from t2n.write.staging import staged

    with staged(f, options.get("keep_failed")) as work:  # moved to f once verified
        size = _write(g, work, options, started)
        with flushing(work):  # to disk while the engine loads (and checks) it
            result = _result(f, built, work, size, started)
            for w in session.warnings:
                warnings.warn(w, stacklevel=2)
            verify(work, session, built, result, constant)
    return result


def _write(g, work: str, options: dict, started: float) -> int:
    """The archive at ``work``, with a progress bar on a terminal for long writes."""
    from t2n.progress import Bar, for_export
    from t2n.write.writer import write

    bar = for_export(options.get("progress"), quiet=bool(options.get("quiet")), started=started)
    try:
        return write(g, work, progress=bar, flush=False)
    finally:
        if isinstance(bar, Bar):
            bar.close()


def _result(f: str, built, work: str, size: int, started: float) -> ExportResult:
    from t2n.archive_info import archive_ops

    g, session = built.graph, built.graph.session
    result = ExportResult(
        path=f,
        # the archive's own IO: a pass may take some away (t2n.passes.stateful_cache)
        inputs=[TensorInfo(t.name, list(t.shape), dtypes.tract_name(t.dtype))
                for t in built.inputs if t.name in {i.name for i in g.inputs}],
        outputs=[TensorInfo(n, list(t.shape), dtypes.tract_name(t.dtype))
                 for n, t in zip(built.output_names, built.outputs)
                 if n in set(g.output_names)],
        op_histogram=archive_ops(work), archive_bytes=size,  # t2n inspect's count
        export_seconds=time.perf_counter() - started,
        warnings=list(session.warnings) + [f"tracer: {w.splitlines()[0]}"
                                           for w in built.tracer_warnings],
        extras=dict(session.extras), capture=session.captured_with)
    if session.storage:
        from t2n.check.compressed import rounded_copy

        result._rounded = lambda: rounded_copy(session.model, g)
    else:
        result._rounded = session.model
    return result


def _as_args(args) -> tuple:
    """The example tensors of ``args`` (a tensor, a tuple or a dict of tensors), in order."""
    return model_io.bind(None, args, None).tensors


def _names(given, n: int, default: str, what: str) -> list[str]:
    if given is None:
        return [f"{default}_{i}" for i in range(n)]
    given = list(given)
    if len(given) != n:
        raise UsageError(f"{len(given)} {what} name(s) given for {n} {what}(s)")
    for name in given:
        if not isinstance(name, str) or not safe_identifier(name):
            raise UsageError(f"{what} name {name!r} is not a valid NNEF identifier "
                             "(letters, digits, underscore; not starting with a digit, 'inf', "
                             "'true', 'false' or 'nan')")
    if len(set(given)) != len(given):
        raise UsageError(f"{what} names must be unique: {given}")
    return given


def _symbols_for(dynamic_axes, input_names, args) -> dict:
    """{input index: {axis: symbol name}} from ONNX-style ``dynamic_axes``."""
    from t2n.walk import dynamic

    return dynamic.parse_dynamic_axes(dynamic_axes, input_names, args)


def _symbol_minimums(dynamic_axes, symbols, args) -> dict:
    """{symbol: least run-time size}, declared to tract as ``tract_assert``."""
    from t2n.walk import dynamic

    return dynamic.symbol_minimums(dynamic_axes, symbols, args)


def _symbol_maxima(dynamic_axes) -> dict:
    """{symbol: most run-time size} of the axes given as ``(symbol, least, most)``."""
    from t2n.walk import dynamic

    return dynamic.symbol_maxima(dynamic_axes)


@dataclass
class _Built:
    """The NNEF graph of one export, with what the result and the check need of it."""

    graph: Graph
    binding: model_io.Binding
    inputs: list
    outputs: list
    output_names: list[str]
    tracer_warnings: list[str]
    stream_axes: list[int] | None = None  # per input, its streaming axis (-1: none)

    @property
    def caller(self):
        """The model as the checks call it: positionally, or through the keyword binding."""
        model = self.graph.session.model
        return model_io.Adapter(model, self.binding) if self.binding.keywords else model


def _build(session, binding, output_names, dynamic_axes, stream_spec=None) -> _Built:
    """capture -> walk -> passes: the graph the writer serialises."""
    extensions.load_entry_points()  # installed packages' mappings, on the first export
    model, args, capture_with = session.model, binding.tensors, session.capture
    in_names = _names(binding.names, len(args), "input", "input")
    symbols = _symbols_for(dynamic_axes, in_names, args) if dynamic_axes else {}
    least = _symbol_minimums(dynamic_axes, symbols, args) if dynamic_axes else {}
    spec = _stream.resolve(*stream_spec, symbols, args, in_names) if stream_spec else None
    session.streaming = spec
    order = capture_order(capture_with, model, binding)
    for tried, used in enumerate(order):
        try:
            g, inputs, outs, program = _capture_walk(session, used, binding, in_names, symbols,
                                                     least, dynamic_axes)
            break
        except Exception as e:  # capture="auto": the next capture, saying why in one line
            if tried + 1 == len(order):
                for note in session.warnings[-tried:] if tried else ():
                    e.add_note(note)
                raise
            session.warnings.append(fallback_note(used, e, order[tried + 1]))
    session.captured_with = used
    said = capture_report(capture_with, used, model, binding)
    if said:
        session.extras.setdefault("report_lines", []).append(said)
    session.warnings += program.warnings
    found_names = program.output_names
    tracer_warnings = program.tracer_warnings
    if output_names is None and found_names is not None and len(found_names) == len(outs):
        output_names = found_names  # ModelOutput fields, cache tensors ...
    out_names = _names(output_names, len(outs), "output", "output")
    handles = []
    for t, name in zip(outs, out_names):
        if isinstance(t, torch.Tensor) and t.is_complex() or getattr(t, "complex", False):
            raise ConversionError("output", f"output {name} is complex: tract has no complex "
                                  "dtype; return its .real/.imag or torch.view_as_real(...)")
        if isinstance(t, torch.Tensor):
            t = g.variable(t, f"{name}.const")
        g.reserve_name(name)
        handles.append(t)
    g.set_outputs(handles, out_names)
    passes.run_pipeline(g, session)
    if spec is not None:
        _stream.refusals(g, spec)
    return _Built(g, binding, inputs, handles, out_names, tracer_warnings,
                  _stream.stream_axes(spec, symbols, len(args)) if spec else None)


def _capture_walk(session, capture: str, binding, in_names, symbols, least, dynamic_axes):
    """One capture of the model and the walk of its program into a new graph:
    (graph, its inputs, the model's outputs, the captured program)."""
    model, args = session.model, binding.tensors
    most = _symbol_maxima(dynamic_axes) if dynamic_axes else {}
    try:
        program = STRATEGIES[capture].capture(model, binding, symbols, in_names,
                                              bounds=(least, most))
    except Exception as e:
        note = capture_failure_note(session.capture, capture, e)  # names the other captures
        if note:
            e.add_note(note)
        raise
    g = Graph(session)
    g.symbol_maxima = most
    inputs = []
    for i, (name, a) in enumerate(zip(in_names, args)):
        if not dtypes.supported(g.computed(a.dtype)):
            hint = ("pass torch.view_as_real(...) and call torch.view_as_complex inside the "
                    "model" if a.dtype.is_complex else
                    "convert it to float32 or float16 before export")
            raise UsageError(f"input {name} has dtype {a.dtype}, which tract cannot take "
                             f"({hint})")
        shape = list(a.shape)
        for axis, sym in symbols.get(i, {}).items():
            shape[axis] = _sym(sym, least[sym])
            g.add_symbol(sym, minimum=least[sym])
        inputs.append(g.add_input(name, shape, g.computed(a.dtype)))

    outs = program.walk(g, inputs, {i: {axis: _sym(name, least[name])
                                        for axis, name in axes.items()}
                                    for i, axes in symbols.items()})
    return g, inputs, outs, program


def export_graph(model, args, *, input_names=None, output_names=None, dynamic_axes=None,
                 streaming=None, capture: str | None = None, dtype: str | None = None,
                 weights: str = "f32", **options) -> Graph:
    """The NNEF graph ``export`` would write for these arguments (after the passes).

    For tests and tools that inspect the graph (op counts, shapes) without an archive."""
    model = load_model(model)
    binding = model_io.bind(model, args, input_names)
    session = open_session(model, binding.tensors, None, weights=weights, capture=capture,
                           dtype=dtype, options=options)
    return _build(session, binding, output_names, dynamic_axes,
                  (streaming, None) if streaming is not None else None).graph


def _sym(name: str, least: int = 1):
    """The sympy symbol of a dynamic axis (nonnegative when it may be 0)."""
    from t2n.walk import dynamic

    return dynamic.symbol(name, least)


def check_archive(path: str, model, args, out_names: list[str], rtol: float = DEFAULT_RTOL,
                  atol: float = DEFAULT_ATOL, inputs=None,
                  target: str = "tract", input_names=None,
                  atol_for: dict | None = None) -> list[OutputCheck]:
    """Run the archive on ``args`` with the engine of ``target`` (tract, or nnef-tools for
    ``khronos``) and compare each output with PyTorch. ``args`` and ``input_names`` bind
    to ``forward`` as in :func:`export`; ``atol_for`` gives a larger absolute tolerance to
    some outputs, by name."""
    return check_archive_sets(path, load_model(model), args, out_names, rtol=rtol, atol=atol,
                              target=target, input_names=input_names,
                              atol_for=atol_for).checks
