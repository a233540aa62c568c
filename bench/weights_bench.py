"""Compressed weights: archive size, export time, tract load/run time and error, per format.

    python -m bench.weights_bench            # gpt2 resnet50 (f32 f16 q4_0), int8 rows too
    python -m bench.weights_bench --models resnet50,mobilenet_v2,bert --formats f32,int8
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

``int8`` rows (ResNet-50, MobileNetV2, a small BERT) export PyTorch's int8 model and
compare it with its float32 original: the vision models quantized statically in FX mode
(x86 engine, per-channel weights, 8 calibration batches of 2x3x224x224), BERT with
``quantize_dynamic`` (int8 linear layers). The int8 row's ``x f32 run`` is its run time
over the float32 archive's, both loaded in ONE tract process and run alternately (so
that load from other processes hits both alike).

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
    """torchvision ResNet-50 (25.6 M parameters), weights re-drawn as :func:`_redrawn`
    does, 1x3x224x224."""
    import torch

    return torchvision_redrawn("resnet50"), (torch.randn(1, 3, 224, 224),)


def mobilenet_v2():
    """torchvision MobileNetV2 (3.5 M parameters), weights re-drawn as :func:`_redrawn`
    does (its constructor's initialisation gives outputs of 1e-9), 1x3x224x224."""
    import torch

    return torchvision_redrawn("mobilenet_v2"), (torch.randn(1, 3, 224, 224),)


def torchvision_redrawn(name: str):
    """torchvision's ``name`` model (random weights, eval mode), built after seeding the
    global generator with 0 and re-drawn as :func:`_redrawn` does."""
    import torch

    common.declare_torchvision_schemas()
    import torchvision

    torch.manual_seed(0)
    return _redrawn(getattr(torchvision.models, name)(weights=None).eval())


def _redrawn(model):
    """Weights of a trained network's scale (issue #34's recipe): conv and linear weights
    N(0, 1/fan_in), biases N(0, 0.1), batch-norm scales U(0.5, 1.5), shifts N(0, 0.1),
    running means N(0, 0.1) and variances U(0.5, 1.5)."""
    import torch

    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g)
                               / m.weight[0].numel() ** 0.5)
                if m.bias is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
            elif isinstance(m, torch.nn.BatchNorm2d):
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
    return model


def bert():
    """transformers BERT, a small config (4 layers, hidden 256, 4 heads), random weights,
    1x64 tokens."""
    import torch

    common.declare_torchvision_schemas()
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=1024, vocab_size=8000)
    config._attn_implementation = "eager"
    inner = BertModel(config, add_pooling_layer=False).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, ids):
            return self.inner(input_ids=ids, return_dict=False)[0]

    return Hidden().eval(), (torch.randint(0, config.vocab_size, (1, 64)),)


MODELS = {"gpt2": common.gpt2, "resnet50": resnet50, "mobilenet_v2": mobilenet_v2,
          "bert": bert}
INT8 = ("resnet50", "mobilenet_v2", "bert")


def _int8(name: str, model):
    """PyTorch's int8 form of ``model``: static FX-mode quantization for the vision
    models (x86 engine, per-channel weights, 8 random calibration batches of
    2x3x224x224), dynamic int8 linear layers for BERT."""
    import copy

    import torch
    import torch.ao.quantization as tq

    if name not in INT8:
        raise common.Skip(f"int8 rows are for {', '.join(INT8)}")
    torch.backends.quantized.engine = "x86"
    if name == "bert":
        return tq.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)
    return fx_int8(model, "x86")


def fx_int8(model, engine: str):
    """``model`` quantized in FX mode for quantized ``engine`` (selected on return), with
    its default per-channel qconfig and 8 random calibration batches of 2x3x224x224."""
    import copy

    import torch
    import torch.ao.quantization as tq
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    torch.backends.quantized.engine = engine
    torch.manual_seed(1)
    batch = (2, 3, 224, 224)
    p = prepare_fx(copy.deepcopy(model), tq.get_default_qconfig_mapping(engine),
                   (torch.randn(*batch),))
    with torch.no_grad():
        for _ in range(8):
            p(torch.randn(*batch))
    return convert_fx(p)


