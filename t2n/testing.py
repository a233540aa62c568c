"""A pytest helper for your own test suite: does this model still export, and does tract
compute what PyTorch computes?

    import torch
    from t2n.testing import assert_exports

    def test_my_model_exports():
        model = MyModel().eval()
        assert_exports(model, (torch.randn(1, 3, 32, 32),))

    def test_any_batch_size():
        assert_exports(MyModel().eval(), (torch.randn(2, 3, 32, 32),),
                       input_names=["x"], dynamic_axes={"x": {0: "B"}},
                       more_args=[(torch.randn(5, 3, 32, 32),)])

The archive goes to a temporary directory that is removed afterwards (set the environment
variable ``T2N_KEEP_FAILED`` to a directory to keep the archives of failing checks). tract
runs in a child process, so a tract crash fails one test, not the session. A failure is an
``AssertionError`` whose message has the per-output figures (max abs / rel error); t2n's
own errors (unsupported operators, bad arguments) propagate unchanged.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import torch

from t2n.check.compare import DEFAULT_ATOL, DEFAULT_RTOL


class FunctionModule(torch.nn.Module):
    """A module computing ``fn(*inputs)``: test a function of tensors without writing a
    module class (every tensor argument becomes a runtime input of the export)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def assert_exports(model, args, *, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                   more_args=(), filename: str = "model.nnef", **export_kwargs):
    """Export ``model`` on ``args``; assert tract matches PyTorch on ``args``, on the
    export check's fresh inputs (other values, the dynamic axes at another size) and on
    every tuple of inputs in ``more_args`` (other sizes, for dynamic axes).

    ``args`` is a tensor, a tuple of tensors or a dict of keyword inputs (as is each entry
    of ``more_args``); ``export_kwargs`` go to :func:`t2n.export`
    (``input_names``, ``output_names``, ``dynamic_axes``, ...). Floats compare with
    ``|tract - torch| <= atol + rtol * |torch|`` (NaN where torch has NaN), integers and
    bools exactly. Returns the :class:`~t2n.api.ExportResult`.
    """
    __tracebackhide__ = True  # pytest: show the failure at the caller's line
    from t2n.api import _as_args, export
    from t2n.check.verify import check_archive_sets
    from t2n.errors import CheckFailedError, TractError

    what = type(model).__name__ if not isinstance(model, (str, os.PathLike)) else str(model)
    with tempfile.TemporaryDirectory(prefix="t2n-test-") as d:
        path = os.path.join(d, filename)
        shapes = [tuple(a.shape) for a in _as_args(args)]
        keep = _keep_root()
        if keep and "keep_failed" not in export_kwargs:  # a failed check's archive
            export_kwargs = dict(export_kwargs, keep_failed=os.path.join(
                tempfile.mkdtemp(prefix="failed-", dir=keep), filename))
        try:
            result = export(model, args, path, check=True, rtol=rtol, atol=atol,
                            **export_kwargs)
        except CheckFailedError as e:
            raise AssertionError(f"{what}: tract differs from torch on the export inputs "
                                 f"(shapes {shapes}){_where(e)}:\n{e}") from None
        except TractError as e:
            raise AssertionError(f"{what}: tract failed on the export{_where(e)}: {e}") \
                from None
        names = [o.name for o in result.outputs]
        input_names = [i.name for i in result.inputs] if (
            isinstance(args, dict) or export_kwargs.get("input_names")) else None
        more = [(f"more_args {k + 1}", extra if isinstance(extra, dict) else _as_args(extra))
                for k, extra in enumerate(more_args)]
        if more:  # every set in one load of the archive
            try:
                done = check_archive_sets(path, model, None, names, rtol=rtol, atol=atol,
                                          input_names=input_names, more=more,
                                          target=export_kwargs.get("target", "tract"))
            except TractError as e:
                raise AssertionError(f"{what}: tract failed on input set {_which(e, more)}"
                                     f"{_kept(path)}: {e}") from None
            bad = [c for c in done.checks if not c.ok]
            if bad:
                extra = dict(more)[bad[0].input_set]
                raise AssertionError(f"{what}: tract differs from torch on input set "
                                     f"{bad[0].input_set} "
                                     f"(shapes {[tuple(a.shape) for a in _as_args(extra)]})"
                                     f"{_kept(path)}:\n" +
                                     "\n".join("  " + c.line() for c in done.checks))
        return result


def _which(error, more) -> str:
    """The input set a TractError names (``on input set 2``), else every one of them."""
    text = str(error)
    for name, _ in more:
        if f"on input set {name} " in text or text.endswith(f"on input set {name}"):
            return name
    return ", ".join(name for name, _ in more)


def _where(error) -> str:
    """Where export moved the archive of a failed check (``keep_failed``), if it did."""
    kept = getattr(error, "kept_archive", None)
    return f" [archive kept in {kept}]" if kept else ""


def _keep_root() -> str | None:
    """$T2N_KEEP_FAILED, created if missing. Archives go into new ``failed-*`` folders
    inside it, so nothing there is ever replaced; a path that is not a folder is refused."""
    from t2n.errors import OutputPathError

    keep = os.environ.get("T2N_KEEP_FAILED")
    if not keep:
        return None
    if os.path.lexists(keep) and not os.path.isdir(keep):
        raise OutputPathError(keep, f"T2N_KEEP_FAILED={keep} is not a folder (t2n keeps "
                              "failed archives in new folders inside it)")
    os.makedirs(keep, exist_ok=True)
    return keep


def _kept(path: str) -> str:
    """Copy a failing archive to $T2N_KEEP_FAILED (if set) and say where it went."""
    keep = _keep_root()
    if not keep or not os.path.exists(path):
        return ""
    dest = tempfile.mkdtemp(prefix="failed-", dir=keep)
    target = os.path.join(dest, os.path.basename(path))
    if os.path.isdir(path):
        shutil.copytree(path, target)
    else:
        shutil.copy2(path, target)
    return f" [archive kept in {target}]"


def tract_ops(archive, symbols: dict | None = None) -> dict[str, int]:
    """How many nodes of each op tract's optimised model of ``archive`` runs (symbols bound
    to ``symbols``, else 1), from one profiled run in a child process: pins what tract makes
    of an archive, e.g. that no ``Cast`` of a weight or ``OptMatMulPack`` of a constant is
    left to run at every inference."""
    from t2n.check.tract_cost import profile_in_child

    cost, msg = profile_in_child(archive, symbols or {})
    if cost is None:
        raise AssertionError(f"tract could not profile {archive}: {msg}")
    return cost["ops"]
