"""Most sizes of dynamic axes: ``dynamic_axes={"x": {0: ("B", 1, 64)}}`` declares
``tract_assert B <= 64``.

tract bounds a product of symbols (``B*S``) only when each factor has both bounds; without
the most sizes it cannot prove a residual add over ``[B, S, C]`` large enough for its
same-shape kernel and keeps the generic broadcasting ``Add`` (BERT with dynamic batch and
sequence: 9 such adds, see bench/bounds_bench.py). These tests export, check in tract
against PyTorch at other sizes, and read the plan tract's optimiser chose."""

import json
import subprocess
import sys

import pytest
import torch

import t2n
from t2n.errors import UsageError
from t2n.specs import parse_dynamic
from t2n.testing import assert_exports


class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 32)

    def forward(self, x):
        return torch.relu(self.lin(x)) + x


def _model():
    torch.manual_seed(0)
    return Residual().eval()


def _plan_ops(archive) -> list[str]:
    """The ops of tract's optimised plan for ``archive`` at x = [2, 8, 32] (the symbols
    left symbolic, as a runtime serving every size loads it), in a child process."""
    code = ("import json, sys, numpy as np, tract\n"
            "lm = tract.nnef().load(sys.argv[1]).into_runnable()\n"
            "p = json.loads(lm.profile_json([np.zeros((2, 8, 32), np.float32)]))\n"
            "print(json.dumps(sorted(n['op_name'] for n in p['nodes'])))\n")
    p = subprocess.run([sys.executable, "-c", code, str(archive)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_most_sizes_are_declared_and_the_archive_runs_every_size(tmp_path):
    spec = {"x": {0: ("B", 1, 64), 1: ("S", 1, 512)}}
    assert_exports(_model(), (torch.randn(2, 8, 32),), input_names=["x"], dynamic_axes=spec,
                   more_args=[(torch.randn(1, 1, 32),), (torch.randn(5, 300, 32),)])
    path = tmp_path / "m.nnef"
    t2n.export(_model(), (torch.randn(2, 8, 32),), str(path), input_names=["x"],
               dynamic_axes=spec)
    text = (path / "graph.nnef").read_text()
    for line in ("B >= 1", "S >= 1", "B <= 64", "S <= 512"):
        assert f"extension tract_assert {line};" in text


def test_most_sizes_let_tract_use_its_same_shape_add(tmp_path):
    plans = {}
    for name, axes in (("bounded", {0: ("B", 1, 64), 1: ("S", 1, 512)}),
                       ("open", {0: "B", 1: "S"})):
        out = tmp_path / f"{name}.nnef.tar"
        t2n.export(_model(), (torch.randn(2, 8, 32),), str(out), input_names=["x"],
                   dynamic_axes={"x": axes}, check=True)
        plans[name] = _plan_ops(out)
    assert "OptAddUnicast" in plans["bounded"] and "Add" not in plans["bounded"]
    # without most sizes tract cannot bound 32*B*S: the generic broadcasting add stays
    assert "Add" in plans["open"] and "OptAddUnicast" not in plans["open"]


def test_a_most_size_must_be_above_the_example():
    with pytest.raises(UsageError, match="most size 8 must be above the example's 8"):
        t2n.export(_model(), (torch.randn(2, 8, 32),), "unused.nnef", input_names=["x"],
                   dynamic_axes={"x": {1: ("S", 1, 8)}})
    with pytest.raises(UsageError, match="must be \\(symbol, least size\\)"):
        t2n.export(_model(), (torch.randn(2, 8, 32),), "unused.nnef", input_names=["x"],
                   dynamic_axes={"x": {1: ("S", 1, 8.5)}})


def test_the_command_line_spells_most_sizes():
    assert parse_dynamic("x:0=B<=64") == ("x", 0, ("B", 1, 64))
    assert parse_dynamic("x:1=S>=0<=512") == ("x", 1, ("S", 0, 512))
    assert parse_dynamic("x:1=S>=0") == ("x", 1, ("S", 0))
    with pytest.raises(UsageError, match="x:0=B<=64"):
        parse_dynamic("x:0=B<=")
