"""Streaming exports: a time axis tract pulses, verified chunk by chunk.

``t2n.export(..., dynamic_axes={"x": {2: "S"}}, streaming="S", pulse=8)`` names the symbol
tract's ``Pulse`` transform streams over. The archive is the ordinary one (with ``S``
symbolic); what streaming changes is:

* **lowerings**: the export session carries a :class:`Streaming` (its ``streaming``) that
  lowerings consult through ``Graph.streams(t, axis)`` to pick forms tract can pulse (a
  strided slice on the streaming axis stays a slice, not a gather of indices; average
  pooling padded on the stream is a depthwise convolution of ones);
* **refusals at export**: :func:`refusals` rejects what tract would pulse into wrong values
  (a reshape that merges the streaming axis with an axis before it, a recurrent layer
  reading the stream backwards, a tensor spanning the stream twice such as S x S
  attention scores), and tract's own pulse errors are translated back to the aten op and the
  model's source line that stop streaming (:func:`translate`), not left as tract messages;
* **the delay**: the pulsed model's output lags its input by ``delay`` steps of the
  streaming axis (2 for a centred convolution of kernel 5, 0 for a causal model), read from
  tract (``ExportResult.delay``);
* **the check**: the example input is fed chunk by chunk through one state of the pulsed
  model (:mod:`t2n.check.pulse_runner`, in a child process), the first ``delay`` output steps are
  dropped, the rest concatenated and compared with PyTorch run on the same whole stream.

What the stream check compares: the stream fed to tract is the example input zero-padded
to whole chunks, followed by zero chunks that flush the delay. PyTorch runs on that same
whole stream, and every output step that the fed stream determines (all but the last
``delay`` steps, which tract has not produced yet) is compared, with ``check``'s
tolerances. A stream has no end: the last steps of the *example's* output, which a padded
convolution computes from its right padding, are not what a stream produces at that time,
so the check compares against the longer stream instead of the example alone.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field

import numpy as np

from t2n.check.compare import OutputCheck, compare
from t2n.errors import CheckFailedError, ConversionError, TractError, UsageError
from t2n.check.pulse_runner import pulse_size
from t2n.stopwatch import timed

DEFAULT_PULSE_AT_LEAST = 8  # the default pulse: the example length's first divisor >= 8


@dataclass(frozen=True)
class Streaming:
    """The streaming axis of an export: what lowerings consult (``Graph.streams``)."""

    symbol: str
    pulse: int | None = None  # None: chosen from the example length (default_pulse)

    def carries(self, dim) -> bool:
        """Whether a dimension (int or sympy expression) varies with the stream."""
        free = getattr(dim, "free_symbols", None)
        return bool(free) and any(s.name == self.symbol for s in free)


@dataclass
class StreamReport:
    """What tract's pulsed model is, and how its chunk-by-chunk run matched PyTorch."""

    symbol: str
    pulse: int
    delays: dict[str, int]  # output name -> delay in steps of the output's streaming axis
    input_axes: dict[str, int]  # input name -> streaming axis (-1: not streamed)
    output_axes: dict[str, int]
    output_pulses: dict[str, int] = field(default_factory=dict)
    checks: list[OutputCheck] | None = None
    chunks: int = 0
    stream_length: int = 0

    @property
    def delay(self):
        """The delay of the outputs: one int when they agree, else {output: delay}."""
        values = set(self.delays.values())
        return values.pop() if len(values) == 1 else dict(self.delays)

    @property
    def passed(self) -> bool | None:
        return None if self.checks is None else all(c.ok for c in self.checks)

    def lines(self) -> list[str]:
        per = ", ".join(f"{n} delay {d}, {self.output_pulses.get(n, '?')} steps per chunk"
                        for n, d in self.delays.items())
        out = [f"streaming over {self.symbol}, pulse {self.pulse}: {per}"]
        if self.checks is not None:
            out.append(f"pulsed check in tract ({self.chunks} chunks of {self.pulse}, one "
                       f"state, {self.stream_length} stream steps): "
                       + ("PASSED" if self.passed else "FAILED"))
            out += ["  " + c.line() for c in self.checks]
        return out


