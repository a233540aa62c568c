"""Export time of the two captures, side by side: ``capture="trace"`` against ``"export"``.

    python -m bench.capture_bench                       # GPT-2 small, dynamic S, 2 rounds
    python -m bench.capture_bench --models gpt2 resnet18 --rounds 3 [--static]

One process per model; each round exports with both captures in alternating order (so both
see the same machine load), after a first export per capture that pays the one-off imports.
Prints the median and the spread of the rounds, and the op counts of both archives (the same
mappings behind both captures: the counts should agree).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

from bench import common

# the bench models' examples have batch 1, which torch.export cannot make dynamic: the
# other models export static
DYNAMIC = {"gpt2": {"input_0": {1: "S"}}}


def job(job: dict) -> dict:
    import t2n

    model, args = common.build(job["model"])
    dyn = DYNAMIC.get(job["model"]) if job["dynamic"] else None
    times: dict[str, list[float]] = {"trace": [], "export": []}
    ops = {}
    with tempfile.TemporaryDirectory(prefix="t2n-capture-bench-") as d:
        for i in range(job["rounds"] + 1):
            order = ("trace", "export") if i % 2 == 0 else ("export", "trace")
            for capture in order:
                t = common.timer()
                r = t2n.export(model, args, os.path.join(d, f"{capture}.nnef.tar"),
                               dynamic_axes=dyn, capture=capture, progress=False)
                if i:  # round 0 pays the imports
                    times[capture].append(common.timer() - t)
                ops[capture] = r.op_count
    return {"times": times, "ops": ops}


HANDLERS = {"capture": job}


def main() -> None:
    if common.child_main(HANDLERS):
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=["gpt2"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--static", action="store_true", help="no dynamic axes")
    a = ap.parse_args()
    print(f"{'model':10} {'axes':8} {'trace s':>16} {'export s':>16} {'ops trace/export':>17}")
    for name in a.models:
        r = common.run_child("bench.capture_bench", {"kind": "capture", "model": name,
                                                     "rounds": a.rounds,
                                                     "dynamic": not a.static})
        if "error" in r or "skip" in r:
            print(f"{name:10} {r.get('error') or r.get('skip')}")
            continue
        cells = []
        for capture in ("trace", "export"):
            ts = r["times"][capture]
            cells.append(f"{statistics.median(ts):6.1f} [{min(ts):.1f}-{max(ts):.1f}]")
        axes = "static" if a.static or not DYNAMIC.get(name) else \
            ",".join(s for d in DYNAMIC[name].values() for s in d.values())
        print(f"{name:10} {axes:8} {cells[0]:>16} {cells[1]:>16} "
              f"{r['ops']['trace']:>8}/{r['ops']['export']}")


if __name__ == "__main__":
    main()
