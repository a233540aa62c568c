"""Import cost of t2n against torch's own, in fresh interpreters (medians, interleaved).

    python -m bench.import_bench [--repeat 9]

``import t2n`` is lazy (no torch until an attribute is used); what a user pays to export is
``import t2n.api`` (or ``t2n.export``), which should cost about what ``import torch`` does:
issue 8's target is at most 1.3 x. Runs are interleaved so that load from other processes on
the machine hits every statement alike.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from bench import common

STATEMENTS = ["pass", "import torch", "import t2n", "import t2n.api",
              "import t2n; t2n.export", "import t2n.cli"]


def once(stmt: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", stmt], check=True, cwd=common.ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    a = ap.parse_args()
    print(f"load average at start: {common.load_average():.2f}")
    times = {s: [] for s in STATEMENTS}
    for s in STATEMENTS:  # warm the file cache once
        try:
            once(s)
        except subprocess.CalledProcessError:
            times.pop(s)
    for _ in range(a.repeat):
        for s in times:
            times[s].append(once(s))
    torch_s = statistics.median(times["import torch"])
    print(f"{'statement':28} {'median s':>9} {'min s':>7} {'x torch':>8}")
    for s, ts in times.items():
        m = statistics.median(ts)
        print(f"{s:28} {m:9.3f} {min(ts):7.3f} {m / torch_s:8.2f}")
    api = statistics.median(times["import t2n.api"])
    print(f"import t2n.api / import torch = {api / torch_s:.2f} (target <= 1.3): "
          f"{'OK' if api <= 1.3 * torch_s else 'OVER'}")
    print(f"load average at end: {common.load_average():.2f}")


if __name__ == "__main__":
    main()
