"""Compressed weights: archive size, export time, tract load/run time and error, per format.

    python -m bench.weights_bench                       # gpt2 resnet50, f32 f16 q4_0 (+ int8)
    python -m bench.weights_bench --models gpt2 --formats f32,q4_0 --runs 3

For each model (random weights from its config/constructor) and weight format, in fresh
child processes:

* export: ``t2n.export(..., weights=FORMAT, check=True)`` to a ``.nnef.tar`` (uncompressed,
  so the archive size is the weights' size); export seconds exclude the check;
* check: tract against PyTorch on the same rounded weights (pass/fail at rtol = atol =
  1e-3), and the max abs error of tract's output against the float32 model (what the
  format costs), beside the largest output magnitude;
* tract, in another process: ``tract.nnef().load`` seconds, ``into_runnable`` (optimise)
  seconds, and the median run time over ``--runs`` runs.

``int8`` rows (ResNet-50 only) export the torch.ao eager int8 model (x86, per-channel) and
compare it with its float32 original.

There is no peer route for these rows: torch.onnx writes float32 ONNX, and tract's ONNX
loader has no Q4_0 form of an ONNX weight.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

from bench import common

FORMATS = ("f32", "f16", "q4_0")


def resnet50():
    """torchvision ResNet-50 (25.6 M parameters), random weights, 1x3x224x224."""
    import torch

    common.declare_torchvision_schemas()
    from torchvision.models import resnet50 as make

    torch.manual_seed(0)
    return make(weights=None).eval(), (torch.randn(1, 3, 224, 224),)


MODELS = {"gpt2": common.gpt2, "resnet50": resnet50}


def _int8(name: str, args):
    """torch.ao eager static int8 of torchvision's quantizable ResNet-50 (same random
    weights as ``resnet50()``), x86 engine, calibrated on 4 random batches."""
    import copy

    import torch
    import torch.ao.quantization as tq
    from torchvision.models.quantization import resnet50 as make_q

    if name != "resnet50":
        raise common.Skip("int8 rows are for resnet50")
    torch.backends.quantized.engine = "x86"
    torch.manual_seed(0)
    m = make_q(weights=None, quantize=False).eval()
    m.load_state_dict(MODELS["resnet50"]()[0].state_dict())
    m.fuse_model(is_qat=False)
    m.qconfig = tq.get_default_qconfig("x86")
    p = tq.prepare(copy.deepcopy(m))
    with torch.no_grad():
        for _ in range(4):
            p(torch.randn(2, 3, 224, 224))
    return tq.convert(p)


# ------------------------------------------------------------------------------ child jobs
def _export(job: dict) -> dict:
    import numpy as np
    import torch

    import t2n
    from t2n.api import torch_outputs

    model, args = MODELS[job["model"]]()
    path = job["path"]
    fmt = job["format"]
    if fmt == "int8":
        original = model
        model = _int8(job["model"], args)
    # deep random-weight models reach |output| ~ 100: f32 summation order alone differs
    # by more than the default atol, so the check's tolerance is relative to that scale
    r = t2n.export(model, args, path, check=True, weights=fmt if fmt != "int8" else "f32",
                   rtol=1e-3, atol=1e-3)
    out = {"bytes": r.archive_bytes, "export_s": r.export_seconds, "passed": bool(r.passed),
           "check_err": max(c.max_abs_err for c in r.checks), "ops": r.op_count,
           "model_bytes": common.model_bytes(model) if fmt != "int8" else None}
    if fmt == "int8":
        from t2n.check.tract_runner import run_in_tract

        got = run_in_tract(path, [a.numpy() for a in args])
        ref = torch_outputs(original, args)
        out["err_vs_f32"] = max(float(np.abs(g.astype(np.float64) - e).max())
                                for g, e in zip(got, ref))
        out["scale"] = max(float(np.abs(e).max()) for e in ref)
    elif fmt == "f32":
        out["err_vs_f32"] = out["check_err"]
        out["scale"] = max(float(np.abs(e).max()) for e in torch_outputs(model, args))
    else:
        out["err_vs_f32"] = max(e["max_abs_err"] for e in r.extras["weights_error"].values())
        out["scale"] = max(float(np.abs(e).max()) for e in torch_outputs(model, args))
    out["compressed"] = len((r.extras.get("weights") or {}).get("compressed", []))
    del torch
    return out


def _tract(job: dict) -> dict:
    import numpy as np
    import tract

    t = common.timer()
    m = tract.nnef().load(job["path"])
    load_s = common.timer() - t
    t = common.timer()
    r = m.into_runnable()
    opt_s = common.timer() - t
    z = np.load(job["inputs"])
    inputs = [z[f"arr_{i}"] for i in range(len(z.files))]
    times = []
    for _ in range(job["runs"]):
        t = common.timer()
        r.run(inputs)
        times.append(common.timer() - t)
    return {"load_s": load_s, "optimise_s": opt_s, "run_s": statistics.median(times)}


def _inputs(job: dict) -> dict:
    import numpy as np

    _, args = MODELS[job["model"]]()
    np.savez(job["inputs"], *[a.numpy() for a in args])
    return {}


HANDLERS = {"export": _export, "tract": _tract, "inputs": _inputs}


# ------------------------------------------------------------------------------ parent
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gpt2,resnet50")
    ap.add_argument("--formats", default="f32,f16,q4_0,int8")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", help="keep the archives in this directory")
    a = ap.parse_args(argv)
    work = a.keep or tempfile.mkdtemp(prefix="t2n-weights-bench-")
    os.makedirs(work, exist_ok=True)
    rows = []
    try:
        for model in a.models.split(","):
            inputs = os.path.join(work, f"{model}.inputs.npz")
            common.run_child("bench.weights_bench", {"kind": "inputs", "model": model,
                                                     "inputs": inputs})
            base = None
            for fmt in a.formats.split(","):
                if fmt == "int8" and model != "resnet50":
                    continue
                path = os.path.join(work, f"{model}.{fmt}.nnef.tar")
                e = common.run_child("bench.weights_bench", {"kind": "export", "model": model,
                                                             "format": fmt, "path": path})
                row = {"model": model, "format": fmt, **e}
                if "error" not in e:
                    row.update(common.run_child("bench.weights_bench", {
                        "kind": "tract", "path": path, "inputs": inputs, "runs": a.runs}))
                    if fmt == "f32":
                        base = e["bytes"]
                    row["ratio"] = e["bytes"] / base if base else None
                rows.append(row)
                _print_row(row, header=len(rows) == 1)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _print_row(r: dict, header: bool) -> None:
    if header:
        print(f"{'model':<9} {'weights':<7} {'archive MB':>10} {'x f32':>6} {'export s':>8} "
              f"{'load s':>7} {'optim s':>7} {'run ms':>8} {'check':>6} {'err vs f32':>10} "
              f"{'|out| max':>9}")
    if "error" in r or "skip" in r:
        print(f"{r['model']:<9} {r['format']:<7} {r.get('error') or r.get('skip')}")
        return
    ratio = "-" if r.get("ratio") is None else f"{r['ratio']:.3f}"
    print(f"{r['model']:<9} {r['format']:<7} {r['bytes'] / 1e6:>10.1f} {ratio:>6} "
          f"{r['export_s']:>8.2f} {r.get('load_s', float('nan')):>7.2f} "
          f"{r.get('optimise_s', float('nan')):>7.2f} {r.get('run_s', float('nan')) * 1e3:>8.1f} "
          f"{'ok' if r['passed'] else 'FAIL':>6} {r['err_vs_f32']:>10.3g} {r['scale']:>9.3g}",
          flush=True)


if __name__ == "__main__":
    if not common.child_main(HANDLERS):
        sys.exit(main())
