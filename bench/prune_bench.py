"""Does compaction pay off in tract? Real CNNs with random weights, pruned with
``ln_structured(amount=0.5, n=2, dim=0)`` on every conv that is not depthwise, exported
without and with ``compact=True``: archive size, op count, tract load time and run time
(median and best of interleaved runs, so that load on a shared machine hits both alike),
the largest difference from PyTorch and between the two archives.

Models: the ResNet-18 fixture (residual adds), torchvision ``mobilenet_v2`` (depthwise convs
in inverted residuals), ``densenet121`` (concatenations), ``efficientnet_b0`` (depthwise
convs with squeeze-excitation) and ``mnasnet1_0`` (depthwise convs, ReLU). ``--bn random``
gives every batch norm random statistics and shift, as training leaves them: a pruned
channel then holds a nonzero constant, which a zero-padded depthwise conv turns into a
border-dependent map; such a channel goes as a constant where the map ends up the same
everywhere (ReLU6 clipping it) or is pooled to one value, and as a position map added
after the conv that reads it otherwise.

    python -m bench.prune_bench [--models resnet18,mobilenet_v2,...] [--size 224]
                                [--runs 20] [--bn init|random]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pruned(model):
    """ln_structured(0.5, n=2, dim=0) on every conv but the depthwise ones (groups > 1)."""
    import torch
    import torch.nn as nn
    import torch.nn.utils.prune as prune

    if _pruned.random_bn:
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-1, 1)
                    m.running_var.uniform_(0.5, 2)
                    m.bias.uniform_(-1, 1)

    for m in model.modules():
        if isinstance(m, nn.Conv2d) and m.groups == 1:
            prune.ln_structured(m, "weight", amount=0.5, n=2, dim=0)
    return model.eval()


def pruned_resnet18():
    sys.path.insert(0, ROOT)
    from tests.fixtures.models import make_resnet18

    return _pruned(make_resnet18())


def _torchvision(name):
    def build():
        from bench.common import declare_torchvision_schemas

        declare_torchvision_schemas()
        import torchvision

        return _pruned(getattr(torchvision.models, name)(weights=None))
    return build


_pruned.random_bn = False

MODELS = {"resnet18": pruned_resnet18, "mobilenet_v2": _torchvision("mobilenet_v2"),
          "densenet121": _torchvision("densenet121"),
          "efficientnet_b0": _torchvision("efficientnet_b0"),
          "mnasnet1_0": _torchvision("mnasnet1_0")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS),
                    help="comma-separated, from: " + ", ".join(MODELS))
    ap.add_argument("--size", type=int, default=224, help="input height and width")
    ap.add_argument("--runs", type=int, default=20, help="timed runs per archive")
    ap.add_argument("--bn", choices=("init", "random"), default="init",
                    help="batch-norm statistics: as constructed, or random (as trained)")
    opts = ap.parse_args(argv)
    _pruned.random_bn = opts.bn == "random"

    import torch

    names = [n.strip() for n in opts.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    print(f"ln_structured(0.5, n=2, dim=0) on every non-depthwise conv, random weights, "
          f"batch norm {opts.bn}, input 1x3x{opts.size}x{opts.size}, {opts.runs} interleaved runs, torch threads "
          f"{torch.get_num_threads()}")
    summary = []
    for name in names:
        torch.manual_seed(0)
        summary.append((name, _bench(name, MODELS[name](), opts)))
    print()
    print(f"{'model':<13} {'size':>7} {'run time':>9} {'max |compacted - pruned|':>25} "
          f"{'max |torch|':>12}")
    for name, (size, run, diff, scale) in summary:
        print(f"{name:<13} {size:>7.1%} {run:>9.1%} {diff:>25.2e} {scale:>12.2e}")
    return 0


def _bench(label, model, opts):
    """Print the figures of one model; (size ratio, run-time ratio, max |compacted - pruned|,
    max |torch output|)."""
    import numpy as np
    import torch
    import tract

    import t2n

    x = torch.randn(1, 3, opts.size, opts.size)
    with torch.no_grad():
        expected = model(x).numpy()
    rows = {}
    with tempfile.TemporaryDirectory(prefix="t2n-prune-bench-") as d:
        for name, compact in (("pruned", False), ("compacted", True)):
            path = os.path.join(d, f"{name}.nnef.tar")
            t0 = time.perf_counter()
            result = t2n.export(model, (x,), path, compact=compact, quiet=True)
            export_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            runnable = tract.nnef().load(path).into_runnable()
            load_s = time.perf_counter() - t0
            params = sum(s.params_after for s in result.extras["layers"])
            rows[name] = dict(bytes=result.archive_bytes, ops=result.op_count, params=params,
                              export_s=export_s, load_s=load_s, runnable=runnable, times=[])
        xn = x.numpy()
        for name, row in rows.items():  # warm-up, and the outputs against PyTorch
            row["out"] = row["runnable"].run([xn])[0].to_numpy()
            row["err"] = float(np.abs(row["out"] - expected).max())
        for _ in range(opts.runs):
            for row in rows.values():
                t0 = time.perf_counter()
                row["runnable"].run([xn])
                row["times"].append(time.perf_counter() - t0)

    print()
    print(label)
    print(f"{'archive':<10} {'bytes':>12} {'params':>11} {'ops':>5} {'export s':>9} "
          f"{'load s':>7} {'run ms med':>10} {'run ms min':>10} {'max |err|':>10}")
    for name, row in rows.items():
        print(f"{name:<10} {row['bytes']:>12,} {row['params']:>11,} {row['ops']:>5} "
              f"{row['export_s']:>9.2f} {row['load_s']:>7.2f} "
              f"{1e3 * statistics.median(row['times']):>10.2f} "
              f"{1e3 * min(row['times']):>10.2f} {row['err']:>10.2e}")
    p, c = rows["pruned"], rows["compacted"]
    size = c["bytes"] / p["bytes"]
    run = statistics.median(c["times"]) / statistics.median(p["times"])
    diff = float(np.abs(c["out"] - p["out"]).max())
    scale = float(np.abs(expected).max())
    print(f"compacted / pruned: size {size:.1%}, run time (median) {run:.1%}, speed-up "
          f"x{1 / run:.2f}; max |compacted - pruned| {diff:.2e} (max |torch| {scale:.2e})")
    return size, run, diff, scale


if __name__ == "__main__":
    raise SystemExit(main())
