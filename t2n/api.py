"""``t2n.export``: the public entry point, shaped like ``torch.onnx.export``."""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field

import torch

from . import compute_dtype, constant_outputs, dtypes, extensions, model_io, passes, weight_formats
from . import streaming as _stream
from .builder import Graph, safe_identifier
from .capture import capture, load_torchscript
from .check import DEFAULT_ATOL, DEFAULT_RTOL, OutputCheck
from .eager import torch_outputs
from .errors import CheckFailedError, ConversionError, TractError, UsageError
from .fresh_inputs import FreshInputs
from .staging import check_destination, staged
from .targets import get_target
from .walker import Walker
from .stopwatch import phase, timed, timed_export


@dataclass
class TensorInfo:
    """An archive input or output as the report gives it: sizes are ints where they are
    known numbers (a symbolic size that simplified to one, ``S - (S - 1)``, included) and
    symbol expressions otherwise."""

    name: str
    shape: list
    dtype: str

    def __post_init__(self):
        self.shape = [int(d) if getattr(d, "is_Integer", False) else d for d in self.shape]

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape) or "scalar"
        return f"{self.name}: {dims} {self.dtype}"


@dataclass
class ExportResult:
    """What an export produced, and how well tract matched PyTorch when checked."""

    path: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    op_histogram: dict[str, int]
    archive_bytes: int
    export_seconds: float
    checks: list[OutputCheck] | None = None
    warnings: list[str] = field(default_factory=list)
    extras: dict = field(default_factory=dict)
    stream: object = None  # t2n.streaming.StreamReport of a streaming export, else None
    phase_seconds: dict[str, float] = field(default_factory=dict)  # t2n.stopwatch
    _rounded: object = field(default=None, repr=False, compare=False)

    def rounded_model(self):
        """The exported model as tract computes it: a copy holding the rounded weights
        when they were compressed (``weights="f16"|"q4_0"``), else the model itself."""
        return self._rounded() if callable(self._rounded) else self._rounded

    @property
    def op_count(self) -> int:
        return sum(self.op_histogram.values())

    @property
    def delay(self):
        """Streaming exports: the output delay of tract's pulsed model, in steps of the
        streaming axis (an int, or {output: delay} when outputs differ); else None."""
        return None if self.stream is None else self.stream.delay

    @property
    def passed(self) -> bool | None:
        results = [r for r in (self.checks, getattr(self.stream, "checks", None))
                   if r is not None]
        return None if not results else all(c.ok for r in results for c in r)

    def report(self) -> str:
        lines = [f"exported {self.path} ({self.archive_bytes:,} bytes, {self.op_count} ops, "
                 f"{self.export_seconds:.2f} s)"]
        lines += ["  input  " + str(i) for i in self.inputs]
        lines += ["  output " + str(o) for o in self.outputs]
        top = sorted(self.op_histogram.items(), key=lambda kv: (-kv[1], kv[0]))
        lines.append("  ops: " + ", ".join(f"{k} {v}" for k, v in top))
        for w in self.warnings:
            lines.append("  warning: " + w)
        for line in self.extras.get("report_lines", []):
            lines.append("  " + line)
        if self.checks is not None:
            ok = all(c.ok for c in self.checks)
            engine = self.extras.get("checked_with", "tract")
            lines.append(f"  check in {engine}: " + ("PASSED" if ok else "FAILED")
                         + _sets_text(self.extras.get("input_sets")))
            lines += ["    " + c.line() for c in self.checks]
            lines += ["    " + _not_comparable(s) for s in self.extras.get("input_sets") or []
                      if not s["compared"]]
        if self.stream is not None:
            lines += ["  " + line for line in self.stream.lines()]
        return "\n".join(lines)


def _compared(sets) -> list[str]:
    return [s["name"] for s in sets or () if s["compared"]]