# ---------------------------------------------------------------------------- options
def resolve(streaming, pulse, symbols: dict[int, dict[int, str]], args,
            in_names: list[str]) -> Streaming | None:
    """The :class:`Streaming` of ``export(streaming=, pulse=)``, validated before the trace."""
    if streaming is None:
        if pulse is not None:
            raise UsageError("pulse= is the chunk size of a streaming export: give "
                             "streaming=SYMBOL too")
        return None
    named = sorted({s for axes in symbols.values() for s in axes.values()})
    if not isinstance(streaming, str) or streaming not in named:
        raise UsageError(f"streaming={streaming!r} must name one of the dynamic axes' symbols "
                         f"({', '.join(named) if named else 'none given: add dynamic_axes'})")
    if pulse is not None and (isinstance(pulse, bool) or not isinstance(pulse, int)
                              or pulse < 1):
        raise UsageError(f"pulse={pulse!r} must be a positive integer (steps per chunk)")
    return Streaming(streaming, pulse)


def stream_axes(spec: Streaming, symbols: dict[int, dict[int, str]], n_inputs: int) -> list:
    """Per input, the axis carrying the streaming symbol (-1 for inputs it does not cross)."""
    out = []
    for i in range(n_inputs):
        axes = [a for a, s in symbols.get(i, {}).items() if s == spec.symbol]
        out.append(axes[0] if axes else -1)
    return out


def default_pulse(length: int, multiple_of: int = 1) -> int:
    """A small chunk size that divides the example length: its first divisor >= 8 that is
    a multiple of ``multiple_of`` (the stride tract asked for), else the length."""
    for d in range(1, length + 1):
        if length % d == 0 and d >= min(DEFAULT_PULSE_AT_LEAST, length) \
                and d % multiple_of == 0:
            return d
    # no divisor fits: the check zero-pads the example to whole chunks anyway
    return multiple_of * math.ceil(min(DEFAULT_PULSE_AT_LEAST, length) / multiple_of)


# ---------------------------------------------------------------------------- export-time refusals
def refusals(g, spec: Streaming) -> None:
    """Refuse, naming the aten op and its line, what tract would pulse into wrong values.

    tract's pulse transform (0.23.9) accepts a reshape whose streaming axis is merged with
    axes before it ((C, S) -> C*S): each chunk is laid out channel-major, so concatenated
    chunks are not the whole stream's layout. It also pulses a scan that walks the stream
    backwards (a reverse-direction RNN) chunk by chunk, and a product of the stream with
    itself (S x S attention scores) as a product of each chunk with itself, and a slice
    whose start counts from the end of the stream (``x[..., -8:]``), and an STFT whose chunk
    splits a hop. All are refused here, as is a reflect padding of the stream (tract
    refuses it, with a message that does not say what to do)."""
    for op in g.live_ops():
        square = next((o for o in op.outputs
                       if sum(spec.carries(d) for d in o.shape) >= 2), None)
        if square is not None:
            raise _refusal(op, f"its result {list(map(str, square.shape))} spans the "
                           f"streaming axis {spec.symbol} twice (every step against every "
                           "step, like attention scores over the whole stream), which no "
                           "chunk can hold; attend over a bounded window of past steps "
                           "built from shifted copies instead")
        if op.kind == "tract_core_stft":
            reason = _stft_reason(g, spec, op)
        elif op.kind == "pad" and op.attrs.get("border") == "reflect":
            reason = _reflect_reason(g, spec, op)
        elif op.kind == "reshape":
            x, y = op.args[0], op.outputs[0]
            reason = _reshape_reason(spec, x.shape, y.shape)
        elif op.kind == "slice":
            reason = _slice_reason(g, spec, op)
        elif op.kind == "tract_core_scan":
            reason = _scan_reason(g, spec, op.attrs.get("scan") or [])
        else:
            continue
        if reason:
            raise _refusal(op, reason)


