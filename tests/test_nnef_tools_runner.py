"""The long-lived nnef-tools child (``--serve``): the per-call child's answers, its crash
isolation, a fresh parse per archive, one child shared by a process's exports, and no
nnef-tools in the parent."""

import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import t2n
from t2n.check.nnef_tools_runner import NnefToolsWorker
from t2n.check.tract_runner import TractRunError

BAD = ("version 1.0;\ngraph G( x ) -> ( y )\n{\n  x = external<scalar>(shape = [2]);\n"
       "  y = nosuchop(x);\n}\n")


def _archives(tmp_path):
    """Two Khronos archives with the same tensor names (a folder, a .tgz) and one the
    parser refuses."""
    a, b, bad = str(tmp_path / "a.nnef"), str(tmp_path / "b.nnef.tgz"), tmp_path / "bad"
    t2n.export(torch.nn.Linear(3, 2), (torch.randn(2, 3),), a, target="khronos",
               verify_load=False)
    t2n.export(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()),
               (torch.randn(2, 3),), b, target="khronos", verify_load=False)
    bad.mkdir()
    (bad / "graph.nnef").write_text(BAD)
    return a, b, str(bad)


def test_served_child_answers_as_the_per_call_child(tmp_path):
    """Runs, per-set refusals and the parser's refusal (exit code 3 per call: a refusal,
    not a crash, with the same message); each archive parsed afresh in the same child."""
    a, b, bad = _archives(tmp_path)
    x = np.ones((2, 3), np.float32)
    w = NnefToolsWorker()
    try:
        got = w.run_sets(a, [[x], [np.ones(5, np.float32)]])
        assert got[0][0].shape == (2, 2) and isinstance(got[1], TractRunError)
        assert w.run(b, [x])[0].shape == (2, 4)  # same names, another archive: its own graph
        with pytest.raises(TractRunError, match="undefined operation 'nosuchop'") as served:
            w.load(bad)
        assert not served.value.crashed
        pid = w._proc.pid
        assert w.run(a, [x])[0].tolist() == got[0][0].tolist()
        assert w._proc.pid == pid  # the refusal kept the child
    finally:
        w.close()


def test_a_hang_or_a_crash_fails_that_call_only(tmp_path):
    a, _, _ = _archives(tmp_path)
    w = NnefToolsWorker(timeout=5)
    try:
        w.load(a)
        os.kill(w._proc.pid, signal.SIGSTOP)  # hangs on the next request
        with pytest.raises(TractRunError, match="did not finish within 5 s") as e:
            w.load(a)
        assert e.value.crashed
        w.load(a)  # a fresh child
        pid = w._proc.pid
        os.kill(pid, signal.SIGSTOP)
        killer = threading.Timer(1.0, os.kill, (pid, signal.SIGKILL))  # dies on the request
        killer.start()
        with pytest.raises(TractRunError, match=r"nnef-tools crashed \(signal 9\)") as e:
            w.load(a)
        killer.join()
        assert e.value.crashed
        w.load(a)
        assert w._proc.pid != pid
    finally:
        w.close()


def test_the_child_leaves_when_idle_and_the_next_call_starts_one(tmp_path):
    a, _, _ = _archives(tmp_path)
    w = NnefToolsWorker(idle=1)
    try:
        w.load(a)
        proc = w._proc
        assert proc.wait(timeout=30) == 0  # left on its own
        w.load(a)
        assert w._proc is not proc and w._proc.poll() is None
    finally:
        w.close()


def test_exports_share_one_child_and_the_parent_never_imports_nnef_tools(tmp_path):
    """Consecutive parses and runs of a process go to one child; a call while the shared
    child is busy (another thread) runs in a child of its own, with the same answers."""
    a, b, bad = _archives(tmp_path)
    code = f"""
import sys
import numpy as np
from t2n.check import nnef_tools_runner as ntr
from t2n.check.tract_runner import TractRunError
x = np.ones((2, 3), np.float32)
ntr.parse_in_nnef_tools({a!r})
pid = ntr.SHARED._runner._proc.pid
assert ntr.run_in_nnef_tools({b!r}, [x])[0].shape == (2, 4)
try:
    ntr.parse_in_nnef_tools({bad!r})
except TractRunError as e:
    served = e
assert ntr.run_in_nnef_tools({a!r}, [x])[0].shape == (2, 2)
assert ntr.SHARED._runner._proc.pid == pid
with ntr.SHARED._lock:  # busy: a child of its own
    try:
        ntr.parse_in_nnef_tools({bad!r})
    except TractRunError as e:
        per_call = e
assert not served.crashed and not per_call.crashed and str(served) == str(per_call), (served, per_call)
print(sorted(m for m in sys.modules if m.split('.')[0] in ('nnef', 'nnef_tools')))
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(t2n.__file__))),
         os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