def _sets_text(sets) -> str:
    """`` (input sets: example, fresh, fresh B=3)``: what a check compared."""
    names = _compared(sets)
    return f" (input sets: {', '.join(names)})" if names else ""


def _not_comparable(s: dict) -> str:
    return f"input set {s['name']}: not comparable ({s['reason']})"


def _as_args(args) -> tuple:
    """The example tensors of ``args`` (a tensor, a tuple or a dict of tensors), in order."""
    return model_io.bind(None, args, None).tensors


def _caller(model, binding):
    """``model`` as the checks call it: positionally, or through the keyword binding."""
    return model_io.Adapter(model, binding) if binding.keywords else model


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


def _load_model(model):
    if isinstance(model, (str, os.PathLike)):
        return load_torchscript(os.fspath(model))
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"model must be an nn.Module, a ScriptModule or a path, not "
                         f"{type(model).__name__}")
    return model


def _symbols_for(dynamic_axes, input_names, args) -> dict:
    """{input index: {axis: symbol name}} from ONNX-style ``dynamic_axes``."""
    from . import dynamic

    return dynamic.parse_dynamic_axes(dynamic_axes, input_names, args)


def _symbol_minimums(dynamic_axes, symbols, args) -> dict:
    """{symbol: least run-time size}, declared to tract as ``tract_assert``."""
    from . import dynamic

    return dynamic.symbol_minimums(dynamic_axes, symbols, args)


def _symbol_maxima(dynamic_axes) -> dict:
    """{symbol: most run-time size} of the axes given as ``(symbol, least, most)``."""
    from . import dynamic

    return dynamic.symbol_maxima(dynamic_axes)


# The options ``export`` reads itself; the passes declare theirs (t2n.passes).
# progress: None (auto) | bool | callable; properties: {key: str | int | list} written as
# the archive's tract_core_properties (metadata a runtime reads, e.g. t2n.llm's cache layout)
# keep_failed: a path the archive moves to when its check fails (t2n.staging)
# verify_load: False skips the load that proves the engine takes the archive (t2n.load_check)
# constant_outputs: names of outputs meant to depend on no input (t2n.constant_outputs)
# int_range / seed: [lo, hi) of the integers and the seed of the check's fresh inputs;
# fresh_inputs=False: the check compares the example only (inputs whose exact values matter)
_API_OPTIONS = frozenset({"progress", "quiet", "properties", "keep_failed", "verify_load",
                          "constant_outputs", "int_range", "seed", "fresh_inputs"})
_KNOWN_OPTIONS = _API_OPTIONS | passes.options()


def _check_options(options: dict) -> None:
    unknown = set(options) - _KNOWN_OPTIONS
    if unknown:
        raise UsageError(f"unknown export option(s): {', '.join(sorted(unknown))}")
    if options.get("properties") is not None:
        from .writer import render_properties

        if not isinstance(options["properties"], dict):
            raise UsageError("properties must be a dict {key: value}")
        render_properties(options["properties"])  # refuse bad values before the trace


@dataclass
class _Built:
    """The NNEF graph of one export, with what the result reports about it."""

    graph: Graph
    inputs: list
    outputs: list
    output_names: list[str]
    tracer_warnings: list[str]
    stream_axes: list[int] | None = None  # per input, its streaming axis (-1: none)