def _reflect_reason(g, spec: Streaming, op) -> str | None:
    """A reflect border on the streaming axis: its start mirrors steps after the stream's
    first (a delay could wait for them) but its end mirrors the steps before the stream's
    end, which a stream never reaches; tract 0.23.9 pulses neither. ``torch.stft`` pads
    this way by default (``center=True``), hence the hint."""
    x = op.args[0]
    for axis, (b, e) in enumerate(op.attrs.get("padding") or []):
        if (b or e) and g.streams(x, axis):
            return (f"its reflect padding of the streaming axis {spec.symbol} mirrors the "
                    "steps after the stream's start and before its end, and a stream has "
                    "no end. torch.stft(center=True) pads this way by default "
                    "(pad_mode='reflect'): pass center=False (to reproduce center=True's "
                    "frames, start the stream with its first n_fft // 2 samples mirrored, "
                    "x[1:n_fft // 2 + 1].flip(-1)), or pad_mode='constant'")
    return None


def _stream_rate(spec: Streaming, dim):
    """Steps of ``dim`` per step of the stream, as a fraction (``S + 400`` -> 1,
    ``floor((S - 3) / 2) + 1`` -> 1/2), or None when ``dim`` does not grow linearly in S."""
    import sympy
    from fractions import Fraction

    expr = sympy.sympify(dim).replace(sympy.floor, lambda e: e).replace(sympy.ceiling,
                                                                          lambda e: e)
    sym = next(s for s in expr.free_symbols if s.name == spec.symbol)
    rate = sympy.diff(expr, sym)
    return Fraction(str(rate)) if rate.is_Rational and rate > 0 else None


def stft_multiples(g, spec: Streaming) -> list[tuple[object, int | None]]:
    """(op, multiple) for each STFT framing the stream: the pulse must be a multiple of
    ``multiple`` so that every chunk holds whole hops (None: the rate of the stream at the
    STFT is not a constant fraction of the input's). tract 0.23.9 pulses an STFT whose
    chunk is not a whole number of hops without an error, into a garbage frame count
    (pulse 100, hop 160) or wrong frames (pulse 400, hop 160: 2 frames per chunk, not
    2.5): t2n refuses such a pulse at export and picks a default pulse that fits."""
    return [(op, _stft_multiple(g, spec, op)) for op in g.live_ops()
            if op.kind == "tract_core_stft" and g.streams(op.args[0], op.attrs["axis"])]


def _stft_multiple(g, spec: Streaming, op) -> int | None:
    x, hop = op.args[0], op.attrs["stride"]
    rate = _stream_rate(spec, x.shape[op.attrs["axis"]])
    # the STFT sees pulse * rate samples per chunk: a multiple of hop
    return None if rate is None else hop * rate.denominator // math.gcd(hop, rate.numerator)


def _stft_reason(g, spec: Streaming, op) -> str | None:
    """A pulse (the given one; a defaulted one is chosen to fit) that splits a hop."""
    x, hop = op.args[0], op.attrs["stride"]
    if not g.streams(x, op.attrs["axis"]):
        return None
    multiple = _stft_multiple(g, spec, op)
    if multiple is None:
        return (f"it frames the streaming axis {spec.symbol} every {hop} steps "
                f"(hop_length={hop}) after ops that change the stream's rate in a way "
                "t2n cannot follow to check the pulse: frame the input stream directly")
    if spec.pulse is not None and spec.pulse % multiple:
        return (f"it frames the streaming axis {spec.symbol} every {hop} of its steps "
                f"(hop_length={hop}): a chunk must hold whole hops, so the pulse must be "
                f"a multiple of {multiple} steps of {spec.symbol} (pulse={spec.pulse} "
                "given; a pulsed model emits a fixed number of frames per chunk, never a "
                "fraction of one)")
    return None


