"""What the load proof (t2n.check.load) costs: export each model without it, then load the
archive the way the proof does, in a fresh child (CPU and wall seconds) and in a warm
long-lived child (the test suite's case, wall seconds).

    python -m bench.load_cost resnet18 gpt2      # names of bench.common.MODELS
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings

from bench import common


def measure(name: str, folder: str) -> str:
    import t2n
    from t2n.check.tract_runner import TractWorker, _child

    model, args = common.build(name)
    path = os.path.join(folder, f"{name}.nnef")
    cpu0, wall0 = time.process_time(), time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t2n.export(model, args, path, verify_load=False)
    export_cpu, export_wall = time.process_time() - cpu0, time.perf_counter() - wall0
    cmd, kw = _child(["--load", path], folder)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall0 = time.perf_counter()
    subprocess.run(cmd, check=True, **kw)
    wall = time.perf_counter() - wall0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    worker = TractWorker()
    try:
        worker.load(path)  # start the child, import tract
        wall0 = time.perf_counter()
        worker.load(path)
        warm = time.perf_counter() - wall0
    finally:
        worker.close()
    return (f"{name}: export without the proof {export_cpu:.2f} s CPU / {export_wall:.2f} s "
            f"wall; load in a fresh child {cpu:.2f} s CPU / {wall:.2f} s wall; in a warm "
            f"child {warm:.2f} s wall")


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="t2n-load-cost-") as folder:
        for name in argv or ["resnet18"]:
            print(measure(name, folder), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
