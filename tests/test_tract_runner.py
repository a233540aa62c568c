"""The tract child process: isolated from the caller's folder, crashes contained."""

import os
import subprocess
import sys

import numpy as np
import torch

import t2n
from t2n.check.tract_runner import TractRunError, TractWorker, run_in_tract


class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2


def _archive(tmp_path):
    path = str(tmp_path / "m.nnef.tar")
    t2n.export(Double(), (torch.ones(2, 3),), path)
    return path


def test_stray_modules_in_the_current_folder_do_not_reach_the_child(tmp_path):
    """A file named like a module tract needs (numpy.py) must not shadow it in the child."""
    path = _archive(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "numpy.py").write_text("raise SystemExit('shadowed numpy')\n")
    code = ("import sys; sys.path = [p for p in sys.path if p not in ('', '.')]\n"
            "import numpy as np\n"
            "from t2n.check.tract_runner import run_in_tract\n"
            f"out = run_in_tract({os.path.relpath(path, work)!r}, [np.ones((2, 3), np.float32)])\n"
            "print(out[0].sum())\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "12.0"


def test_worker_survives_a_refusal_and_reports_it(tmp_path):
    path = _archive(tmp_path)
    w = TractWorker()
    try:
        assert w.run(path, [np.ones((2, 3), np.float32)])[0].sum() == 12.0
        try:
            w.run(path, [np.ones((2, 3), np.int64)])  # wrong dtype: tract refuses
            raise AssertionError("tract accepted int64 for an f32 input")
        except TractRunError as e:
            assert not e.crashed
        assert w.run(path, [np.full((2, 3), 2, np.float32)])[0].sum() == 24.0
    finally:
        w.close()


def test_run_in_tract_relative_archive_path(tmp_path, monkeypatch):
    path = _archive(tmp_path)
    monkeypatch.chdir(tmp_path)
    out = run_in_tract(os.path.basename(path), [np.ones((2, 3), np.float32)])
    assert out[0].tolist() == [[2.0] * 3] * 2


def test_a_child_crashing_on_a_load_is_not_a_load(tmp_path):
    """A load-only request (no input set) whose child dies raises: nothing was proven."""
    from t2n.check.tract_runner import run_in_child

    try:
        run_in_child("t2n.check.no_such_runner", "tract", _archive(tmp_path), None)
        raise AssertionError("a crashed load passed")
    except TractRunError as e:
        assert e.crashed and "exit code 1" in str(e) and "no_such_runner" in str(e)
