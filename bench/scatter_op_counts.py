"""Op counts and times of the scatter-family lowerings as the number of indices grows.

    python -m bench.scatter_op_counts                 # n = 3, 300, 30000
    python -m bench.scatter_op_counts --sizes 10 1000000 --no-tract

For each op and each n: the exported graph's op count (must not depend on n), export time,
and tract's load+optimise and run time on the exported archive.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

import t2n
from t2n.testing import FunctionModule as Fn


ROWS, D = 1000, 16


def _cases(n):
    idx = torch.randint(0, ROWS, (n,))
    return {
        "scatter_reduce mean exclude_self": (
            lambda x, i, s: x.scatter_reduce(0, i, s, "mean", include_self=False),
            (torch.randn(ROWS, D), idx.unsqueeze(1).expand(n, D).contiguous(),
             torch.randn(n, D))),
        "scatter_reduce amax exclude_self": (
            lambda x, i, s: x.scatter_reduce(0, i, s, "amax", include_self=False),
            (torch.randn(ROWS, D), idx.unsqueeze(1).expand(n, D).contiguous(),
             torch.randn(n, D))),
        "index_add": (lambda x, i, s: x.index_add(0, i, s),
                      (torch.randn(ROWS, D), idx, torch.randn(n, D))),
        "index_put accumulate (2 indices)": (
            lambda x, i, j, v: x.index_put((i, j), v, accumulate=True),
            (torch.randn(ROWS, D), idx, torch.randint(-D, D, (n,)), torch.randn(n))),
    }


def _tract_times(path, args):
    import tract

    t0 = time.perf_counter()
    model = tract.nnef().load(path).into_runnable()
    t1 = time.perf_counter()
    model.run([a.numpy() for a in args])
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[3, 300, 30000])
    p.add_argument("--no-tract", action="store_true")
    a = p.parse_args(argv)
    print(f"{'op':36} {'n':>8} {'ops':>5} {'export s':>9} {'load s':>7} {'run s':>7}")
    for name in _cases(1):
        for n in a.sizes:
            fn, args = _cases(n)[name]
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "m.nnef")
                t0 = time.perf_counter()
                r = t2n.export(Fn(fn), args, path)
                dt = time.perf_counter() - t0
                load = run = float("nan")
                if not a.no_tract:
                    load, run = _tract_times(path, args)
            print(f"{name:36} {n:>8} {r.op_count:>5} {dt:>9.3f} {load:>7.3f} {run:>7.3f}")


if __name__ == "__main__":
    main()
