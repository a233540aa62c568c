"""Why .tgz is written the way it is: speed and ratio of the gzip options tract can read.

    python -m bench.gzip_bench [--model mlp100m] [--repeat 3]

tract 0.23.9 opens plain tar and gzip only (it sniffs the gzip magic bytes); xz, bzip2 and
zstd archives fail to load (checked with ``--check-formats``), so the choice is among gzip
settings. Compared on the model's weights (and on the same weights 50 % magnitude-pruned,
where zero runs make compression pay): stdlib gzip at levels 1 and 6, stored (level 0), and
t2n's stream (``Z_RLE``, pieces deflated on 1 or 2 threads). Output goes to /dev/null-like
sinks: this measures the compressor, not the disk.
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import statistics
import subprocess
import sys
import tempfile

from bench import common


class _Sink(io.RawIOBase):
    def __init__(self):
        self.n = 0

    def writable(self):
        return True

    def write(self, b):
        self.n += len(b)
        return len(b)


def _stdlib(level):
    def run(bufs):
        sink = _Sink()
        with gzip.GzipFile(fileobj=sink, mode="wb", compresslevel=level, mtime=0) as f:
            for b in bufs:
                f.write(b)
        return sink.n
    return run


def _t2n(threads):
    def run(bufs):
        from t2n.write.gzstream import GzipStream

        sink = _Sink()
        s = GzipStream(sink, threads=threads)
        for b in bufs:
            s.write(b)
        s.close()
        return sink.n
    return run


CANDIDATES = {
    "gzip level 0 (stored)": _stdlib(0),
    "gzip level 1 (stdlib)": _stdlib(1),
    "gzip level 6 (stdlib)": _stdlib(6),
    "t2n Z_RLE, 1 thread": _t2n(1),
    "t2n Z_RLE, 2 threads": _t2n(2),
}


def check_formats() -> None:
    """Which compressed tars tract 0.23.9 loads (each in a child: a refusal may abort)."""
    import bz2
    import lzma

    import torch

    import t2n

    with tempfile.TemporaryDirectory() as d:
        tar = os.path.join(d, "m.tar")
        t2n.export(torch.nn.Linear(8, 8), (torch.randn(1, 8),), tar, progress=False)
        raw = open(tar, "rb").read()
        files = {"tar": raw, "gzip": gzip.compress(raw, 1), "xz": lzma.compress(raw),
                 "bzip2": bz2.compress(raw)}
        try:
            zstd = subprocess.run(["zstd", "-q", "-c", tar], capture_output=True, check=True)
            files["zstd"] = zstd.stdout
        except (OSError, subprocess.CalledProcessError):
            print("  zstd: no zstd command here, not checked")
        for name, data in files.items():
            p = os.path.join(d, f"m.{name}")
            open(p, "wb").write(data)
            r = subprocess.run([sys.executable, "-c", "import sys, tract; "
                                "tract.nnef().load(sys.argv[1])", p], capture_output=True)
            print(f"  {name:6} {'loads' if r.returncode == 0 else 'does NOT load'} in tract")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mlp100m")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--check-formats", action="store_true")
    a = ap.parse_args()
    print(f"load average at start: {common.load_average():.2f}")
    if a.check_formats:
        check_formats()
    model, _ = common.build(a.model)
    weights = [p.detach() for p in model.parameters()]
    pruned = [w * (w.abs() > w.abs().median()) for w in weights]
    for label, ts in (("dense", weights), ("50% pruned", pruned)):
        bufs = [memoryview(t.contiguous().numpy().reshape(-1)).cast("B") for t in ts]
        total = sum(len(b) for b in bufs)
        print(f"\n{a.model} weights, {label}: {total / 1e6:,.0f} MB")
        print(f"  {'compressor':24} {'MB/s':>7} {'ratio':>6} {'s for the model':>16}")
        for name, run in CANDIDATES.items():
            times, size = [], 0
            for _ in range(a.repeat):
                t = common.timer()
                size = run(bufs)
                times.append(common.timer() - t)
            s = statistics.median(times)
            print(f"  {name:24} {total / s / 1e6:7.0f} {size / total:6.3f} {s:16.2f}")
    print(f"\nload average at end: {common.load_average():.2f}")


if __name__ == "__main__":
    main()
