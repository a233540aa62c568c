"""DLRM-style recommender (tests/fixtures/dlrm.py): export and tract figures at batch 1 and 512.

    python -m bench.dlrm_bench                 # from the repository root
    python -m bench.dlrm_bench --repeat 5 --batches 1,64,512

Prints, for one archive exported with a dynamic batch (B, and the ragged id counts NC, ND)
and for a static archive per batch size: op count, archive bytes, export seconds (median),
tract load, load+optimise (``into_runnable``) and run time (median), and the largest
difference from PyTorch. tract runs in a child process (a crash must not take the bench down).
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


def _tract_child(archive: str, inputs_npz: str, runs: int) -> dict:
    """Runs in the child: load, optimise, run ``runs`` times; times in seconds."""
    import numpy as np
    import tract

    with np.load(inputs_npz) as z:
        inputs = [z[f"arr_{i}"] for i in range(len(z.files))]
    t0 = time.perf_counter()
    model = tract.nnef().load(archive)
    t1 = time.perf_counter()
    runnable = model.into_runnable()
    t2 = time.perf_counter()
    times, out = [], None
    for _ in range(runs):
        s = time.perf_counter()
        out = runnable.run(inputs)
        times.append(time.perf_counter() - s)
    np.save(inputs_npz + ".out.npy", out[0].to_numpy())
    return {"load": t1 - t0, "optimise": t2 - t1, "run": statistics.median(times)}


def _tract(archive: str, inputs, runs: int):
    import numpy as np

    with tempfile.TemporaryDirectory() as d:
        npz = os.path.join(d, "in.npz")
        np.savez(npz, *[a.numpy() for a in inputs])
        p = subprocess.run([sys.executable, "-m", "bench.dlrm_bench", "--child", archive, npz,
                            str(runs)], capture_output=True, text=True, cwd=ROOT)
        if p.returncode != 0:
            raise RuntimeError(f"tract child failed: {p.stderr.strip()[-2000:]}")
        figures = json.loads(p.stdout.strip().splitlines()[-1])
        figures["out"] = np.load(npz + ".out.npy")
    return figures


def _export(model, args, path, repeat, **kw):
    import t2n

    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = t2n.export(model, args, path, **kw)
        times.append(time.perf_counter() - t0)
    return result, statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,512")
    ap.add_argument("--repeat", type=int, default=3, help="exports per figure (median)")
    ap.add_argument("--runs", type=int, default=20, help="tract runs per figure (median)")
    ap.add_argument("--child", nargs=3, metavar=("ARCHIVE", "NPZ", "RUNS"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(_tract_child(a.child[0], a.child[1], int(a.child[2]))))
        return 0

    import warnings

    import numpy as np
    import torch

    sys.path.insert(0, ROOT)
    from tests.fixtures import dlrm

    warnings.simplefilter("ignore")
    model = dlrm.make_dlrm()
    batches = [int(b) for b in a.batches.split(",")]
    params = sum(p.numel() for p in model.parameters())
    print(f"DLRM fixture: {params:,} parameters, tables {dlrm.TABLES}, dim {dlrm.DIM}")
    print(f"{'archive':<19}{'batch':>6}{'ops':>6}{'bytes':>10}{'export s':>10}{'load s':>8}"
          f"{'load+opt s':>11}{'run ms':>9}{'max |err|':>11}")
    with tempfile.TemporaryDirectory() as d:
        dyn_path = os.path.join(d, "dlrm_dynamic.nnef.tgz")
        dyn, dyn_t = _export(model, dlrm.example_inputs(8), dyn_path, a.repeat,
                             input_names=dlrm.INPUT_NAMES, output_names=dlrm.OUTPUT_NAMES,
                             dynamic_axes=dlrm.DYNAMIC_AXES)
        for b in batches:
            args = dlrm.example_inputs(b, seed=b)
            with torch.no_grad():
                expected = model(*args).numpy()
            rows = [("dynamic (B,NC,ND)", dyn, dyn_t, dyn_path)]
            st_path = os.path.join(d, f"dlrm_b{b}.nnef.tgz")
            st, st_t = _export(model, args, st_path, a.repeat, input_names=dlrm.INPUT_NAMES,
                               output_names=dlrm.OUTPUT_NAMES)
            rows.append(("static", st, st_t, st_path))
            for label, res, t_exp, path in rows:
                f = _tract(path, args, a.runs)
                err = float(np.max(np.abs(f["out"] - expected)))
                print(f"{label:<19}{b:>6}{res.op_count:>6}{res.archive_bytes:>10,}{t_exp:>10.2f}"
                      f"{f['load']:>8.3f}{f['load'] + f['optimise']:>11.3f}"
                      f"{f['run'] * 1e3:>9.3f}{err:>11.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