def _reshape_reason(spec: Streaming, src, dst) -> str | None:
    s_in = [i for i, d in enumerate(src) if spec.carries(d)]
    s_out = [i for i, d in enumerate(dst) if spec.carries(d)]
    if not s_in and not s_out:
        return None
    if len(s_in) != 1 or len(s_out) != 1:
        return (f"the reshape {list(map(str, src))} -> {list(map(str, dst))} moves the "
                f"streaming axis {spec.symbol} in a way tract cannot stream")
    before_in = math.prod(int(d) for d in src[:s_in[0]] if not spec.carries(d))
    before_out = math.prod(int(d) for d in dst[:s_out[0]] if not spec.carries(d))
    if before_in != before_out:
        return (f"the reshape {list(map(str, src))} -> {list(map(str, dst))} merges the "
                f"streaming axis {spec.symbol} with axes before it: a chunk of the stream "
                "would not be a contiguous block of the result (put the streaming axis "
                "first among the merged axes, e.g. permute to (..., S, C) before the "
                "reshape)")
    return None


def _slice_reason(g, spec: Streaming, op) -> str | None:
    """A slice starting at a position counted from the end of the stream (``x[..., -8:]``)
    needs the stream's end; tract 0.23.9 pulses it into wrong values."""
    x = op.args[0]
    for axis, begin in zip(op.attrs.get("axes", []), op.attrs.get("begin", [])):
        begin = getattr(begin, "expr", begin)
        if g.streams(x, axis % x.rank) and spec.carries(begin):
            return (f"it starts at {begin}, a position counted from the end of the stream "
                    f"{spec.symbol}, which a stream does not know until it ends")
    return None


def _scan_reason(g, spec: Streaming, scans) -> str | None:
    """A loop that walks the stream from its end (a reverse-direction RNN) cannot run
    before the stream has ended; tract 0.23.9 pulses it anyway, into wrong values."""
    for entry in scans:
        _, x, axis, step = entry
        if isinstance(step, int) and step < 0 and g.streams(x, axis % x.rank):
            return (f"it reads the streaming axis {spec.symbol} backwards, from the end of "
                    "the stream (a reverse or bidirectional recurrent layer); only forward "
                    "directions can stream")
    return None


def _refusal(op, reason: str) -> ConversionError:
    origin = op.origin
    name = origin.op if origin is not None else op.kind
    return ConversionError(name, f"stops streaming: {reason}",
                           origin.where if origin is not None else None)


# ---------------------------------------------------------------------------- tract's errors
_STRIDE = re.compile(r"requires pulse \((\d+)\) to be a stride \((\d+)\) multiple")
_NODE = re.compile(r'#\d+ "([^"]+)"')


def translate(message: str, g, spec: Streaming, pulse: int) -> ConversionError:
    """tract's pulse error as a refusal naming the aten op and the model's source line."""
    names = _NODE.findall(message)
    op = _op_named(g, names[-1]) if names else None
    cause = message.strip().splitlines()[-1] if message.strip() else "(no message)"
    m = _STRIDE.search(message)
    if m:
        reason = (f"its stride {m.group(2)} along {spec.symbol} needs a pulse that is a "
                  f"multiple of {m.group(2)} (pulse={pulse} given)")
    elif "could not track pulsing axis" in message or "Disappearing pulsing axis" in message:
        reason = (f"it combines values across the streaming axis {spec.symbol} (it needs "
                  "the whole stream: a reduction, a sort, an index along the stream ...)")
    else:
        reason = f"tract cannot pulse it over {spec.symbol}: {cause}"
    if op is None:
        return ConversionError("streaming", f"tract cannot pulse the model over "
                               f"{spec.symbol} with pulse {pulse}: {cause}")
    return _refusal(op, reason)


def _op_named(g, tract_node: str):
    """The builder op whose output tract named ``tract_node`` (tract suffixes the NNEF
    identifier with ``_...`` or ``.`` for the nodes one NNEF op expands into)."""
    best, best_len = None, -1
    for op in g.live_ops():
        for o in op.outputs:
            n = o.name
            if (tract_node == n or tract_node.startswith(n + "_")
                    or tract_node.startswith(n + ".")) and len(n) > best_len:
                best, best_len = op, len(n)
    return best


# ---------------------------------------------------------------------------- pulse + run in tract
def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)


