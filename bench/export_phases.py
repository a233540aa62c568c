"""CPU seconds of each phase of one export (capture, walk, every pass, write) and the peak
memory, for one case of :mod:`bench.archive_digests`, in this process.

    python -m bench.export_phases gpt2_small
    python -m bench.export_phases fixture_resnet18 --capture export
    python -m bench.export_phases gpt2_small --profile 30     # cProfile (CPU time), top 30

CPU time (``time.process_time``), not wall time: the figure does not move with the other
processes of a shared machine. Peak RSS is the process's high-water mark (VmHWM) after the
model is built and after the export; the model's own bytes are printed beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import warnings

from bench import archive_digests, common


class Phases:
    """CPU seconds spent in each wrapped function (nested phases counted in their own only)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._stack: list[str] = []

    def wrap(self, owner, attr: str, name: str):
        real = getattr(owner, attr)

        def timed(*a, **k):
            with self.phase(name):
                return real(*a, **k)
        setattr(owner, attr, timed)

    @contextlib.contextmanager
    def phase(self, name: str):
        t = time.process_time()
        self._stack.append(name)
        try:
            yield
        finally:
            self._stack.pop()
            spent = time.process_time() - t
            self.seconds[name] = self.seconds.get(name, 0.0) + spent
            if self._stack:  # the caller's phase does not count it
                outer = self._stack[-1]
                self.seconds[outer] = self.seconds.get(outer, 0.0) - spent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("case", choices=list(archive_digests.CASES))
    ap.add_argument("--capture", choices=("trace", "export"), default=None)
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="print the N functions of most cumulative CPU time")
    a = ap.parse_args(argv)
    sys.path.insert(0, common.ROOT)
    common.declare_torchvision_schemas()
    warnings.simplefilter("ignore")
    import t2n
    from t2n import api, passes
    from t2n.capture import torch_export as export_capture
    from t2n.walk import fx_walker, walker
    from t2n.write import writer

    model, args, kw = archive_digests.CASES[a.case]()
    if a.capture:
        kw["capture"] = a.capture
    built_hwm, built_rss = common.peak_rss(), common.rss()
    ph = Phases()
    ph.wrap(api, "capture", "capture (torch.jit.trace)")
    ph.wrap(export_capture, "capture_export", "capture (torch.export)")
    ph.wrap(walker.Walker, "run", "walk")
    ph.wrap(fx_walker.FxWalker, "run", "walk")

    def run_pipeline(g, ctx):
        for p in passes.pipeline():
            with ph.phase(f"pass {p.name}"):
                p.run(g, ctx)
    passes.run_pipeline = run_pipeline
    ph.wrap(writer, "write", "write")
    prof = None
    if a.profile:
        import cProfile

        prof = cProfile.Profile(time.process_time)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.process_time()
        if prof:
            prof.enable()
        with ph.phase("other"):
            t2n.export(model, args, os.path.join(tmp, "model.nnef.tar"), **kw)
        if prof:
            prof.disable()
        total = time.process_time() - t
    print(f"{a.case} ({kw.get('capture', 'trace')}): export {total:.2f} s CPU")
    for name, s in sorted(ph.seconds.items(), key=lambda kv: -kv[1]):
        if abs(s) >= 0.005:
            print(f"  {name:32s} {s:7.2f} s")
    mib = 1 << 20
    print(f"peak RSS {common.peak_rss() / mib:.0f} MiB (after building the model: RSS "
          f"{built_rss / mib:.0f} MiB, peak {built_hwm / mib:.0f} MiB; model's tensors "
          f"{common.model_bytes(model) / mib:.0f} MiB)")
    if prof:
        import pstats

        pstats.Stats(prof).sort_stats("cumulative").print_stats(a.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
