"""Every export proves its engine loads the archive (t2n.check.load): without ``check`` the
archive is loaded in tract before it leaves staging, a refusal names the op and line and
writes nothing; ``check=True`` loads it once (its run); ``verify_load=False`` and
``--no-load-check`` skip the proof."""

import os

import pytest
import torch
from click.testing import CliRunner

import t2n
import t2n.passes as passes
from t2n.check import tract_runner
from t2n.cli import cli
from t2n.check.load import LoadRefusedError


class Readout(torch.nn.Module):
    """DPT's readout, which tract refuses at load without the product_broadcasts pass."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 8)

    def forward(self, h):
        cls, x = h[:, :1], h[:, 1:]
        return self.lin(torch.cat([x, cls.expand_as(x)], -1))


def make_readout():
    torch.manual_seed(0)
    return Readout().eval()


@pytest.fixture
def loads(monkeypatch):
    """The archives tract was asked to load (only) and to run, in order."""
    seen = {"load": [], "run": []}
    load, run, run_sets = (tract_runner.load_in_tract, tract_runner.run_in_tract,
                           tract_runner.run_sets_in_tract)

    def counting_load(archive, timeout=600):
        seen["load"].append(archive)
        return load(archive, timeout)

    def counting_run(archive, inputs, timeout=600):
        seen["run"].append(archive)
        return run(archive, inputs, timeout)

    def counting_run_sets(archive, sets, timeout=600):  # a check: every input set, one load
        seen["run"].append(archive)
        return run_sets(archive, sets, timeout)

    monkeypatch.setattr(tract_runner, "load_in_tract", counting_load)
    monkeypatch.setattr(tract_runner, "run_in_tract", counting_run)
    monkeypatch.setattr(tract_runner, "run_sets_in_tract", counting_run_sets)
    return seen


@pytest.fixture
def without_the_fix(monkeypatch):
    monkeypatch.setattr(passes, "PIPELINE",
                        tuple(p for p in passes.PIPELINE if p != "product_broadcasts"))


def test_export_without_check_loads_once(tmp_path, loads):
    out = tmp_path / "m.nnef.tgz"
    t2n.export(make_readout(), (torch.randn(1, 5, 8),), out)
    assert len(loads["load"]) == 1 and loads["run"] == []
    assert os.path.basename(loads["load"][0]) == "m.nnef.tgz"  # in staging, before the move
    assert os.path.dirname(loads["load"][0]) != str(tmp_path) and out.exists()


def test_check_loads_only_through_its_run(tmp_path, loads):
    t2n.export(make_readout(), (torch.randn(1, 5, 8),), tmp_path / "m.nnef", check=True)
    assert loads["load"] == [] and len(loads["run"]) == 1


def test_refused_archive_names_op_and_line_and_is_not_written(tmp_path, without_the_fix):
    out = tmp_path / "m.nnef"
    with pytest.raises(LoadRefusedError) as e:
        t2n.export(make_readout(), (torch.randn(1, 5, 8),), out)
    msg = str(e.value)
    assert msg.startswith("tract refuses to load the archive at aten::linear"), msg
    assert e.value.where and "test_load_check.py" in e.value.where and not e.value.crashed
    assert "nothing was written" in msg and "ModelPatch" not in msg  # no weights dump
    assert list(tmp_path.iterdir()) == []


def test_refused_archive_keeps_the_previous_one(tmp_path, without_the_fix):
    out = tmp_path / "m.nnef.tar"
    t2n.export(torch.nn.ReLU(), (torch.randn(2, 3),), out)  # a good archive, replaceable
    previous = out.read_bytes()
    with pytest.raises(LoadRefusedError):
        t2n.export(make_readout(), (torch.randn(1, 5, 8),), out)
    assert out.read_bytes() == previous


def test_opt_out_writes_without_loading(tmp_path, loads, without_the_fix):
    out = tmp_path / "m.nnef"
    t2n.export(make_readout(), (torch.randn(1, 5, 8),), out, verify_load=False)
    assert loads["load"] == [] and out.is_dir()
    with pytest.raises(tract_runner.TractRunError, match="Trying to substitute"):
        tract_runner.run_in_child("t2n.check.tract_runner", "tract", str(out), None)


def test_cli_refusal_exit_code_and_opt_out(tmp_path, without_the_fix):
    args = ["export", "test_load_check:make_readout", "--input", "h:1x5x8:f32"]
    r = CliRunner().invoke(cli, args + ["-o", str(tmp_path / "a.nnef")])
    assert r.exit_code == 2, r.output
    assert "tract refuses to load the archive at aten::linear" in r.output
    assert not (tmp_path / "a.nnef").exists()
    r = CliRunner().invoke(cli, args + ["-o", str(tmp_path / "b.nnef"), "--no-load-check"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "b.nnef").is_dir()


def test_worker_loads_without_running(tmp_path):
    path = tmp_path / "m.nnef"
    t2n.export(make_readout(), (torch.randn(1, 5, 8),), path, verify_load=False)
    w = tract_runner.TractWorker()
    try:
        assert w.load(str(path)) is None
        got = w.run(str(path), [torch.randn(1, 5, 8).numpy()])  # the same child runs on
        assert got[0].shape == (1, 4, 8)
    finally:
        w.close()


def test_exports_share_one_tract_child_started_before_the_capture(tmp_path):
    """Outside the test session's worker (a fresh interpreter): an export starts the
    process's tract child before it captures the model, the load proof and the check run
    in it, the next export reuses it, and a refusal in it reads as a refusal in a child of
    its own (the DPT readout without the pass that fixes it)."""
    import subprocess
    import sys

    code = f"""
import torch
import t2n, t2n.passes as passes
from t2n.capture.strategies import STRATEGIES
from t2n.check import tract_runner
from t2n.check.load import LoadRefusedError
import test_load_check as T
alive = []
def watched(strategy):
    capture = strategy.capture
    def watching(*a, **k):
        r = tract_runner.SHARED._runner
        alive.append(r is not None and r._proc is not None and r._proc.poll() is None)
        return capture(*a, **k)
    strategy.capture = watching
for strategy in STRATEGIES.values():
    watched(strategy)
x = torch.randn(1, 5, 8)
t2n.export(T.make_readout(), (x,), {str(tmp_path / "a.nnef.tar")!r})
pid = tract_runner.SHARED._runner._proc.pid
t2n.export(T.make_readout(), (x,), {str(tmp_path / "b.nnef.tar")!r}, check=True)
assert tract_runner.SHARED._runner._proc.pid == pid
passes.PIPELINE = tuple(p for p in passes.PIPELINE if p != "product_broadcasts")
try:
    t2n.export(T.make_readout(), (x,), {str(tmp_path / "c.nnef.tar")!r})
except LoadRefusedError as e:
    served = str(e)
with tract_runner.SHARED._lock:  # busy: a child of its own
    try:
        t2n.export(T.make_readout(), (x,), {str(tmp_path / "c.nnef.tar")!r})
    except LoadRefusedError as e:
        per_call = str(e)
import re
staging = re.compile(r"[.]c[.]nnef[.]tar[.][^./]+[.]staging")  # a random name per export
assert staging.sub("", served) == staging.sub("", per_call), (served, per_call)
assert "aten::linear" in served and "test_load_check.py:" in served, served
assert tract_runner.SHARED._runner._proc.pid == pid
print(alive)
"""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(t2n.__file__))), here,
         os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip().splitlines()[-1] == "[True, True, True, True]"
    assert not (tmp_path / "c.nnef.tar").exists()