def _child(request: dict, workdir: str, timeout: float) -> dict:
    req_path = os.path.join(workdir, "request.json")
    res_path = os.path.join(workdir, "result.json")
    with open(req_path, "w") as f:
        json.dump(request, f)
    from t2n.check.child import run_child

    run = run_child("t2n.check.pulse_runner", [req_path, res_path], workdir=workdir,
                    timeout=timeout)
    if not run.crashed and os.path.exists(res_path):
        with open(res_path) as f:
            return json.load(f)
    raise TractError(f"tract, pulsing and running the archive, {run.crash_text()}",
                     crashed=True)


def _upsamplers(g, spec: Streaming) -> list:
    """Ops that make several stream steps of each input step: a reshape (S, r) -> r*S
    (nearest upsampling, repeat_interleave) or a transposed convolution strided on the
    stream. tract 0.23.9 pulses them with the right values but does not scale the delay
    they receive, so ``pulse.delay`` is wrong when their input is delayed."""
    import sympy

    ups = []
    for op in g.live_ops():
        x = op.args[0] if op.args else None
        if op.kind == "reshape":
            s_in = [d for d in x.shape if spec.carries(d)]
            s_out = [d for d in op.outputs[0].shape if spec.carries(d)]
            if len(s_in) == 1 and len(s_out) == 1:
                ratio = sympy.simplify(sympy.sympify(s_out[0]) / sympy.sympify(s_in[0]))
                if ratio.is_Integer and ratio > 1:
                    ups.append(op)
        elif op.kind == "deconv":
            strides = op.attrs.get("stride") or []
            if any(st > 1 and g.streams(x, 2 + i) for i, st in enumerate(strides)):
                ups.append(op)
    return ups


def _refuse_delayed_upsampling(path: str, g, spec: Streaming, pulse: int, workdir: str,
                               timeout: float) -> None:
    """Pulse a probe archive whose outputs are the inputs of the upsampling ops: one that
    receives a delayed stream is refused (tract would report a wrong delay)."""
    from t2n.write.writer import write

    producer = {id(o): op for op in g.live_ops() for o in op.outputs}
    ups, sources = [], []
    for op in _upsamplers(g, spec):
        x = op.args[0]
        # (S, r) -> r*S reshapes come after unsqueeze + broadcast, where tract already
        # drops the delay: probe the stream before them
        while id(x) in producer and producer[id(x)].kind in ("unsqueeze",
                                                             "tract_core_broadcast"):
            x = producer[id(x)].args[0]
        if all(x is not t for t in g.inputs):
            ups.append(op)
            sources.append(x)
    if not ups:
        return
    names = {id(o): o.name for op in g.ops for o in op.outputs}
    saved = g.outputs, g.output_names
    probe = os.path.join(workdir, "probe.nnef")
    try:
        g.outputs = sources
        g.output_names = [f"t2n_stream_probe_{i}" for i in range(len(ups))]
        write(g, probe)
    finally:
        g.outputs, g.output_names = saved
        for op in g.ops:
            for o in op.outputs:
                o.name = names[id(o)]
    res = _child({"archive": probe, "symbol": spec.symbol, "pulse": pulse, "inputs": None,
                  "stream_axes": None}, workdir, timeout)
    for op, delay in zip(ups, res.get("delays", [])):
        if delay > 0:
            _remove(path)
            raise _refusal(op, f"it upsamples the stream after a delay of {delay} step(s) "
                           "(a padded or valid convolution before it looks ahead): tract "
                           "0.23.9 streams it with a wrong delay; upsample before the "
                           "look-ahead, or use a causal (left-padded) convolution before it")


