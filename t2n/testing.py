"""Helpers for test suites: export a model, run it in tract, compare with PyTorch.

    from t2n.testing import assert_exports
    def test_my_model():
        assert_exports(MyModel().eval(), (torch.randn(1, 3, 32, 32),))

tract runs in a child process, so a tract crash fails one test, not the session.
"""

from __future__ import annotations

import os
import tempfile

from .check import DEFAULT_ATOL, DEFAULT_RTOL


def assert_exports(model, args, *, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                   more_args=(), filename: str = "model.nnef", **export_kwargs):
    """Export ``model`` on ``args``; assert tract matches PyTorch on ``args`` and on every
    tuple of inputs in ``more_args`` (other sizes, for dynamic axes). Returns the
    :class:`~t2n.api.ExportResult`."""
    from .api import _as_args, check_archive, export
    from .errors import CheckFailedError, TractError

    with tempfile.TemporaryDirectory(prefix="t2n-test-") as d:
        path = os.path.join(d, filename)
        try:
            result = export(model, args, path, check=True, rtol=rtol, atol=atol,
                            **export_kwargs)
        except CheckFailedError as e:
            raise AssertionError(f"tract differs from torch on the export inputs:\n{e}") from None
        except TractError as e:
            raise AssertionError(f"tract failed on the export: {e}") from None
        names = [o.name for o in result.outputs]
        for k, extra in enumerate(more_args):
            extra = _as_args(extra)
            try:
                checks = check_archive(path, model, extra, names, rtol=rtol, atol=atol)
            except TractError as e:
                raise AssertionError(f"tract failed on input set {k + 1}: {e}") from None
            bad = [c for c in checks if not c.ok]
            if bad:
                raise AssertionError(f"tract differs from torch on input set {k + 1} "
                                     f"(shapes {[tuple(a.shape) for a in extra]}):\n" +
                                     "\n".join("  " + c.line() for c in checks))
        return result
