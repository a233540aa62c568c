"""The check proves the graph, not one replay: besides the example it runs fresh inputs of
the same shapes and the dynamic axes at another size (t2n.check.input_sets, t2n.check.fresh_inputs),
and it fails outputs that depend on no input unless they are declared constant. The frozen
models here are traced (``capture="trace"``): torch.export refuses them at capture
(tests/test_capture_default.py)."""

import json
import os
import textwrap
import warnings

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import cli_models
import t2n
from t2n.cli import cli
from t2n.check.fresh_inputs import FreshInputs
from t2n.testing import assert_exports

HERE = os.path.dirname(os.path.abspath(__file__))


def run_cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_numpy_frozen_output_fails_the_check_naming_output_and_input_set(tmp_path):
    path = tmp_path / "m.nnef.tar"
    with pytest.raises(t2n.CheckFailedError) as e, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t2n.export(cli_models.NumpyTanh(), (torch.randn(2, 4),), path, input_names=["x"],
                   output_names=["y"], check=True, capture="trace")
    msg = str(e.value)
    assert "y: MISMATCH" in msg and "on input set fresh" in msg, msg
    sets = "example, fresh"
    assert f"input sets compared: {sets}" in msg, msg
    assert "depends on no input" in msg
    report = e.value.report.report()
    assert f"check in tract: FAILED (input sets: {sets})" in report, report
    assert not path.exists()


def test_numpy_frozen_output_with_a_dynamic_axis_is_refused_at_export(tmp_path):
    """The frozen result is a constant of the example's shape: the trace at another batch
    size holds another one (t2n.capture.size_probe), so the export stops before the check."""
    with pytest.raises(t2n.errors.ConversionError, match="dynamic axis B ") as e, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t2n.export(cli_models.NumpyTanh(), (torch.randn(2, 4),), tmp_path / "m.tar",
                   input_names=["x"], dynamic_axes={"x": {0: "B"}}, check=True,
                   capture="trace")
    assert "cli_models.py:" in str(e.value)
    r = run_cli("export", "cli_models:make_numpy_tanh", "-o", tmp_path / "m.tar", "--input",
                "x:3x4:f32", "--dynamic", "x:0=B", "--check", "--capture", "trace")
    assert r.exit_code == 2 and "changes with the size of dynamic axis B" in r.output


def test_numpy_frozen_output_fails_the_cli_check(tmp_path):
    r = run_cli("export", "cli_models:make_numpy_tanh", "-o", tmp_path / "m.tar", "--input",
                "x:3x4:f32", "--output-name", "y", "--check", "--json", "--capture", "trace")
    assert r.exit_code == 1, r.output
    data = json.loads(r.stdout)
    assert [s["name"] for s in data["input_sets"]] == ["example", "fresh"]
    (y,) = data["checks"]
    assert y["name"] == "y" and not y["ok"] and y["input_set"] == "fresh"
    assert "t2n: warning: output(s) y depend on no input" in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("t2n: check failed")


def test_assert_exports_fails_on_the_fresh_inputs():
    with pytest.raises(AssertionError) as e, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_exports(cli_models.NumpyTanh(), (torch.randn(2, 4),), capture="trace")
    assert "output_0: MISMATCH" in str(e.value) and "on input set fresh" in str(e.value)


def test_fresh_inputs_false_compares_the_example_only(tmp_path):
    """The opt-out for inputs whose exact values matter (a grid of special values, matrices
    that must be positive definite): only the example is compared, and the report says so."""
    r = t2n.export(cli_models.NumpyTanh(), (torch.randn(2, 4),), tmp_path / "m.tar",
                   check=True, fresh_inputs=False, constant_outputs=["output_0"],
                   capture="trace")
    assert r.passed and [s["name"] for s in r.extras["input_sets"]] == ["example"]


