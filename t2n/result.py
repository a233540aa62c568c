"""What an export returns: the archive's inputs and outputs, its ops, the checks and the
report (:class:`ExportResult`; ``t2n export --json`` is :mod:`t2n.jsonreport`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from t2n.check.compare import OutputCheck


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
    capture: str | None = None  # the capture used: "trace", "export", "torchscript"
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


def compared_sets(sets) -> list[str]:
    """The names of the input sets a check compared (its report's ``input_sets``)."""
    return [s["name"] for s in sets or () if s["compared"]]


def _sets_text(sets) -> str:
    """`` (input sets: example, fresh, fresh B=3)``: what a check compared."""
    names = compared_sets(sets)
    return f" (input sets: {', '.join(names)})" if names else ""


def _not_comparable(s: dict) -> str:
    return f"input set {s['name']}: not comparable ({s['reason']})"
