"""Does compaction pay off in tract? The ResNet-18 fixture, pruned with
``ln_structured(amount=0.5, n=2, dim=0)`` on every conv, exported without and with
``compact=True``: archive size, op count, tract load time and run time (median and best of
interleaved runs, so that load on a shared machine hits both alike), and the largest
difference from PyTorch.

    python -m bench.prune_bench [--size 224] [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pruned_resnet18():
    import torch.nn as nn
    import torch.nn.utils.prune as prune

    sys.path.insert(0, ROOT)
    from fixtures.models import make_resnet18

    model = make_resnet18()
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            prune.ln_structured(m, "weight", amount=0.5, n=2, dim=0)
    return model.eval()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=224, help="input height and width")
    ap.add_argument("--runs", type=int, default=20, help="timed runs per archive")
    opts = ap.parse_args(argv)

    import numpy as np
    import torch
    import tract

    import t2n

    model = pruned_resnet18()
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
            got = row["runnable"].run([xn])[0].to_numpy()
            row["err"] = float(np.abs(got - expected).max())
        for _ in range(opts.runs):
            for row in rows.values():
                t0 = time.perf_counter()
                row["runnable"].run([xn])
                row["times"].append(time.perf_counter() - t0)

    print(f"ResNet-18 fixture, ln_structured(0.5, n=2, dim=0) on every conv, input "
          f"1x3x{opts.size}x{opts.size}, {opts.runs} interleaved runs, torch threads "
          f"{torch.get_num_threads()}")
    print(f"{'archive':<10} {'bytes':>12} {'params':>11} {'ops':>5} {'export s':>9} "
          f"{'load s':>7} {'run ms med':>10} {'run ms min':>10} {'max |err|':>10}")
    for name, row in rows.items():
        print(f"{name:<10} {row['bytes']:>12,} {row['params']:>11,} {row['ops']:>5} "
              f"{row['export_s']:>9.2f} {row['load_s']:>7.2f} "
              f"{1e3 * statistics.median(row['times']):>10.2f} "
              f"{1e3 * min(row['times']):>10.2f} {row['err']:>10.2e}")
    p, c = rows["pruned"], rows["compacted"]
    print(f"compacted / pruned: size {c['bytes'] / p['bytes']:.1%}, run time (median) "
          f"{statistics.median(c['times']) / statistics.median(p['times']):.1%}, "
          f"speed-up x{statistics.median(p['times']) / statistics.median(c['times']):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
