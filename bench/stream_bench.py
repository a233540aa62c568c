"""Streaming in tract: the keyword-spotting fixture (tests/fixtures/kws.py) pulsed at two chunk
sizes (``--logmel``: Whisper's log-mel front end as it streams, tests/fixtures/logmel.py,
over raw samples, pulses 160,320 by default), through t2n's archive and through the torch.onnx route (tract's ONNX loader, same
``Pulse`` transform). Per route and pulse: ops in the exported graph, nodes of tract's
pulsed and optimised model, the delay, and the run time of one chunk through one state
(median and best over repeats, each the mean of many chunks; a warm-up first).

    python -m bench.stream_bench [--pulses 8,16] [--chunks 400] [--repeats 7] [--gru|--logmel]

Every tract measurement runs in a fresh child process. Timings depend on the machine's load
(printed); compare the routes within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model(gru: bool, logmel: bool = False):
    """(model, example input, its streaming axis, a one-line description)."""
    import torch

    sys.path.insert(0, ROOT)
    from tests.fixtures import kws, logmel as lm

    torch.manual_seed(0)
    if logmel:
        x = torch.randn(1, 3200, generator=torch.Generator().manual_seed(0)) * 0.1
        return (lm.streaming_whisper().eval(), x, 1,
                "Whisper log-mel (n_fft 400, hop 160, 80 mels, center=False, no floor), "
                "input 1xS samples")
    model = kws.make_kws(gru=True) if gru else kws.make_kws()
    params = sum(p.numel() for p in model.parameters())
    return (model, kws.example_input(64), 3,
            f"KWS fixture{' (conv + GRU)' if gru else ''}, input 1x1x16xS, {params:,} "
            "parameters")


def _child(job: dict) -> dict:
    """In a fresh process: load, pulse, optimise; time chunks through one state."""
    import numpy as np
    import tract

    if job["format"] == "nnef":
        model = tract.nnef().with_pulse().load(job["path"])
    else:
        model = tract.onnx().load(job["path"]).into_model()
    model.transform(tract.Pulse(str(job["pulse"]), symbol="S"))
    delay = int(model.property("pulse.delay").to_numpy()[0])
    shape = [int(d) for d in str(model.input_fact(0)).split(",")[:-1]]
    runnable = model.into_runnable()
    nodes = len(json.loads(runnable.profile_json(None))["nodes"])
    state = runnable.spawn_state()
    rng = np.random.default_rng(0)
    chunks = [rng.standard_normal(shape).astype(np.float32) for _ in range(16)]
    for c in chunks * 4:  # warm-up
        state.run([c])
    per_chunk = []
    for _ in range(job["repeats"]):
        t0 = time.perf_counter()
        for i in range(job["chunks"]):
            state.run([chunks[i % len(chunks)]])
        per_chunk.append((time.perf_counter() - t0) / job["chunks"])
    return {"delay": delay, "nodes": nodes, "us_per_chunk": statistics.median(per_chunk) * 1e6,
            "best_us_per_chunk": min(per_chunk) * 1e6}


def _run_child(job: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "bench.stream_bench", "--child", json.dumps(job)],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": tail[:120]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pulses", help="chunk sizes (time steps), comma-separated (default "
                    "8,16; 160,320 with --logmel)")
    ap.add_argument("--chunks", type=int, default=400, help="chunks per timed repeat")
    ap.add_argument("--repeats", type=int, default=7, help="timed repeats (median taken)")
    ap.add_argument("--gru", action="store_true", help="the conv + GRU variant of the model")
    ap.add_argument("--logmel", action="store_true", help="Whisper's log-mel front end")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.child:
        print(json.dumps(_child(json.loads(opts.child))))
        return 0

    import warnings

    import torch

    import t2n

    pulses = [int(p) for p in (opts.pulses or ("160,320" if opts.logmel else "8,16"))
              .split(",")]
    model, x, axis, label = _model(opts.gru, opts.logmel)
    rows = []
    with tempfile.TemporaryDirectory(prefix="t2n-stream-bench-") as d:
        onnx_path = os.path.join(d, "kws.onnx")
        onnx_ops = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, (x,), onnx_path, input_names=["x"],
                                  dynamic_axes={"x": {axis: "S"}}, dynamo=False)
            import onnx

            onnx_ops = len(onnx.load(onnx_path).graph.node)
        except Exception as e:  # the peer route is reported, not required
            onnx_path = None
            onnx_error = f"{type(e).__name__}: {str(e)[:80]}"
        for pulse in pulses:
            path = os.path.join(d, f"kws_{pulse}.nnef.tgz")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = t2n.export(model, (x,), path, input_names=["x"],
                               dynamic_axes={"x": {axis: "S"}}, streaming="S", pulse=pulse,
                               check=True, quiet=True)
            job = {"format": "nnef", "path": path, "pulse": pulse, "chunks": opts.chunks,
                   "repeats": opts.repeats}
            rows.append(("t2n", pulse, r.op_count, "PASSED" if r.passed else "FAILED",
                         _run_child(job)))
            if onnx_path:
                rows.append(("torch.onnx", pulse, onnx_ops, "-",
                             _run_child(dict(job, format="onnx", path=onnx_path))))
            else:
                rows.append(("torch.onnx", pulse, "-", "-", {"error": onnx_error}))

    load = os.getloadavg()[0]
    print(f"{label}; load average {load:.1f} on {os.cpu_count()} cores")
    head = ("route", "pulse", "graph ops", "pulsed check", "tract nodes", "delay",
            "us/chunk", "best", "us/frame")
    table = [head]
    for route, pulse, ops, check, m in rows:
        if "error" in m:
            table.append((route, str(pulse), str(ops), check, "error: " + m["error"], "", "",
                          "", ""))
            continue
        table.append((route, str(pulse), str(ops), check, str(m["nodes"]), str(m["delay"]),
                      f"{m['us_per_chunk']:.1f}", f"{m['best_us_per_chunk']:.1f}",
                      f"{m['us_per_chunk'] / pulse:.2f}"))
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(c.rjust(w) if i else c.ljust(w)
                        for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