def test_constant_output_warns_on_export_and_fails_check_unless_declared(tmp_path):
    model, x = cli_models.WithTable(), (torch.randn(2, 4),)
    with pytest.warns(UserWarning, match=r"output\(s\) output_1 depend on no input"):
        r = t2n.export(model, x, tmp_path / "a.tar")
    assert any("output_1 depend on no input" in w for w in r.warnings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(t2n.CheckFailedError) as e:
            t2n.export(model, x, tmp_path / "b.tar", check=True)
    msg = str(e.value)
    assert "output_1: MISMATCH" in msg and "depends on no input" in msg
    assert "output_0" not in msg  # the other output passes
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # declared: no warning either
        r = t2n.export(model, x, tmp_path / "c.tar", check=True, constant_outputs=["output_1"])
    assert r.passed and not r.warnings
    with pytest.raises(t2n.UsageError, match="constant_outputs names nope"):
        t2n.export(model, x, tmp_path / "d.tar", constant_outputs=["nope"])


def test_constant_output_declared_on_the_cli(tmp_path):
    base = ("export", "cli_models:make_with_table", "-o", tmp_path / "m.tar", "--input",
            "x:2x4:f32", "--check")
    r = run_cli(*base)
    assert r.exit_code == 1 and "output_1: MISMATCH" in r.stdout, r.output
    r = run_cli(*base, "--constant-output", "output_1")
    assert r.exit_code == 0, r.output
    assert "warning" not in r.stderr


def test_outputs_shaped_by_a_dynamic_axis_are_not_constant(tmp_path):
    class Zeros(torch.nn.Module):  # no tensor edge from x, but its size follows B
        def forward(self, x):
            return torch.zeros(x.shape[0], 3)

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        r = t2n.export(Zeros(), (torch.randn(2, 4),), tmp_path / "z.tar", input_names=["x"],
                       dynamic_axes={"x": {0: "B"}}, check=True)
    assert r.passed


def test_report_lists_the_input_sets(tmp_path):
    r = t2n.export(cli_models.make_mlp(), (torch.randn(3, 8),), tmp_path / "m.tar",
                   input_names=["x"], dynamic_axes={"x": {0: "B"}}, check=True)
    sets = "example, fresh, fresh B=4, fresh B=10"  # near the example, and far (3n + 1)
    assert f"check in tract: PASSED (input sets: {sets})" in r.report()
    assert [s["name"] for s in r.extras["input_sets"]] == sets.split(", ")
    assert [s["shapes"] for s in r.extras["input_sets"]] == [[[3, 8]], [[3, 8]], [[4, 8]],
                                                             [[10, 8]]]


class Positions(torch.nn.Module):
    """A position table as long as the example: a longer sequence is not valid input."""

    def __init__(self, n=6):
        super().__init__()
        self.pos = torch.nn.Parameter(torch.randn(n, 4))

    def forward(self, x):
        return x + self.pos[: x.shape[1]]


def test_a_size_pytorch_rejects_falls_back_to_a_smaller_one(tmp_path):
    r = t2n.export(Positions(), (torch.randn(2, 6, 4),), tmp_path / "p.tar", input_names=["x"],
                   dynamic_axes={"x": {1: "S"}}, check=True)
    sets = {s["name"]: s for s in r.extras["input_sets"]}
    assert sets["fresh S=3"]["compared"] and not sets["fresh S=7"]["compared"]
    assert "PyTorch rejects it" in sets["fresh S=7"]["reason"]
    assert "input set fresh S=7: not comparable (PyTorch rejects it" in r.report()
    assert r.passed


def test_a_frozen_size_fails_on_the_resized_set(tmp_path):
    class FrozenSize(torch.nn.Module):  # x.shape[1] read as a Python int by .item()
        def forward(self, x):
            n = torch.tensor(x.shape[1]).item()
            return x * n

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(t2n.CheckFailedError) as e:
            t2n.export(FrozenSize(), (torch.randn(2, 6),), tmp_path / "f.tar",
                       input_names=["x"], dynamic_axes={"x": {1: "S"}}, check=True,
                       capture="trace")
    assert "output_0: MISMATCH" in str(e.value) and "on input set fresh S=7" in str(e.value)


class SizesAsTensors(torch.nn.Module):
    """Sizes made tensors (``torch.tensor(x.shape[0])``, ``scalar_tensor``, ``full``):
    under torch.export they stay symbolic, evaluated by tract at run time."""

    def forward(self, x):
        return (x + torch.scalar_tensor(x.shape[1]) * torch.tensor(x.shape[0], dtype=torch.float32)
                + torch.full((), x.shape[1], dtype=torch.int64))


def test_sizes_made_tensors_follow_the_dynamic_axes():
    assert_exports(SizesAsTensors(), (torch.randn(2, 6),), input_names=["x"],
                   dynamic_axes={"x": {0: "B", 1: "S"}}, more_args=[(torch.randn(3, 9),)],
                   capture="export")


def test_fresh_inputs_leave_the_model_as_it_was(tmp_path):
    class Counting(torch.nn.Module):  # a buffer its forward updates
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm1d(4)
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x):
            self.calls += 1
            return self.bn(x)

    def export(check):
        m = Counting().train()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t2n.export(m, (torch.randn(3, 4),), tmp_path / f"{check}.tar", check=check)
        return m

    plain, checked = export(False), export(True)
    assert checked.training
    assert torch.equal(checked.calls, plain.calls)
    assert torch.equal(checked.bn.running_mean, plain.bn.running_mean)
    assert checked.bn.num_batches_tracked == plain.bn.num_batches_tracked