@timed("check")
def pulse_and_check(path: str, g, spec: Streaming, *, model=None, args=None,
                    axes: list[int], out_names: list[str], check: bool,
                    rtol: float, atol: float, run_torch=None,
                    timeout: float = 600) -> StreamReport:
    """Pulse the written archive in tract (a child process), read the delays and, with
    ``check``, run the example stream chunk by chunk and compare with PyTorch
    (``run_torch(model, inputs)`` -> flat list of numpy outputs).

    A graph tract cannot pulse is refused (:class:`ConversionError` naming the aten op and
    line) and the archive removed: it is not the streaming archive asked for."""
    lengths = [int(a.shape[ax]) for a, ax in zip(args, axes) if ax >= 0]
    length = lengths[0]
    multiple = math.lcm(1, *(m for _, m in stft_multiples(g, spec) if m))
    pulse = spec.pulse or default_pulse(length, multiple)
    with tempfile.TemporaryDirectory(prefix="t2n-pulse-") as d:
        request = {"archive": os.path.abspath(path), "symbol": spec.symbol, "pulse": pulse,
                   "inputs": None, "stream_axes": axes}
        if check:
            request["inputs"] = os.path.join(d, "inputs.npz")
            np.savez(request["inputs"], *[a.detach().numpy() for a in args])
        for _ in range(6):  # a defaulted pulse follows the strides tract asks for
            request["pulse"] = pulse
            res = _child(request, d, timeout)
            m = _STRIDE.search(res.get("error", ""))
            if spec.pulse is None and m:
                # the op sees pulse/local steps per chunk: it needs local to be a multiple
                # of its stride, so the input pulse a multiple of (pulse/local) * stride
                local, stride = int(m.group(1)), int(m.group(2))
                multiple = math.lcm(multiple, (pulse // max(local, 1)) * stride)
                nxt = default_pulse(length, multiple)
                if nxt != pulse:
                    pulse = nxt
                    continue
            break
        if "error" not in res:
            _refuse_delayed_upsampling(path, g, spec, pulse, d, timeout)
        if "error" in res:
            if res["stage"] == "run":
                raise TractError(f"tract could not run the pulsed archive {path}: "
                                 f"{res['error']}")
            _remove(path)
            raise translate(res["error"], g, spec, pulse)
        in_names = [t.name for t in g.inputs]
        report = StreamReport(
            spec.symbol, pulse, dict(zip(out_names, res["delays"])),
            dict(zip(in_names, res["input_axes"])), dict(zip(out_names, res["output_axes"])),
            {n: pulse_size(f, a)
             for n, f, a in zip(out_names, res["output_facts"], res["output_axes"]) if a >= 0})
        missing = [n for n, a in report.output_axes.items() if a < 0]
        if missing:
            _remove(path)
            raise ConversionError("streaming", f"output(s) {', '.join(missing)} do not run "
                                  f"along the streaming axis {spec.symbol}: tract's pulsed "
                                  "model gives them per chunk, not as a stream")
        if not check:
            return report
        with np.load(os.path.join(d, "outputs.npz"), allow_pickle=False) as z:
            pulsed = [z[f"arr_{i}"] for i in range(len(z.files))]
    report.chunks, report.stream_length = res["chunks"], res["stream_length"]
    report.checks = _compare_stream(run_torch, model, args, axes, res["stream_length"],
                                    pulsed, report, out_names, rtol, atol)
    return report


def _compare_stream(run_torch, model, args, axes, stream_length, pulsed, report, out_names,
                    rtol, atol):
    import torch

    stream = []
    for a, ax in zip(args, axes):
        if ax < 0:
            stream.append(a)
            continue
        shape = list(a.shape)
        shape[ax] = stream_length - a.shape[ax]
        stream.append(torch.cat([a, torch.zeros(shape, dtype=a.dtype)], dim=ax))
    expected = run_torch(model, tuple(stream))
    if len(expected) != len(pulsed):
        raise CheckFailedError(f"the pulsed model returned {len(pulsed)} outputs, "
                               f"PyTorch {len(expected)}")
    checks = []
    for name, e, got in zip(out_names, expected, pulsed):
        ax = report.output_axes[name]
        # steps the fed stream determines: tract has produced them, PyTorch's right
        # padding has not touched them
        n = min(e.shape[ax], got.shape[ax])
        if n <= 0:  # never a vacuous pass
            checks.append(OutputCheck(f"{name} (pulsed)", False, float("nan"), float("nan"),
                                      "no output step to compare: give a longer example"))
            continue
        e = np.take(e, np.arange(n), axis=ax)
        got = np.take(got, np.arange(n), axis=ax)
        c = compare(f"{name} (pulsed, {n} steps)", e, got, rtol=rtol, atol=atol)
        checks.append(c)
    return checks