def _build(model, binding, output_names, dynamic_axes, options,
           stream_spec=None, target: str = "tract", capture_with: str = "trace",
           bf16_as=None) -> _Built:
    """capture -> walk -> passes: the graph the writer serialises."""
    extensions.load_entry_points()  # installed packages' mappings, on the first export
    args = binding.tensors
    in_names = _names(binding.names, len(args), "input", "input")
    symbols = _symbols_for(dynamic_axes, in_names, args) if dynamic_axes else {}
    least = _symbol_minimums(dynamic_axes, symbols, args) if dynamic_axes else {}
    spec = _stream.resolve(*stream_spec, symbols, args, in_names) if stream_spec else None
    if capture_with == "export":
        from .export_capture import capture_export

        program = capture_export(model, binding, symbols, in_names)
    else:
        captured = capture(model, args, binding)
        if captured.n_inputs != len(args):
            raise UsageError(f"the traced model takes {captured.n_inputs} tensor input(s), "
                             f"{len(args)} given")

    g = Graph()
    if bf16_as is not None:
        g.bf16_as = bf16_as
    # without an explicit compute dtype, bf16 values (casts, bf16 buffers) are held in f32
    # and rounded as PyTorch rounds them (t2n.bf16_values)
    g.bf16_rounding = bf16_as is None
    g.streaming = spec
    g.symbol_maxima = _symbol_maxima(dynamic_axes) if dynamic_axes else {}
    g.properties = dict(options.get("properties") or {})
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
            shape[axis] = _sym(sym)
            g.add_symbol(sym, minimum=least[sym])
        inputs.append(g.add_input(name, shape, g.computed(a.dtype)))

    if capture_with == "export":
        from .fx_walker import FxWalker

        sym_handles = {i: {axis: _sym(name) for axis, name in axes.items()}
                       for i, axes in symbols.items()}
        walker = FxWalker(g, program, sym_handles)
        outs = walker.run(inputs)
        found_names = walker.output_names
        g.warnings += [f"the model is valid for {r} only (torch.export's guards)"
                       for r in program.t2n_ranges]
        tracer_warnings: list[str] = []
    else:
        walker = Walker(g, captured.root, {})
        walker.path_prefix = captured.path_prefix
        outs = walker.run(captured.graph, inputs)
        found_names = captured.output_names
        tracer_warnings = list(captured.tracer_warnings)
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
    passes.run_pipeline(g, passes.PassContext(model=model, args=args, options=dict(options),
                                              target=target))
    if spec is not None:
        _stream.refusals(g, spec)
    return _Built(g, inputs, handles, out_names, tracer_warnings,
                  _stream.stream_axes(spec, symbols, len(args)) if spec else None)


def export_graph(model, args, *, input_names=None, output_names=None, dynamic_axes=None,
                 streaming=None, capture: str = "trace", dtype: str | None = None,
                 **options) -> Graph:
    """The NNEF graph ``export`` would write for these arguments (after the passes).

    For tests and tools that inspect the graph (op counts, shapes) without an archive."""
    model = _load_model(model)
    binding = model_io.bind(model, args, input_names)
    _check_options(options)
    return _build(model, binding, output_names, dynamic_axes, options,
                  (streaming, None) if streaming is not None else None,
                  capture_with=_capture_mode(capture),
                  bf16_as=compute_dtype.resolve(dtype, model, binding.tensors)).graph


def _capture_mode(capture: str) -> str:
    if capture not in ("trace", "export"):
        raise UsageError(f"capture={capture!r}: choose 'trace' (torch.jit.trace) or 'export' "
                         "(torch.export)")
    return capture


