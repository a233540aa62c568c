"""Run the models of a ``t2n check`` manifest, each in its own process, and report.

The parent never imports the user's models: each entry is exported and checked by
``python -m t2n.check.manifest_run ENTRY.json RESULT.json`` in a child, so a model that segfaults,
hangs or exhausts memory fails that entry (status ``error``) and the other entries still
run. ``--jobs N`` keeps N children busy at once.

Statuses: ``pass``; ``fail`` (tract differs from PyTorch, or tract refused/crashed on the
archive); ``error`` (the model could not be loaded, traced or converted, or the child died).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from t2n.check.child import run_child

@dataclass
class EntryResult:
    name: str
    status: str  # pass | fail | error
    seconds: float
    message: str = ""
    export: dict | None = None  # jsonreport.result_dict of the export, when there was one
    warnings: list[str] = field(default_factory=list)
    log: str = ""

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 3),
                "message": self.message, "warnings": self.warnings, "export": self.export}


# ---------------------------------------------------------------------------- parent side
def run_all(entries, jobs: int = 1, keep_dir: str | None = None, trust_pickle: bool = False,
            progress=None) -> list[EntryResult]:
    """Results in manifest order."""
    with tempfile.TemporaryDirectory(prefix="t2n-check-") as work:
        out_dir = keep_dir or work

        def one(entry):
            r = run_entry(entry, work, out_dir, trust_pickle)
            if progress:
                progress(f"t2n check: {entry.name}: {r.status.upper()} ({r.seconds:.1f} s)")
            return r

        if jobs <= 1:
            return [one(e) for e in entries]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(one, entries))


def _safe_name(entry) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in entry.name)


def archive_paths(entry, out_dir: str) -> tuple[str, str]:
    """Where ``--keep DIR`` puts an entry's archive, and its archive when it fails."""
    safe = _safe_name(entry)
    return (os.path.join(out_dir, f"{safe}.nnef.tar"),
            os.path.join(out_dir, f"{safe}.failed.nnef.tar"))


def check_outputs(entries, keep_dir: str | None, junit_path: str | None,
                  json_path: str | None) -> None:
    """Fail fast, before any model runs: every path the run would write is free or holds
    what t2n wrote there before (t2n.write.output_paths); else OutputPathError naming it."""
    from t2n.write.output_paths import check_report
    from t2n.write.staging import check_destination

    for path, looks_ours in ((junit_path, _junit_looks_ours), (json_path, _json_looks_ours)):
        if path:
            check_report(path, looks_ours)
    if keep_dir:
        for entry in entries:
            check_destination(*archive_paths(entry, keep_dir))


def run_entry(entry, work: str, out_dir: str, trust_pickle: bool = False) -> EntryResult:
    safe = _safe_name(entry)
    spec_path = os.path.join(work, f"{safe}.entry.json")
    result_path = os.path.join(work, f"{safe}.result.json")
    data = entry.to_json()
    data["trust_pickle"] = bool(data.get("trust_pickle") or trust_pickle)
    data["out"], failed = archive_paths(entry, out_dir)
    if out_dir != work:  # --keep: a failing archive is kept too, under its own name
        data["keep_failed"] = failed
    with open(spec_path, "w") as f:
        json.dump(data, f)
    # (the entry's own folder: paths in the manifest are resolved against it already)
    run = run_child("t2n.check.manifest_run", [spec_path, result_path], workdir=None,
                    timeout=entry.timeout, pythonpath=tuple(entry.pythonpath))
    log = (run.stderr or "")[-4000:]
    if run.ok and os.path.exists(result_path):
        with open(result_path) as f:
            r = json.load(f)
        return EntryResult(entry.name, r["status"], run.seconds, r["message"], r.get("export"),
                           r.get("warnings", []), log)
    return EntryResult(entry.name, "error", run.seconds,
                       f"the conversion process {run.crash_text()}", log=log)


