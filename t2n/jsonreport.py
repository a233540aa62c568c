"""An ``ExportResult`` as plain JSON data: the ``t2n export --json`` output and the ``export``
record of each model in ``t2n check``'s JSON report (one shape for both)."""

from __future__ import annotations


def result_dict(result) -> dict:
    """ExportResult as plain JSON data."""

    def info(t):
        return {"name": t.name, "shape": [d if isinstance(d, int) else str(d) for d in t.shape],
                "dtype": t.dtype}

    d = {
        "path": result.path,
        "inputs": [info(t) for t in result.inputs],
        "outputs": [info(t) for t in result.outputs],
        "op_count": result.op_count,
        "op_histogram": dict(sorted(result.op_histogram.items())),
        "archive_bytes": result.archive_bytes,
        "export_seconds": round(result.export_seconds, 3),
        "phase_seconds": {k: round(v, 4) for k, v in
                          (getattr(result, "phase_seconds", None) or {}).items()},
        "capture": getattr(result, "capture", None),
        "warnings": list(result.warnings),
        "weights": result.extras.get("weights"),
        "weights_error": {name: {k: _num(v) for k, v in errs.items()} for name, errs in
                          (result.extras.get("weights_error") or {}).items()} or None,
        "passed": result.passed,
        "checks": None,
        # the input sets the check ran: example, fresh, fresh B=3 ... (t2n.check.input_sets)
        "input_sets": result.extras.get("input_sets"),
    }
    if result.checks is not None:
        d["checks"] = [_check_dict(c) for c in result.checks]
    s = getattr(result, "stream", None)
    if s is not None:
        d["stream"] = {"symbol": s.symbol, "pulse": s.pulse, "delays": dict(s.delays),
                       "input_axes": dict(s.input_axes), "output_axes": dict(s.output_axes),
                       "chunks": s.chunks, "stream_length": s.stream_length,
                       "checks": None if s.checks is None else [_check_dict(c)
                                                                for c in s.checks]}
    return d


def _check_dict(c) -> dict:
    return {"name": c.name, "ok": c.ok, "max_abs_err": _num(c.max_abs_err),
            "max_rel_err": _num(c.max_rel_err), "message": c.message,
            "input_set": getattr(c, "input_set", "")}


def _num(x: float):
    """JSON has no NaN/Infinity: write them as strings."""
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    return x