@timed_export
def export(model, args, f, *, input_names=None, output_names=None, dynamic_axes=None,
           check: bool = False, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
           weights: str = "f32", streaming: str | None = None, pulse: int | None = None,
           target: str = "tract", capture: str = "trace", dtype: str | None = None,
           **options) -> ExportResult:
    """Export ``model`` run on ``args`` to the NNEF archive ``f`` for tract.

    ``f`` ending in ``.tgz``/``.tar.gz`` gives a gzip tar, ``.tar`` a tar, ``.nnef``, no
    suffix or a trailing ``/`` a folder; another suffix (``m.zip``) is refused, and so is a
    user's folder, file or symbolic link at ``f``: only an NNEF archive is replaced
    (:class:`OutputPathError` before the trace, nothing changed; :mod:`t2n.output_paths`).

    With ``check=True`` the archive is run in tract (in a child process) on
    ``args`` and compared with PyTorch; a mismatch raises :class:`CheckFailedError`. The
    archive reaches ``f`` only when the export succeeds, check included: after a failed
    check or any error, ``f`` holds what it held before (:mod:`t2n.staging`); the option
    ``keep_failed=PATH`` moves the archive of a failed check to PATH, for inspection.

    The check proves the graph, not one replay of the trace: besides ``args`` it compares
    fresh inputs of the same shapes and dtypes, and every dynamic axis at another size
    (:mod:`t2n.fresh_inputs`; seeded by ``seed=``, integers from ``int_range=(lo, hi)``
    or the example's own range), all run in one load of the archive; the report names
    the input sets compared. An output that depends on no input (a result the trace froze,
    e.g. computed through NumPy) is warned about, and fails the check unless declared
    ``constant_outputs=[name]`` (:mod:`t2n.constant_outputs`).

    ``weights`` is how the model's float weights are stored (:mod:`t2n.weight_formats`):

    * ``"f32"`` (default): as the model holds them;
    * ``"f16"``: float32/float64 weights stored as float16 (about half the archive), each
      cast back after loading, so the graph computes in the model's own dtype;
    * ``"q4_0"``: weights of linear layers, matrix products with constant weights,
      convolution filters (rows of ``C_in/groups * kernel``) and embedding tables stored
      in tract's Q4_0 blocks (32 values along the reduced axis, 4 bits each plus an f16
      scale: 0.14x of float32), used by tract's matmul and gather directly. Weights whose
      reduced axis is not a multiple of 32, and all others, stay as held.

    The report (and ``ExportResult.extras["weights"]``) lists what was compressed. With a
    compressed format, ``check=True`` compares tract with PyTorch run on a copy of the
    model holding the same rounded weights (the user's model is not modified), and also
    reports the error against the original model (``extras["weights_error"]``).

    ``streaming="S"`` (one of the ``dynamic_axes`` symbols) makes a streaming export: the
    graph is built in forms tract can pulse over ``S``, tract pulses it (a model that cannot
    stream is refused, naming the op and line), ``result.delay`` gives the pulsed model's
    output delay, and ``check=True`` also runs the pulsed model chunk by chunk (``pulse``
    steps per chunk; default a small divisor of the example length) against PyTorch on the
    whole stream (see :mod:`t2n.streaming`).

    ``target="khronos"`` writes standard NNEF (Khronos 1.0.5: standard operations only,
    static shapes, weights as held) instead of tract's dialect (:mod:`t2n.targets`); its
    check parses the archive with the Khronos parser and runs nnef-tools' interpreter.

    ``dtype`` is what a bfloat16 model (bf16 weights or inputs; tract has no bf16) computes
    in, an explicit choice (:mod:`t2n.compute_dtype`): ``"f32"`` (exact bf16 values) or
    ``"f16"`` (half precision, PyTorch's float16 rules). Its weights are converted while
    they are written, the model is not modified, and ``check=True`` compares with PyTorch
    running a converted copy. A bf16 model without ``dtype`` is refused, saying so.

    Before the archive is accepted, its engine loads it (:mod:`t2n.load_check`): tract
    parses and optimises it into a runnable plan (``target="khronos"``: the Khronos parser
    reads it), in a child process; a refusal raises ``LoadRefusedError`` naming the op and
    source line, and nothing is written. ``check=True`` loads it anyway (no second load);
    ``verify_load=False`` skips this proof.

    ``capture="export"`` captures the model with ``torch.export`` (:mod:`t2n.export_capture`)
    instead of ``torch.jit.trace``: the same mappings, checks and errors; data-dependent
    Python control flow is then an error instead of being frozen by the trace.
    """
    t0 = time.perf_counter()
    tgt = get_target(target)
    if tgt.name != "tract" and (weights != "f32" or streaming is not None or pulse is not None
                                or options.get("properties")):
        raise UsageError(f"target {tgt.name!r} writes weights as the model holds them and no "
                         "streaming form or properties: weights=, streaming=, pulse= and "
                         "properties= are tract's")
    model = _load_model(model)
    binding = model_io.bind(model, args, input_names)
    args = binding.tensors
    if not isinstance(f, (str, os.PathLike)):
        raise UsageError("f must be a path")
    f = os.fspath(f)
    # argument checks before the trace, which can take minutes on a large model
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
               for v in (rtol, atol)):
        raise UsageError(f"rtol and atol must be numbers >= 0 (got {rtol!r}, {atol!r})")
    _check_options(options)
    options["weights"] = weight_formats.check_format(weights)
    bf16_as = compute_dtype.resolve(dtype, model, args)
    check_destination(f, options.get("keep_failed"))  # t2n.output_paths: never a user's file
    built = _build(model, binding, output_names, dynamic_axes, options,
                   (streaming, pulse) if streaming is not None or pulse is not None else None,
                   target=tgt.name, capture_with=_capture_mode(capture), bf16_as=bf16_as)
    g, inputs, handles, out_names = built.graph, built.inputs, built.outputs, built.output_names
    with phase("lower"):
        tgt.lower(g)
    constant = constant_outputs.undeclared(g, out_names, options.get("constant_outputs"))

    from .archive_info import archive_ops
    from .progress import Bar, for_export
    from .writer import write

    # written and checked beside f, moved to f only when the check passes
    with staged(f, options.get("keep_failed")) as work:
        bar = for_export(options.get("progress"), quiet=bool(options.get("quiet")), started=t0)
        try:
            size = write(g, work, progress=bar, target=tgt)
        finally:
            if isinstance(bar, Bar):
                bar.close()
        result = ExportResult(
            path=f,
            inputs=[TensorInfo(t.name, list(t.shape), dtypes.tract_name(t.dtype)) for t in inputs],
            outputs=[TensorInfo(n, list(t.shape), dtypes.tract_name(t.dtype))
                     for n, t in zip(out_names, handles)],
            op_histogram=archive_ops(work), archive_bytes=size,  # t2n inspect's count
            export_seconds=time.perf_counter() - t0,
            warnings=list(g.warnings) + [f"tracer: {w.splitlines()[0]}" for w in
                                         built.tracer_warnings],
            extras=dict(g.__dict__.get("extras", {})))
        if options.get("verify_load", True) and not (check or g.streaming is not None):
            from .load_check import prove_loads  # (a check or a pulse loads it anyway)

            with phase("load"):
                prove_loads(work, g, tgt.checker)
        if g.storage:
            from .weight_check import rounded_copy

            result._rounded = lambda: rounded_copy(model, g)
        else:
            result._rounded = model
        for w in g.warnings:
            warnings.warn(w, stacklevel=2)
        caller = _caller(model, binding)
        if g.streaming is not None:
            reference = caller
            if check and g.storage:  # compressed weights: the stream runs on the rounded ones
                from .weight_check import rounded_copy

                reference = rounded_copy(caller, g)
            result.stream = _stream.pulse_and_check(
                work, g, g.streaming, model=reference, args=args, axes=built.stream_axes,
                out_names=out_names, check=check, rtol=rtol, atol=atol, run_torch=torch_outputs)
        if check and g.storage:  # compressed weights: compare on the same rounded weights
            from .weight_check import check_compressed, cost_lines

            done, cost = check_compressed(work, caller, g, args, out_names, rtol, atol,
                                          fresh=_fresh(args, inputs, options), constant=constant)
            result.checks = done.checks
            result.extras["input_sets"] = [s.to_json() for s in done.sets]
            result.extras["weights_error"] = {c.name: {"max_abs_err": c.max_abs_err,
                                                       "max_rel_err": c.max_rel_err} for c in cost}
            result.extras.setdefault("report_lines", []).extend(cost_lines(cost))
        elif check:
            reference = model if bf16_as is None else compute_dtype.reference_model(model, bf16_as)
            fed = compute_dtype.converted_inputs(args, bf16_as)
            try:
                done = check_archive_sets(
                    work, reference, fed, out_names, rtol=rtol, atol=atol, target=tgt.name,
                    input_names=binding.names, atol_for=quantization_steps(g, out_names, handles),
                    fresh=_fresh(fed, inputs, options), constant=constant)
            except TractError as e:  # the check loads the archive: name the op it refuses
                from .load_check import with_op_named

                raise with_op_named(e, g) from None
            result.checks = done.checks
            result.extras["input_sets"] = [s.to_json() for s in done.sets]
        if check:
            result.extras["checked_with"] = tgt.checker
        if check and not result.passed:
            bad = [c for c in result.checks + (result.stream.checks if result.stream else [])
                   if not c.ok]
            compared = _compared(result.extras.get("input_sets"))
            raise CheckFailedError(f"{tgt.checker}'s outputs differ from PyTorch's:\n" + "\n".join(
                "  " + c.line() for c in bad) + (f"\n  input sets compared: {', '.join(compared)}"
                                                 if compared else ""), report=result)
    return result