# ---------------------------------------------------------------------------- reports
def _errs(r: EntryResult) -> tuple[str, str]:
    checks = (r.export or {}).get("checks") or []
    if not checks:
        return "-", "-"

    def worst(key):
        vals = [c[key] for c in checks]
        nums = [v for v in vals if isinstance(v, (int, float))]
        if len(nums) != len(vals):
            return next(v for v in vals if not isinstance(v, (int, float)))
        return f"{max(nums):.2e}"

    return worst("max_abs_err"), worst("max_rel_err")


def format_table(results: list[EntryResult]) -> str:
    rows = [("MODEL", "RESULT", "OPS", "MAX ABS ERR", "MAX REL ERR", "TIME")]
    for r in results:
        ops = str((r.export or {}).get("op_count", "-"))
        abs_e, rel_e = _errs(r)
        rows.append((r.name, r.status.upper(), ops, abs_e, rel_e, f"{r.seconds:.1f}s"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    for r in results:
        if r.status != "pass":
            msg = r.message.strip().splitlines() or [""]
            lines.append(f"{r.name}: {msg[0]}")
            lines += ["    " + m.strip() for m in msg[1:]]
        for w in r.warnings:
            lines.append(f"{r.name}: warning: {w}")
    n_pass = sum(r.status == "pass" for r in results)
    n_fail = sum(r.status == "fail" for r in results)
    n_err = sum(r.status == "error" for r in results)
    lines.append(f"{n_pass} passed, {n_fail} failed, {n_err} errors")
    return "\n".join(lines)


def write_junit(results: list[EntryResult], path: str) -> None:
    """JUnit XML: one <testcase> per model; <failure> for a mismatch, <error> otherwise."""
    suite = ET.Element("testsuite", name="t2n check", tests=str(len(results)),
                       failures=str(sum(r.status == "fail" for r in results)),
                       errors=str(sum(r.status == "error" for r in results)),
                       skipped="0", time=f"{sum(r.seconds for r in results):.3f}")
    for r in results:
        case = ET.SubElement(suite, "testcase", classname="t2n.check.compare", name=r.name,
                             time=f"{r.seconds:.3f}")
        if r.status != "pass":
            tag = "failure" if r.status == "fail" else "error"
            first = (r.message.strip().splitlines() or [r.status])[0]
            el = ET.SubElement(case, tag, message=first, type=tag)
            el.text = r.message
        out = []
        if r.export:
            out.append(f"{r.export.get('op_count')} ops, {r.export.get('archive_bytes')} bytes")
            sets = r.export.get("input_sets") or []
            if sets:
                out.append("input sets: " + ", ".join(
                    s["name"] + ("" if s["compared"] else f" (not comparable: {s['reason']})")
                    for s in sets))
            for c in r.export.get("checks") or []:
                out.append(f"{c['name']}: {'ok' if c['ok'] else 'MISMATCH'} "
                           f"max_abs_err={c['max_abs_err']} max_rel_err={c['max_rel_err']}"
                           + (f" ({c['message']})" if c["message"] else ""))
        out += [f"warning: {w}" for w in r.warnings]
        if out:
            ET.SubElement(case, "system-out").text = "\n".join(out)
        if r.log and r.status == "error":
            ET.SubElement(case, "system-err").text = _xml_safe(r.log)
    root = ET.Element("testsuites", name="t2n", tests=suite.get("tests"),
                      failures=suite.get("failures"), errors=suite.get("errors"),
                      time=suite.get("time"))
    root.append(suite)
    _write_report(path, ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n",
                  _junit_looks_ours)


def write_json(results: list[EntryResult], path: str) -> None:
    data = {"passed": all(r.status == "pass" for r in results),
            "models": [r.to_json() for r in results]}
    _write_report(path, (json.dumps(data, indent=2) + "\n").encode(), _json_looks_ours)


def _xml_safe(text: str) -> str:
    return "".join(c for c in text if c in "\t\n\r" or ord(c) >= 0x20)


def _junit_looks_ours(head: bytes) -> bool:
    """A JUnit report t2n wrote (write_junit): its root is <testsuites name="t2n" ...>."""
    return b'<testsuites name="t2n"' in head


def _json_looks_ours(head: bytes) -> bool:
    """A JSON report t2n wrote (write_json): {"passed": ..., "models": [...]}."""
    return re.match(rb'\{\s*"passed": (true|false),\s*"models": \[', head) is not None


def _write_report(path: str, data: bytes, looks_ours) -> None:
    """Atomically; an existing file only if it is a report t2n wrote (t2n.write.output_paths)."""
    from t2n.write.output_paths import write_report

    write_report(path, data, looks_ours)


# ---------------------------------------------------------------------------- child side
def _child(spec_path: str, result_path: str) -> int:
    import warnings

    with open(spec_path) as f:
        e = json.load(f)
    for p in reversed(e.get("pythonpath", [])):
        sys.path.insert(0, p)
    result = {"status": "error", "message": "", "export": None, "warnings": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result.update(_convert(e))
        except Exception as exc:  # recorded per model; the run goes on with the next one
            from t2n.errors import T2NError

            if isinstance(exc, T2NError):
                result["status"] = "fail" if exc.exit_code == 1 else "error"
                result["message"] = str(exc)
                if getattr(exc, "kept_archive", None):
                    result["message"] += f"\n(archive kept in {exc.kept_archive})"
                report = getattr(exc, "report", None)
                if report is not None:
                    from t2n.jsonreport import result_dict

                    result["export"] = result_dict(report)
            else:
                result["message"] = f"internal error: {type(exc).__name__}: {exc}"
    result["warnings"] = sorted({str(w.message).strip().splitlines()[0] for w in caught
                                 if not issubclass(w.category, DeprecationWarning)})
    with open(result_path, "w") as f:
        json.dump(result, f)
    return 0


def _convert(e: dict) -> dict:
    import torch

    from t2n import specs
    from t2n.api import export
    from t2n.errors import UsageError
    from t2n.extensions import load_modules
    from t2n.jsonreport import result_dict

    load_modules(e.get("extensions", []))
    module, example = specs.load_model(e["model"], trust_pickle=e["trust_pickle"])
    inputs = e["inputs"]
    names = None
    int_range = None  # the check's fresh integers: the manifest's range for spec inputs
    if isinstance(inputs, list):
        parsed = [specs.parse_input_spec(s) for s in inputs]
        names = [p.name for p in parsed]
        whole, per_input = specs.parse_int_ranges(e["int_range"], names)
        args = specs.make_inputs(parsed, seed=e["seed"], int_range=whole, per_input=per_input)
        int_range = {n: per_input.get(n, whole) for n in names}
    elif isinstance(inputs, str) and inputs.lower().endswith(".npz"):
        names, args = specs.load_npz(inputs)
    elif isinstance(inputs, str):
        got = specs.call_ref(inputs, what="inputs")
        if isinstance(got, dict):
            names, args = list(got), tuple(got.values())
        elif isinstance(got, torch.Tensor):
            args = (got,)
        else:
            args = tuple(got) if isinstance(got, (list, tuple)) else got
        if not isinstance(args, tuple) or not all(isinstance(a, torch.Tensor) for a in args):
            raise UsageError(f"inputs {inputs}() must return a tensor, a tuple of tensors or "
                             "a dict of named tensors")
    elif example is not None:
        args, names = example, specs.example_names(example)
    else:
        raise UsageError("no inputs: give inputs = [\"x:1x3x224x224:f32\", ...]")
    dyn = specs.dynamic_axes_from(e["dynamic"], names or [f"input_{i}"
                                                          for i in range(len(args))])
    stream = {"streaming": e["stream"], "pulse": e.get("pulse")} if e.get("stream") else {}
    r = export(module, args, e["out"], input_names=names, output_names=e["output_names"],
               dynamic_axes=dyn, check=True, rtol=e["rtol"], atol=e["atol"], **stream,
               constant_outputs=e.get("constant_outputs") or None, seed=e["seed"],
               **({"int_range": int_range} if int_range else {}),
               **({"capture": e["capture"]} if e.get("capture") else {}),
               **({"keep_failed": e["keep_failed"]} if e.get("keep_failed") else {}))
    return {"status": "pass", "message": "", "export": result_dict(r)}


if __name__ == "__main__":
    sys.exit(_child(*sys.argv[1:]))
