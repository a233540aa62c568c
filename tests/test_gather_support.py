"""Differential check used by the gather/slicing/search tests: export, run in one long-lived
tract child (a crash fails one case and restarts the child), compare with torch eager.

``assert_exports`` starts a tract process per call (~0.7 s); the gather-family tests run a few
hundred small cases, so they share one worker. The tests at the bottom pin that the checker
really fails on a wrong export.
"""

from __future__ import annotations

import atexit
import os
import tempfile
import warnings

import pytest
import torch

import t2n
from t2n.api import torch_outputs
from t2n.check.compare import compare
from t2n.errors import T2NError
from t2n.check.tract_runner import TractRunError, TractWorker
from t2n.testing import FunctionModule as Fn

_WORKER: TractWorker | None = None


def _worker() -> TractWorker:
    global _WORKER
    if _WORKER is None:
        _WORKER = TractWorker()
        atexit.register(_WORKER.close)
    return _WORKER


def check(fn, *args, more=(), rtol=1e-4, atol=1e-5, **export_kwargs):
    """Export ``fn`` (a module or a function of the tensors ``args``), run it in tract on
    ``args`` and on each tuple in ``more`` (other sizes, with ``dynamic_axes``), assert every
    output equals torch's (shape, dtype, values). Returns the ExportResult."""
    model = fn if isinstance(fn, torch.nn.Module) else Fn(fn)
    with tempfile.TemporaryDirectory(prefix="t2n-gather-") as d:
        path = os.path.join(d, "m.nnef")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = t2n.export(model, args, path, **export_kwargs)
        for k, inputs in enumerate([args, *more]):
            _compare_run(model, path, inputs, f"input set {k}", rtol, atol)
    return result


def _compare_run(model, path, inputs, what, rtol, atol):
    expected = torch_outputs(model, tuple(a.clone() for a in inputs))
    try:
        got = _worker().run(path, [a.numpy() for a in inputs])
    except TractRunError as e:
        raise AssertionError(f"tract failed on {what}: {e}") from None
    assert len(got) == len(expected), f"{len(got)} outputs in tract, {len(expected)} in torch"
    checks = [compare(f"output_{i}", e, a, rtol=rtol, atol=atol)
              for i, (e, a) in enumerate(zip(expected, got))]
    bad = [c for c in checks if not c.ok]
    assert not bad, f"tract differs from torch on {what}:\n" + \
        "\n".join("  " + c.line() for c in checks)


def refuses(fn, *args, match: str, **export_kwargs):
    """Assert the export fails with a conversion error whose message contains ``match``."""
    with pytest.raises(T2NError) as info:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with tempfile.TemporaryDirectory(prefix="t2n-gather-") as d:
                t2n.export(Fn(fn), args, os.path.join(d, "m.nnef"), **export_kwargs)
    assert match in str(info.value), str(info.value)


def test_checker_catches_a_wrong_value():
    # index_select exported, then compared with a function that differs: must fail
    class Lies(torch.nn.Module):
        calls = 0

        def forward(self, x, i):
            Lies.calls += 1
            out = torch.index_select(x, 0, i)
            return out if Lies.calls == 1 else out + 1  # the trace sees the honest one

    with pytest.raises(AssertionError, match="MISMATCH"):
        check(Lies(), torch.randn(3, 2), torch.tensor([2, 0]))


def test_checker_catches_a_wrong_dtype():
    class Lies(torch.nn.Module):
        calls = 0

        def forward(self, x):
            Lies.calls += 1
            return x if Lies.calls == 1 else x.double()

    with pytest.raises(AssertionError, match="dtype"):
        check(Lies(), torch.randn(3))