def _sym(name: str):
    import sympy

    return sympy.Symbol(name, integer=True, positive=True)


def quantization_steps(g, out_names, handles) -> dict[str, float]:
    """{output name: its quantization step} for outputs dequantized from int8 tensors
    (op_mappings/quantized.py): tract and PyTorch requantize with their own rounding, so
    such an output may differ by one step, which the check accepts."""
    steps = g.__dict__.get("quant_steps", {})
    return {n: steps[id(h)] * (1 + 1e-5) for n, h in zip(out_names, handles) if id(h) in steps}


def _fresh(args, inputs, options) -> "FreshInputs | None":
    """The check's fresh input sets, unless ``fresh_inputs=False``."""
    return FreshInputs.of_export(args, inputs, options) \
        if options.get("fresh_inputs", True) else None


def check_archive(path: str, model, args, out_names: list[str], rtol: float = DEFAULT_RTOL,
                  atol: float = DEFAULT_ATOL, inputs=None,
                  target: str = "tract", input_names=None,
                  atol_for: dict | None = None) -> list[OutputCheck]:
    """Run the archive on ``args`` with the engine of ``target`` (tract, or nnef-tools for
    ``khronos``) and compare each output with PyTorch. ``args`` and ``input_names`` bind
    to ``forward`` as in :func:`export`; ``atol_for`` gives a larger absolute tolerance to
    some outputs, by name."""
    return check_archive_sets(path, model, args, out_names, rtol=rtol, atol=atol, target=target,
                              input_names=input_names, atol_for=atol_for).checks


@timed("check")
def check_archive_sets(path: str, model, args, out_names: list[str], *, rtol: float, atol: float,
                       target: str = "tract", input_names=None, atol_for=None, fresh=None,
                       constant=(), more=()):
    """:func:`check_archive` on the example ``args`` ("example"; None: none), the named
    input sets ``more`` ([(name, args)]) and the fresh sets of ``fresh`` (:mod:`t2n.fresh_inputs`),
    the engine loading the archive once: a :class:`t2n.check_sets.SetsCheck`."""
    from . import nnef_tools_runner, tract_runner
    from .check_sets import InputSet, check_sets

    engine = get_target(target).checker
    run = nnef_tools_runner.run_sets_in_nnef_tools if engine == "nnef-tools" \
        else tract_runner.run_sets_in_tract
    model = _load_model(model)
    sets = ([InputSet("example", args)] if args is not None else []) + \
        [InputSet(n, a) for n, a in more]
    return check_sets(path, model, sets, out_names, run_sets=run, engine=engine, rtol=rtol,
                      atol=atol, input_names=input_names, atol_for=atol_for, fresh=fresh,
                      constant=tuple(constant))