def test_fresh_values_follow_the_example_and_are_reproducible():
    ids = torch.tensor([[3, 7, 5, 9]])  # integers: in the example's own range
    perm = torch.tensor([2, 0, 3, 1])  # distinct values stay distinct
    offsets = torch.tensor([0, 2, 5, 9])  # sorted stays sorted
    mask = torch.tensor([[0.0, 1.0] * 8])  # a 0/1 mask stays a 0/1 mask
    pos = torch.rand(2, 50) + 1.0  # positive in [1, 2) stays there
    flags = torch.tensor([True, False, True])
    args = (ids, perm, offsets, mask, pos, flags)
    f = FreshInputs(args, [a.shape for a in args], seed=0)
    name, fresh = f.same_shapes()
    assert name == "fresh" and [a.shape for a in fresh] == [a.shape for a in args]
    assert [a.dtype for a in fresh] == [a.dtype for a in args]
    assert fresh[0].min() >= 3 and fresh[0].max() <= 9
    assert sorted(fresh[1].tolist()) == [0, 1, 2, 3]
    assert fresh[2].tolist() == sorted(fresh[2].tolist())
    assert set(fresh[3].unique().tolist()) <= {0.0, 1.0}
    assert fresh[4].min() >= 1.0 and fresh[4].max() < 2.0 and not torch.equal(fresh[4], pos)
    again = FreshInputs(args, [a.shape for a in args], seed=0).same_shapes()[1]
    assert all(torch.equal(a, b) for a, b in zip(fresh, again))
    ranged = FreshInputs((ids,), [ids.shape], int_range=(0, 1000), seed=0).same_shapes()[1]
    assert ranged[0].max() > 9 and ranged[0].max() < 1000


def test_size_candidates_keep_equal_symbols_equal():
    import sympy

    S, T = sympy.Symbol("S"), sympy.Symbol("T")
    args = (torch.zeros(1, 8), torch.zeros(1, 8), torch.zeros(1, 1))
    f = FreshInputs(args, [[1, S], [1, T], [1, sympy.Symbol("U")]])
    assert f.size_candidates() == [{"S": 9, "T": 9, "U": 2}, {"S": 4, "T": 4, "U": 2},
                                   {"S": 7, "T": 7, "U": 2}]
    name, (a, b, c) = f.resized(f.size_candidates()[0], 0)
    assert name == "fresh S=9 T=9 U=2" and a.shape == (1, 9) and c.shape == (1, 2)


def test_manifest_check_fails_a_frozen_model_and_accepts_a_declared_constant(tmp_path):
    manifest = tmp_path / "models.toml"
    manifest.write_text(f'pythonpath = ["{HERE}"]\n' + textwrap.dedent("""
        [[model]]
        name = "numpy"
        model = "cli_models:make_numpy_tanh"
        inputs = ["x:2x4:f32"]
        capture = "trace"
        [[model]]
        name = "table"
        model = "cli_models:make_with_table"
        inputs = ["x:2x4:f32"]
        constant_outputs = ["output_1"]
        """))
    r = run_cli("check", manifest, "--json", tmp_path / "r.json")
    assert r.exit_code == 1, r.output
    models = {m["name"]: m for m in json.loads((tmp_path / "r.json").read_text())["models"]}
    assert models["numpy"]["status"] == "fail"
    assert "output_0: MISMATCH" in models["numpy"]["message"]
    assert "input sets compared: example, fresh" in models["numpy"]["message"]
    assert models["table"]["status"] == "pass", models["table"]["message"]
    assert [s["name"] for s in models["table"]["export"]["input_sets"]] == ["example", "fresh"]


@pytest.mark.parametrize("how", [dict(weights="f16"), dict(weights="q4_0"), dict(dtype="f32"),
                                 dict(target="khronos")])
def test_special_checks_compare_the_fresh_sets_too(tmp_path, how):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 8), torch.nn.ReLU())
    x = torch.randn(2, 32)
    if "dtype" in how:
        model, x = model.to(torch.bfloat16), x.to(torch.bfloat16)
    r = t2n.export(model, (x,), tmp_path / "m.tar", check=True, **how)
    assert [s["name"] for s in r.extras["input_sets"]] == ["example", "fresh"]
    assert r.passed and "(input sets: example, fresh)" in r.report()
