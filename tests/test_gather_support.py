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


class _Lies(torch.nn.Module):
    """Honest until the export returns (whichever capture, however often it runs the model),
    then ``lie`` applied to its honest output."""

    def __init__(self, honest, lie):
        super().__init__()
        self.honest, self.lie, self.exported = honest, lie, False

    def forward(self, *args):
        out = self.honest(*args)
        return self.lie(out) if self.exported else out


def _lying_after_export(monkeypatch, model):
    export = t2n.export

    def then_lie(*args, **kwargs):
        result = export(*args, **kwargs)
        model.exported = True
        return result

    monkeypatch.setattr(t2n, "export", then_lie)
    return model


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_checker_catches_a_wrong_value(monkeypatch, capture):
    # index_select exported, then compared with a function that differs: must fail
    lies = _lying_after_export(monkeypatch, _Lies(lambda x, i: torch.index_select(x, 0, i),
                                                  lambda out: out + 1))
    with pytest.raises(AssertionError, match="MISMATCH"):
        check(lies, torch.randn(3, 2), torch.tensor([2, 0]), capture=capture)


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_checker_catches_a_wrong_dtype(monkeypatch, capture):
    lies = _lying_after_export(monkeypatch, _Lies(lambda x: x.clone(), lambda x: x.double()))
    with pytest.raises(AssertionError, match="dtype"):
        check(lies, torch.randn(3), capture=capture)
