"""Recurrent layers in tract: t2n's archive against torch.onnx -> tract's ONNX loader.

    python -m bench.rnn_bench [--hidden 256] [--input 80] [--steps 1000] [--repeat 5]

Prints, side by side for a 2-layer bidirectional LSTM (and the same for a GRU):

* op count and archive size of t2n's export at T=10 and T=1000 (equal: one loop per layer
  and direction, whatever the length), and the ONNX file's node count and size;
* tract run time at T=1000, batch 1: load + optimise once, then the median of ``--repeat``
  runs (wall time and the process's CPU time), each route in its own fresh child process
  (so caches and allocations do not carry over), the routes interleaved.

The ONNX route is ``torch.onnx.export(..., dynamo=True)`` then
``tract.onnx().load(path).into_model().into_runnable()``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from bench.common import run_child


def _model(kind: str, input_size: int, hidden: int):
    import torch

    torch.manual_seed(0)
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    rnn = cls(input_size, hidden, num_layers=2, bidirectional=True, batch_first=True).eval()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = rnn

        def forward(self, x):
            return self.rnn(x)[0]

    return Net().eval()


def _export_t2n(model, x, path):
    import t2n

    r = t2n.export(model, (x,), path, quiet=True)
    return sum(r.op_histogram.values()), os.path.getsize(path)


def _export_onnx(model, x, path):
    import warnings

    import onnx
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), path, dynamo=True, input_names=["x"],
                          output_names=["y"], external_data=False)
    m = onnx.load(path)
    return len(m.graph.node), os.path.getsize(path)


def _child(job: dict) -> dict:
    import numpy as np
    import tract

    t0 = time.perf_counter()
    if job["route"] == "t2n":
        runnable = tract.nnef().load(job["path"]).into_runnable()
    else:
        runnable = tract.onnx().load(job["path"]).into_model().into_runnable()
    load = time.perf_counter() - t0
    x = np.load(job["input"])
    runnable.run([x])  # warm-up
    times, cpu = [], []
    for _ in range(job["repeat"]):
        t, c = time.perf_counter(), time.process_time()
        out = runnable.run([x])[0].to_numpy()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    ref = np.load(job["ref"])
    err = float(np.max(np.abs(out - ref)))
    return {"load": load, "run": statistics.median(times), "cpu": statistics.median(cpu),
            "max_abs_err": err}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--input", type=int, default=80)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3, help="child processes per route")
    ap.add_argument("--kinds", default="lstm,gru")
    ap.add_argument("--child")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(json.loads(args.child))))
        return 0

    import numpy as np
    import torch

    rows = []
    with tempfile.TemporaryDirectory(prefix="t2n-rnn-bench-") as d:
        for kind in args.kinds.split(","):
            model = _model(kind, args.input, args.hidden)
            sizes = {}
            for steps in (10, args.steps):
                x = torch.randn(1, steps, args.input)
                sizes[("t2n", steps)] = _export_t2n(model, x, f"{d}/{kind}{steps}.nnef.tgz")
                sizes[("onnx", steps)] = _export_onnx(model, x, f"{d}/{kind}{steps}.onnx")
            x = torch.randn(1, args.steps, args.input)
            np.save(f"{d}/x.npy", x.numpy())
            with torch.no_grad():
                np.save(f"{d}/ref.npy", model(x).numpy())
            timings = {"t2n": [], "onnx": []}
            for _ in range(args.rounds):
                for route, path in (("t2n", f"{d}/{kind}{args.steps}.nnef.tgz"),
                                    ("onnx", f"{d}/{kind}{args.steps}.onnx")):
                    res = run_child("bench.rnn_bench", {
                        "route": route, "path": path, "input": f"{d}/x.npy",
                        "ref": f"{d}/ref.npy", "repeat": args.repeat})
                    if "error" in res:
                        print(f"{kind} {route}: {res['error']}", file=sys.stderr)
                        continue
                    timings[route].append(res)
            rows.append((kind, sizes, timings))

    print(f"2-layer bidirectional, input {args.input}, hidden {args.hidden}, batch 1")
    head = (f"{'model':6} {'route':5} {'ops T=10':>9} {'ops T=' + str(args.steps):>10} "
            f"{'size T=10':>10} {'size T=' + str(args.steps):>11} "
            f"{'load s':>7} {'wall ms':>8} {'cpu ms':>7} {'max err':>9}")
    print(head)
    print("-" * len(head))
    for kind, sizes, timings in rows:
        for route in ("t2n", "onnx"):
            ops10, size10 = sizes[(route, 10)]
            opsn, sizen = sizes[(route, args.steps)]
            t = timings[route]
            run = statistics.median(r["run"] for r in t) * 1e3 if t else float("nan")
            cpu = statistics.median(r["cpu"] for r in t) * 1e3 if t else float("nan")
            load = statistics.median(r["load"] for r in t) if t else float("nan")
            err = max(r["max_abs_err"] for r in t) if t else float("nan")
            print(f"{kind:6} {route:5} {ops10:>9} {opsn:>10} {size10:>10} {sizen:>11} "
                  f"{load:>7.2f} {run:>8.1f} {cpu:>7.1f} {err:>9.1e}")
    print(f"run time at T={args.steps}: median over runs and child processes; cpu = the "
          "process's CPU time, steadier than wall time on a shared machine")
    print("ops: t2n = NNEF ops in graph.nnef (loop bodies not counted), onnx = ONNX nodes; "
          "sizes in bytes (.nnef.tgz / .onnx)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