# ------------------------------------------------------------------------------ child jobs
def _export(job: dict) -> dict:
    import numpy as np
    import torch

    import t2n
    from t2n.api import torch_outputs
    from t2n.errors import CheckFailedError

    model, args = MODELS[job["model"]]()
    path = job["path"]
    fmt = job["format"]
    if fmt == "int8":
        original = model
        model = _int8(job["model"], model)
    # deep random-weight models reach |output| ~ 100: f32 summation order alone differs
    # by more than the default atol, so the check's tolerance is relative to that scale
    try:
        r = t2n.export(model, args, path, check=True, weights=fmt if fmt != "int8" else "f32",
                       rtol=1e-3, atol=1e-3)
    except CheckFailedError as e:  # the row says FAIL and by how much; the archive is
        r = e.report               # written again (a failed check removes it) to be timed
        t2n.export(model, args, path)
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


def _pair(job: dict) -> dict:
    """Both archives (``paths``: int8, float32) in one tract process, run alternately:
    the median run time of each."""
    import numpy as np
    import tract

    z = np.load(job["inputs"])
    inputs = [z[f"arr_{i}"] for i in range(len(z.files))]
    nnef = tract.nnef()
    runnables = [nnef.load(p).into_runnable() for p in job["paths"]]
    times = [[] for _ in runnables]
    for r in runnables:
        r.run(inputs)
    for k in range(job["runs"]):
        order = list(range(len(runnables)))
        for i in order if k % 2 == 0 else order[::-1]:
            t = common.timer()
            runnables[i].run(inputs)
            times[i].append(common.timer() - t)
    return {"pair_run_s": [statistics.median(t) for t in times]}


def _inputs(job: dict) -> dict:
    import numpy as np

    _, args = MODELS[job["model"]]()
    np.savez(job["inputs"], *[a.numpy() for a in args])
    return {}


HANDLERS = {"export": _export, "tract": _tract, "inputs": _inputs, "pair": _pair}


# ------------------------------------------------------------------------------ parent
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gpt2,resnet50,mobilenet_v2,bert")
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
                if fmt == "int8" and model not in INT8 or \
                        fmt in ("f16", "q4_0") and model not in ("gpt2", "resnet50"):
                    continue
                path = os.path.join(work, f"{model}.{fmt}.nnef.tar")
                e = common.run_child("bench.weights_bench", {"kind": "export", "model": model,
                                                             "format": fmt, "path": path})
                row = {"model": model, "format": fmt, **e}
                if "error" not in e:
                    row.update(common.run_child("bench.weights_bench", {
                        "kind": "tract", "path": path, "inputs": inputs, "runs": a.runs}))
                    if fmt == "f32":
                        base, f32_path = e["bytes"], path
                    row["ratio"] = e["bytes"] / base if base else None
                    if fmt == "int8" and base:  # int8 against float32, one tract process
                        s8, s32 = common.run_child("bench.weights_bench", {
                            "kind": "pair", "paths": [path, f32_path], "inputs": inputs,
                            "runs": a.runs})["pair_run_s"]
                        row["run_vs_f32"] = s8 / s32
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
              f"{'|out| max':>9} {'x f32 run':>9}")
    if "error" in r or "skip" in r:
        print(f"{r['model']:<9} {r['format']:<7} {r.get('error') or r.get('skip')}")
        return
    ratio = "-" if r.get("ratio") is None else f"{r['ratio']:.3f}"
    vs_f32 = f"{r['run_vs_f32']:.2f}" if "run_vs_f32" in r else "-"
    print(f"{r['model']:<9} {r['format']:<7} {r['bytes'] / 1e6:>10.1f} {ratio:>6} "
          f"{r['export_s']:>8.2f} {r.get('load_s', float('nan')):>7.2f} "
          f"{r.get('optimise_s', float('nan')):>7.2f} {r.get('run_s', float('nan')) * 1e3:>8.1f} "
          f"{'ok' if r['passed'] else 'FAIL':>6} {r['err_vs_f32']:>10.3g} {r['scale']:>9.3g} "
          f"{vs_f32:>9}", flush=True)


if __name__ == "__main__":
    if not common.child_main(HANDLERS):
        sys.exit(main())
