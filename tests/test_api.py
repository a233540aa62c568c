"""The public Python API: ``t2n.export``, ``ExportResult`` and ``t2n.testing.assert_exports``."""

import os
import tarfile

import pytest
import torch

import cli_models
import t2n
from t2n.errors import UsageError
from t2n.testing import assert_exports


@pytest.fixture
def mlp():
    return cli_models.make_mlp()


@pytest.mark.parametrize("kwargs,needle", [
    ({"input_names": ["x", "y"]}, "2 input name(s) given for 1 input"),
    ({"input_names": ["9x"]}, "not a valid NNEF identifier"),
    ({"input_names": ["inference"]}, "not a valid NNEF identifier"),
    ({"output_names": ["a", "a"]}, "2 output name(s) given for 1 output"),
    ({"rtol": -1.0}, "rtol and atol"),
    ({"colour": "blue"}, "unknown export option(s): colour"),
    ({"dynamic_axes": {"y": {0: "B"}}}, "not an input"),
    ({"dynamic_axes": {"input_0": {5: "B"}}}, "out of range"),
], ids=["name-count", "name-digit", "name-inf", "output-count", "rtol", "unknown-option",
        "dynamic-unknown-input", "dynamic-axis-range"])
def test_bad_arguments_are_usage_errors(mlp, tmp_path, kwargs, needle):
    with pytest.raises(UsageError) as e:
        t2n.export(mlp, (torch.randn(2, 8),), tmp_path / "m.tgz", **kwargs)
    assert needle in str(e.value)
    assert os.listdir(tmp_path) == []


def test_bad_args_and_paths(mlp, tmp_path):
    with pytest.raises(UsageError, match="example input 0 is a list"):
        t2n.export(mlp, ([1.0] * 8,), tmp_path / "m.tgz")
    with pytest.raises(UsageError, match="args must be a tensor"):
        t2n.export(mlp, "x", tmp_path / "m.tgz")
    with pytest.raises(UsageError, match="dtype torch.complex64"):
        t2n.export(torch.nn.Identity(), (torch.randn(2, 2, dtype=torch.complex64),),
                   tmp_path / "m.tgz")
    with pytest.raises(UsageError, match="does not exist"):
        t2n.export(mlp, (torch.randn(2, 8),), tmp_path / "missing" / "m.tgz")
    with pytest.raises(UsageError, match="model must be"):
        t2n.export(42, (torch.randn(2, 8),), tmp_path / "m.tgz")


def test_export_result_is_complete_and_readable(mlp, tmp_path):
    path = tmp_path / "mlp.nnef.tgz"
    r = t2n.export(mlp, torch.randn(3, 8), path, input_names=["x"], output_names=["logits"],
                   check=True)
    assert r.path == str(path) and os.path.getsize(path) == r.archive_bytes
    assert [(i.name, i.shape, i.dtype) for i in r.inputs] == [("x", [3, 8], "f32")]
    assert [(o.name, o.shape, o.dtype) for o in r.outputs] == [("logits", [3, 4], "f32")]
    assert r.op_histogram.get("linear") == 2 and r.op_count == sum(r.op_histogram.values())
    assert r.passed is True
    (c,) = r.checks
    assert c.name == "logits" and c.ok and 0 <= c.max_abs_err < 1e-5
    text = r.report()
    assert text.splitlines()[0].startswith(f"exported {path} (")
    for needle in ("input  x: 3x8 f32", "output logits: 3x4 f32", "ops: ", "linear 2",
                   "check in tract: PASSED", "logits: ok max_abs_err="):
        assert needle in text, needle
    with tarfile.open(path) as t:
        assert sorted(t.getnames()) == sorted(["graph.nnef", "fc1.weight.dat", "fc1.bias.dat",
                                               "fc2.weight.dat", "fc2.bias.dat"])


def test_without_check_there_are_no_figures(mlp, tmp_path):
    r = t2n.export(mlp, torch.randn(3, 8), tmp_path / "m.tar")
    assert r.checks is None and r.passed is None
    assert "check in tract" not in r.report()


def test_torchscript_path_as_model(mlp, tmp_path):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(mlp.eval(), torch.randn(2, 8)), str(tmp_path / "m.pt"))
    r = t2n.export(str(tmp_path / "m.pt"), torch.randn(2, 8), tmp_path / "m.tgz", check=True)
    assert r.passed


def test_fixture_mlp_via_api():
    from fixtures.models import example_inputs, make_mlp

    r = assert_exports(make_mlp(), example_inputs("mlp"))
    assert r.passed


def test_assert_exports_passes_and_checks_more_inputs(mlp):
    r = assert_exports(mlp, torch.randn(2, 8), input_names=["x"],
                       dynamic_axes={"x": {0: "B"}}, more_args=[(torch.randn(7, 8),)])
    assert r.inputs[0].shape[0] != 2  # symbolic


def test_assert_exports_fails_with_per_output_figures(mlp, monkeypatch, tmp_path):
    import t2n.check.tract_runner as tr

    real = tr.run_sets_in_tract
    monkeypatch.setattr(tr, "run_sets_in_tract",
                        lambda *a, **k: [[o * 1.01 for o in outs] for outs in real(*a, **k)])
    monkeypatch.setenv("T2N_KEEP_FAILED", str(tmp_path / "kept"))
    with pytest.raises(AssertionError) as e:
        assert_exports(mlp, torch.randn(2, 8))
    msg = str(e.value)
    assert msg.startswith("SmallMLP: tract differs from torch on the export inputs")
    assert "output_0: MISMATCH max_abs_err=" in msg and "max_rel_err=0.01" in msg
    assert "archive kept in" in msg
    (kept,) = os.listdir(tmp_path / "kept")
    assert os.listdir(tmp_path / "kept" / kept) == ["model.nnef"]


def test_assert_exports_lets_t2n_errors_through():
    with pytest.raises(t2n.UnsupportedOperatorsError):
        assert_exports(cli_models.make_two_unsupported(), torch.randn(2, 8))


class _DictHead(torch.nn.Module):  # torchvision's segmentation models return {"out", "aux"}
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return {"out": y.relu(), "aux": y.mean((2, 3))}


def test_dict_outputs_are_flattened_in_order():
    result = assert_exports(_DictHead(), (torch.randn(1, 3, 8, 8),))
    assert [o.shape for o in result.outputs] == [[1, 4, 8, 8], [1, 4]]
