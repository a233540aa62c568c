"""The model zoo under several random weight draws: does every export still match PyTorch?

    python -m bench.weight_draw_sweep [--draws 3] [--first-draw 0] [--models NAME,...]
                                      [--family vision|transformers] [--timeout 900]
                                      [--json FILE]

The zoo tests (tests/zoo/) check each model under one weight draw (seed 0). A wrong lowering
can hide behind one draw: a block whose output happens to be small, a softmax that
saturates, a branch a ReLU switches off. This sweep exports every zoo model of
``tests/zoo/vision_models.py`` and ``tests/zoo/transformers_models.py`` under ``--draws``
weight draws and checks each archive in tract against PyTorch at the zoo's tolerances
(vision rtol 1e-3 / atol 1e-4, transformers the entry's own), on the zoo's dynamic sizes too.

Draw ``k`` re-draws every parameter with the zoo's ``redraw(model, seed=k)`` (vision:
``zoo_weights.redraw``, batch norms calibrated on seeded random images; transformers:
``transformers_models.redraw``) and seeds the inputs with ``k``: vision images are
``torch.randn`` after ``torch.manual_seed(k)``, transformers inputs are the entry's own with
float tensors and token ids re-drawn from a generator seeded with ``k`` (masks kept). Draw 0
is the zoo test itself.

Each model runs in its own child process (``--child``), all its draws there, one JSON line
per draw, so a crash (tract aborts in its own runner process already; a segfault in torch
or a timeout here) loses one model only and is reported as an error. For a mismatch the
child also measures how far PyTorch's float32 result and tract's are from float64 (the same
model and inputs in double): a deep net that amplifies rounding puts both at the same
distance from float64, a wrong lowering leaves tract far from it while torch f32 is close.

Prints one line per model and draw (pass / MISMATCH max abs err / ERROR message), then a
summary with the failing cases and the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench import common

ZOO = os.path.join(common.ROOT, "tests", "zoo")
FAMILIES = ("vision", "transformers")
VISION_RTOL, VISION_ATOL = 1e-3, 1e-4  # as tests/zoo/test_vision_zoo.py


def _zoo_modules():
    """(vision_models, transformers_models, zoo_weights) imported from tests/zoo."""
    if ZOO not in sys.path:
        sys.path.insert(0, ZOO)
    import transformers_models
    import vision_models
    import zoo_weights

    return vision_models, transformers_models, zoo_weights


def zoo_entries(family: str | None = None) -> list[tuple[str, str]]:
    """[(family, model name)] of the zoo, vision first."""
    vm, tm, _ = _zoo_modules()
    out = []
    if family in (None, "vision"):
        out += [("vision", e.name) for e in vm.MODELS]
    if family in (None, "transformers"):
        out += [("transformers", e.name) for e in tm.MODELS]
    return out


# ------------------------------------------------------------------------------ one draw
def _vision_case(entry, draw: int, zoo_weights):
    """(model, args, export kwargs, more_args, rtol, atol) of a vision entry at ``draw``,
    as test_vision_zoo builds it (draw 0 is that test)."""
    import torch

    torch.manual_seed(draw)
    model = entry.build()
    shape = tuple(entry.shape[1:])
    zoo_weights.redraw(model, seed=draw, calibrate_input=lambda: (torch.randn(4, *shape),))
    if not entry.dynamic_batch:
        return model, (torch.randn(1, *shape),), {}, [], VISION_RTOL, VISION_ATOL
    kwargs = dict(input_names=["image"], dynamic_axes={"image": {0: "batch"}})
    args = (torch.randn(2, *shape),)
    more = [(torch.randn(b, *shape),) for b in entry.dynamic_batch]
    return model, args, kwargs, more, VISION_RTOL, VISION_ATOL


def _redraw_inputs(inputs: dict, draw: int, vocab: int) -> dict:
    """The entry's keyword inputs with floats and token ids re-drawn for ``draw`` (same
    shapes; attention masks and other integer tensors kept)."""
    import torch

    if draw == 0:
        return inputs
    g = torch.Generator().manual_seed(1000 + draw)
    out = {}
    for name, t in inputs.items():
        if t.dtype.is_floating_point:
            t = torch.randn(t.shape, generator=g, dtype=t.dtype)
        elif name.endswith("input_ids"):
            t = torch.randint(0, vocab, t.shape, generator=g, dtype=t.dtype)
        out[name] = t
    return out


def _transformers_case(entry, draw: int, tm):
    """(model, args, export kwargs, more_args, rtol, atol) of a transformers entry at
    ``draw``, as test_zoo_transformers builds it (draw 0 is that test)."""
    model = entry.build()  # re-drawn with seed 0 by the zoo itself
    if draw:
        tm.redraw(model, seed=draw)
    args = _redraw_inputs(entry.inputs(*entry.size), draw, tm.VOCAB)
    kwargs, more = {}, []
    if entry.dynamic:
        kwargs["dynamic_axes"] = {k: v for k, v in entry.dynamic.items() if k in args}
        more = [_redraw_inputs(entry.inputs(*s), draw, tm.VOCAB) for s in entry.more_sizes]
    return model, args, kwargs, more, entry.rtol, entry.atol


def _float64_gaps(model, args, input_names, archive) -> dict:
    """How much this model amplifies float32 rounding on these inputs: the largest
    |torch f32 - torch f64| and |tract - torch f64| over the float outputs. A wrong lowering
    leaves tract far from float64 while torch f32 is close to it; a model that amplifies
    rounding puts both at the same distance. Empty when the model does not run in double."""
    import copy

    import numpy as np
    import torch
    from t2n.capture import model_io
    from t2n.check.eager import torch_outputs  # flattened as the export flattens them
    from t2n.check.tract_runner import run_in_tract

    def cast(a):
        if isinstance(a, dict):
            return {k: cast(v) for k, v in a.items()}
        if isinstance(a, (tuple, list)):
            return type(a)(cast(v) for v in a)
        return a.double() if torch.is_tensor(a) and a.dtype.is_floating_point else a

    def gap(xs, ys):
        gaps = [float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())
                for a, b in zip(xs, ys)
                if np.issubdtype(np.asarray(b).dtype, np.floating) and np.asarray(b).size]
        return max(gaps) if gaps else None

    try:
        f32 = torch_outputs(model, args, input_names)
        f64 = torch_outputs(copy.deepcopy(model).double(), cast(args), input_names)
    except Exception:  # noqa: BLE001  (some models refuse double: then no figure)
        return {}
    out = {"torch_f32_vs_f64": gap(f32, f64)}
    if os.path.exists(archive):
        try:
            inputs = [a.detach().numpy() for a in model_io.bind(model, args, input_names).tensors]
            out["tract_vs_f64"] = gap(run_in_tract(archive, inputs), f64)
        except Exception:  # noqa: BLE001
            pass
    return out


def run_draw(family: str, name: str, draw: int) -> dict:
    """Export one zoo model at one weight draw with check=True; the outcome as a dict."""
    import warnings

    import t2n
    from t2n.api import check_archive
    from t2n.errors import CheckFailedError, T2NError

    vm, tm, zw = _zoo_modules()
    start = time.perf_counter()
    out = {"family": family, "model": name, "draw": draw}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if family == "vision":
            entry = next(e for e in vm.MODELS if e.name == name)
            model, args, kwargs, more, rtol, atol = _vision_case(entry, draw, zw)
        else:
            entry = next(e for e in tm.MODELS if e.name == name)
            model, args, kwargs, more, rtol, atol = _transformers_case(entry, draw, tm)
        checks = []
        with tempfile.TemporaryDirectory(prefix="t2n-sweep-") as d:
            path = os.path.join(d, "model.nnef")
            failed = os.path.join(d, "failed.nnef")  # the archive of a failed check
            inames = kwargs.get("input_names")
            failing = args  # the inputs of the first mismatch
            try:
                result = t2n.export(model, args, path, check=True, rtol=rtol, atol=atol,
                                    keep_failed=failed, **kwargs)
                checks += result.checks or []
                names = [o.name for o in result.outputs]
                for extra in more:
                    extra_checks = check_archive(path, model, extra, names, rtol=rtol,
                                                 atol=atol, input_names=inames)
                    if failing is args and not all(c.ok for c in extra_checks):
                        failing = extra
                    checks += extra_checks
            except CheckFailedError as e:
                checks += (e.report.checks or []) if e.report is not None else []
                if not checks:
                    out.update(status="error", message=str(e).splitlines()[0][:300])
            except (T2NError, Exception) as e:  # noqa: BLE001  (any failure is a row)
                out.update(status="error", message=f"{type(e).__name__}: "
                           f"{str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}")
            if "status" not in out:
                bad = [c for c in checks if not c.ok]
                out["max_abs_err"] = max((c.max_abs_err for c in checks), default=0.0)
                out["status"] = "mismatch" if bad else "pass"
                if bad:  # on the inputs of the first mismatch
                    out["outputs"] = [c.name for c in bad][:4]
                    out.update(_float64_gaps(model, failing, inames, failed if os.path.exists(
                        failed) else path))
    out["seconds"] = round(time.perf_counter() - start, 1)
    return out


def child(job: dict) -> None:
    """In a child: every requested draw of one model, one JSON line each."""
    common.declare_torchvision_schemas()
    for draw in job["draws"]:
        print(json.dumps(run_draw(job["family"], job["model"], draw)), flush=True)


# ------------------------------------------------------------------------------ parent
def run_model(family: str, name: str, draws: list[int], timeout: float) -> list[dict]:
    """All draws of one model in a fresh child; a draw the child did not report (crash,
    timeout) becomes an error row naming how the child ended."""
    env = dict(os.environ, PYTHONPATH=common.ROOT + os.pathsep + os.environ.get("PYTHONPATH",
                                                                                  ""))
    job = {"family": family, "model": name, "draws": draws}
    cmd = [sys.executable, "-m", "bench.weight_draw_sweep", "--child", json.dumps(job)]
    try:
        p = subprocess.run(cmd, cwd=common.ROOT, capture_output=True, text=True,
                           timeout=timeout, env=env, stdin=subprocess.DEVNULL)
        stdout, stderr, ended = p.stdout, p.stderr, f"exit {p.returncode}"
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr, ended = "", f"timeout after {timeout:.0f} s"
    rows = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith("{")]
    done = {r["draw"] for r in rows}
    tail = [ln for ln in stderr.strip().splitlines() if "Error" in ln or "panicked" in ln]
    why = f"{ended}: {(tail or stderr.strip().splitlines() or ['(no output)'])[-1][:200]}"
    rows += [{"family": family, "model": name, "draw": d, "status": "error", "message": why}
             for d in draws if d not in done]
    return sorted(rows, key=lambda r: r["draw"])


def row_text(r: dict) -> str:
    head = f"{r['family']:<12} {r['model']:<30} {r['draw']:>4}  "
    if r["status"] == "pass":
        return head + f"pass      max_abs_err={r['max_abs_err']:.2g}  {r.get('seconds', 0):.0f} s"
    if r["status"] == "mismatch":
        gaps = " ".join(f"{k}={'n/a' if r.get(k) is None else format(r[k], '.2g')}"
                        for k in ("torch_f32_vs_f64", "tract_vs_f64"))
        return head + (f"MISMATCH  max_abs_err={r['max_abs_err']:.3g} {gaps} "
                       f"outputs={','.join(r.get('outputs', []))}")
    return head + f"ERROR     {r.get('message', '')}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.weight_draw_sweep",
                                 description=__doc__.split("\n\n")[2])
    ap.add_argument("--draws", type=int, default=3, help="weight draws per model (default 3)")
    ap.add_argument("--first-draw", type=int, default=0, help="seed of the first draw")
    ap.add_argument("--models", help="comma-separated zoo names (default: all of --family)")
    ap.add_argument("--family", choices=FAMILIES, help="one half of the zoo only")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per model (all draws)")
    ap.add_argument("--json", help="write every row to this file too")
    a = ap.parse_args(argv)
    entries = zoo_entries(a.family)
    if a.models:
        wanted = [m.strip() for m in a.models.split(",") if m.strip()]
        known = {n for _, n in entries}
        unknown = [m for m in wanted if m not in known]
        if unknown:
            ap.error(f"not in the zoo{' (' + a.family + ')' if a.family else ''}: "
                     f"{', '.join(unknown)}")
        entries = [(f, n) for f, n in entries if n in wanted]
    draws = list(range(a.first_draw, a.first_draw + a.draws))
    print(f"{len(entries)} models x {len(draws)} draws (seeds {draws[0]}..{draws[-1]}), "
          f"load average {common.load_average():.1f}", flush=True)
    print(f"{'family':<12} {'model':<30} {'draw':>4}  result", flush=True)
    rows, start = [], time.perf_counter()
    for family, name in entries:
        for r in run_model(family, name, draws, a.timeout):
            rows.append(r)
            print(row_text(r), flush=True)
    wall = time.perf_counter() - start
    counts = {s: sum(r["status"] == s for r in rows) for s in ("pass", "mismatch", "error")}
    print(f"\nsummary: {counts['pass']} pass, {counts['mismatch']} mismatch, "
          f"{counts['error']} error of {len(rows)} ({len(entries)} models x {len(draws)} "
          f"draws) in {wall:.0f} s wall")
    for r in rows:
        if r["status"] != "pass":
            print("  " + row_text(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "wall_seconds": round(wall, 1)}, f, indent=1)
    return 1 if counts["mismatch"] or counts["error"] else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        child(json.loads(sys.argv[2]))
    else:
        sys.exit(main())
