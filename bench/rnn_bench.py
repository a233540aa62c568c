"""Recurrent layers in tract: t2n's archive against torch.onnx -> tract's ONNX loader.

    python -m bench.rnn_bench [--hidden 256] [--input 80] [--steps 1000] [--repeat 5]

Prints, side by side for a 2-layer bidirectional LSTM (and the same for a GRU):

* op count and archive size of t2n's export at T=10 and T=1000 (equal: one loop per layer
  and direction, whatever the length), and the ONNX file's node count and size;
* tract run time at T=1000, batch 1: per round (a fresh child process) both routes are
  loaded and optimised once, then run ``--repeat`` times each, alternated (t2n, onnx, onnx,
  t2n, ...) so that the machine's load falls on both alike; the medians (wall time and the
  process's CPU time), and the t2n/onnx ratio per round as min / median / max.

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
    """One round: both routes loaded in this process, their runs alternated (t2n, onnx,
    onnx, t2n, ...) so that the machine's load hits both alike; CPU time per run."""
    import numpy as np
    import tract

    x = np.load(job["input"])
    ref = np.load(job["ref"])
    routes, load, err = {}, {}, {}
    for route in ("t2n", "onnx"):
        t0 = time.perf_counter()
        if route == "t2n":
            routes[route] = tract.nnef().load(job["t2n"]).into_runnable()
        else:
            routes[route] = tract.onnx().load(job["onnx"]).into_model().into_runnable()
        load[route] = time.perf_counter() - t0
        out = routes[route].run([x])[0].to_numpy()  # warm-up and the accuracy check
        err[route] = float(np.max(np.abs(out - ref)))
    wall = {r: [] for r in routes}
    cpu = {r: [] for r in routes}
    for i in range(job["repeat"]):
        for route in (("t2n", "onnx") if i % 2 == 0 else ("onnx", "t2n")):
            t, c = time.perf_counter(), time.process_time()
            routes[route].run([x])
            wall[route].append(time.perf_counter() - t)
            cpu[route].append(time.process_time() - c)
    return {r: {"load": load[r], "run": statistics.median(wall[r]),
                "cpu": statistics.median(cpu[r]), "max_abs_err": err[r]} for r in routes}


def _spread(xs):
    return (f"{min(xs):.3f} / {statistics.median(xs):.3f} / {max(xs):.3f}" if xs
            else "n/a")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--input", type=int, default=80)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5, help="alternated runs per round")
    ap.add_argument("--rounds", type=int, default=3, help="child processes (rounds)")
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
            rounds = []
            for _ in range(args.rounds):
                res = run_child("bench.rnn_bench", {
                    "t2n": f"{d}/{kind}{args.steps}.nnef.tgz",
                    "onnx": f"{d}/{kind}{args.steps}.onnx", "input": f"{d}/x.npy",
                    "ref": f"{d}/ref.npy", "repeat": args.repeat})
                if "error" in res:
                    print(f"{kind}: {res['error']}", file=sys.stderr)
                    continue
                rounds.append(res)
            rows.append((kind, sizes, rounds))

    print(f"2-layer bidirectional, input {args.input}, hidden {args.hidden}, batch 1, "
          f"T={args.steps}; {args.rounds} rounds x {args.repeat} alternated runs")
    head = (f"{'model':6} {'route':5} {'ops T=10':>9} {'ops T=' + str(args.steps):>10} "
            f"{'size T=10':>10} {'size T=' + str(args.steps):>11} "
            f"{'load s':>7} {'wall ms':>8} {'cpu ms':>7} {'max err':>9}")
    print(head)
    print("-" * len(head))
    for kind, sizes, rounds in rows:
        for route in ("t2n", "onnx"):
            ops10, size10 = sizes[(route, 10)]
            opsn, sizen = sizes[(route, args.steps)]
            t = [r[route] for r in rounds]
            run = statistics.median(r["run"] for r in t) * 1e3 if t else float("nan")
            cpu = statistics.median(r["cpu"] for r in t) * 1e3 if t else float("nan")
            load = statistics.median(r["load"] for r in t) if t else float("nan")
            err = max(r["max_abs_err"] for r in t) if t else float("nan")
            print(f"{kind:6} {route:5} {ops10:>9} {opsn:>10} {size10:>10} {sizen:>11} "
                  f"{load:>7.2f} {run:>8.1f} {cpu:>7.1f} {err:>9.1e}")
    print()
    print("t2n / onnx run time, per round (min / median / max over rounds):")
    for kind, _, rounds in rows:
        cpu = [r["t2n"]["cpu"] / r["onnx"]["cpu"] for r in rounds]
        wall = [r["t2n"]["run"] / r["onnx"]["run"] for r in rounds]
        print(f"  {kind:5} cpu {_spread(cpu)}   wall {_spread(wall)}")
    print(f"run time at T={args.steps}: per round the median of its runs, then the median "
          "over rounds; cpu = the process's CPU time, steadier than wall time on a shared "
          "machine")
    print("ops: t2n = NNEF ops in graph.nnef (loop bodies not counted), onnx = ONNX nodes; "
          "sizes in bytes (.nnef.tgz / .onnx)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
