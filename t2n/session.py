"""One export session: the choices of one ``t2n.export`` call and the tables its stages share.

``export()`` creates one :class:`ExportSession`. Every stage receives it beside the graph:
the walk (the builder hands it to the mappings as ``g.session``), the passes
(``run(g, session)``), the target, the writer and the check. The graph
(:class:`t2n.walk.builder.Graph`) holds only what the archive says: inputs, ops, variables,
symbols, outputs. What outlives one op but is not the graph lives here, typed and named:
how each weight is stored, which weights the passes derived from the model's, the
quantization parameters the walk met, the report's extras and warnings.

Targets and weight formats answer capability questions through their own tables
(``session.target.can("fragments")``, ``session.weights.compresses``): no stage compares
their names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch

from t2n.capture.strategies import check_capture
from t2n.check.compare import DEFAULT_ATOL, DEFAULT_RTOL
from t2n.errors import UsageError
from t2n.targets import TARGETS, Target, get_target
from t2n.write.staging import check_destination
from t2n.write.weight_formats import WEIGHT_FORMATS, WeightFormat, get_format


@dataclass
class CheckSettings:
    """How the archive is proved (t2n.check.verify): loaded by its engine always (unless
    ``verify_load=False``); with ``check=True`` also run against PyTorch on the example and
    on fresh inputs (``fresh_inputs``, ``int_range``, ``seed``), outputs that depend on no
    input allowed when declared (``constant_outputs``)."""

    run: bool = False
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    verify_load: bool = True
    fresh_inputs: bool = True
    int_range: Any = None
    seed: int | None = None
    constant_outputs: Any = None


@dataclass
class QuantizedValues:
    """What the walk learns of torch.ao quantized tensors (:mod:`t2n.mappings.quantized`,
    :mod:`t2n.mappings.helpers.quantized_tensors`)."""

    params: dict[int, tuple] = field(default_factory=dict)  # id(tensor) -> (scale, zero point)
    steps: dict[int, float] = field(default_factory=dict)  # id(output) -> its quantization step
    # id(weight computed in the graph) -> its largest magnitude (t2n.walk.quant_steps)
    bounds: dict[int, float] = field(default_factory=dict)
    # id(quantized tensor) -> the same integers as exact float32, where the mapping that
    # made it computed them (a requantization's clamp): float consumers read these
    # instead of casting the integers back
    as_float: dict[int, Any] = field(default_factory=dict)
    # id(twin) -> (the float it clamps, lo, hi): a later clamp of the same integers to a
    # narrower range clamps that float once (mappings/helpers/quantized_tensors.py)
    clamped: dict[int, tuple] = field(default_factory=dict)
    count: int = 0  # labels of the constants the quantized mappings store

    def label(self, kind: str) -> str:
        self.count += 1
        return f"quantized.{kind}{self.count}"


@dataclass
class DerivedWeights:
    """Weights the passes computed from the model's (:func:`t2n.passes.rewrite.derived`): a
    compressed weight format may store only model weights, or a model weight times a factor
    (whose rounding the check maps back onto the model weight)."""

    folded: set[int] = field(default_factory=set)  # id(tensor) of every derived weight
    scaled_from: dict[int, torch.Tensor] = field(default_factory=dict)  # id -> model weight


@dataclass
class ExportSession:
    """The options of one export and the cross-stage tables (see the module docstring)."""

    model: Any = None  # the user's model: read, never modified
    args: tuple = ()  # the example inputs
    capture: str | None = "trace"  # the capture asked for (t2n.capture.strategies; None: by kind)
    captured_with: str | None = None  # the one that captured the model ("auto": either)
    options: dict = field(default_factory=dict)  # the passes' options (t2n.passes)
    target: Target = TARGETS["tract"]
    weights: WeightFormat = WEIGHT_FORMATS["f32"]
    streaming: Any = None  # the streaming axis (t2n.streaming.Streaming) or None
    # what bfloat16 values compute in (tract has no bf16) and whether, without an explicit
    # ``dtype=``, they are rounded as PyTorch rounds them (t2n.walk.bf16_values)
    bf16_as: torch.dtype = torch.float32
    bf16_rounding: bool = False
    compute_dtype: torch.dtype | None = None  # export's explicit ``dtype=`` (bf16 models)
    properties: dict = field(default_factory=dict)  # tract_core_properties of the archive
    check: CheckSettings = field(default_factory=CheckSettings)
    # the tables
    storage: dict = field(default_factory=dict)  # id(variable tensor) -> its Storage
    derived: DerivedWeights = field(default_factory=DerivedWeights)
    quantized: QuantizedValues = field(default_factory=QuantizedValues)
    bf16_held: set[int] = field(default_factory=set)  # ids of tensors holding bf16 values
    extras: dict = field(default_factory=dict)  # ExportResult.extras (report lines, ...)
    warnings: list[str] = field(default_factory=list)


# The options ``export`` reads itself; the passes declare theirs (t2n.passes).
# progress: None (auto) | bool | callable; quiet: no progress bar; properties: {key: str |
# int | list} written as the archive's tract_core_properties (metadata a runtime reads,
# e.g. t2n.llm's cache layout); keep_failed: a path the archive moves to when its check
# fails (t2n.write.staging); the check's: verify_load, constant_outputs, int_range, seed,
# fresh_inputs (CheckSettings)
API_OPTIONS = frozenset({"progress", "quiet", "properties", "keep_failed", "verify_load",
                         "constant_outputs", "int_range", "seed", "fresh_inputs"})


def known_options() -> frozenset[str]:
    from t2n import passes

    return API_OPTIONS | passes.options()


def open_session(model, args: tuple, f, *, check=False, rtol=DEFAULT_RTOL, atol=DEFAULT_ATOL,
                 weights="f32", streaming=None, pulse=None, target="tract", capture=None,
                 dtype=None, options: dict) -> ExportSession:
    """The session of one ``export`` call, every argument checked before the capture (which
    can take minutes on a large model): a wrong choice is a UsageError now, and ``f`` must
    be a path t2n may write (:mod:`t2n.write.output_paths`; None: no archive, the graph
    only, as ``export_graph``)."""
    from t2n.walk import compute_dtype

    tgt = get_target(target)
    if f is not None and not isinstance(f, (str, os.PathLike)):
        raise UsageError("f must be a path")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
               for v in (rtol, atol)):
        raise UsageError(f"rtol and atol must be numbers >= 0 (got {rtol!r}, {atol!r})")
    check_capture(capture)
    unknown = set(options) - known_options()
    if unknown:
        raise UsageError(f"unknown export option(s): {', '.join(sorted(unknown))}")
    fmt = get_format(weights)
    properties = options.get("properties")
    if properties is not None:
        from t2n.write.writer import render_properties

        if not isinstance(properties, dict):
            raise UsageError("properties must be a dict {key: value}")
        render_properties(properties)  # refuse bad values before the trace
    if not tgt.can("properties") and (fmt.compresses or streaming is not None
                                      or pulse is not None or properties):
        raise UsageError(f"target {tgt.name!r} writes weights as the model holds them and no "
                         "streaming form or properties: weights=, streaming=, pulse= and "
                         "properties= are tract's")
    chosen = compute_dtype.resolve(dtype, model, args)
    if f is not None:
        check_destination(os.fspath(f), options.get("keep_failed"))  # never a user's file
    return ExportSession(
        model=model, args=tuple(args), capture=capture, options=dict(options), target=tgt,
        weights=fmt, bf16_as=chosen or torch.float32, bf16_rounding=chosen is None,
        compute_dtype=chosen, properties=dict(properties or {}),
        check=CheckSettings(run=bool(check), rtol=rtol, atol=atol,
                            verify_load=options.get("verify_load", True),
                            fresh_inputs=options.get("fresh_inputs", True),
                            int_range=options.get("int_range"), seed=options.get("seed"),
                            constant_outputs=options.get("constant_outputs")))
