"""The default capture, by the model's kind (``capture=None``): torch.export for a Python
module, a ScriptModule's own graph, the trace for a model holding torch.ao's packed
weights or other torch.ao quantized modules; the report names the capture used and why it
is not torch.export."""

import copy

import pytest
import torch

import t2n
from t2n.testing import assert_exports


class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x)) * 2.0


class ValueBranch(torch.nn.Module):
    """Python control flow on a tensor's value: torch.export refuses it."""

    def forward(self, x):
        if x.sum() > 0:
            return x + 1.0
        return x - 1.0


def test_a_python_module_is_captured_by_torch_export():
    r = assert_exports(Affine(), (torch.randn(3, 8),), input_names=["x"],
                       dynamic_axes={"x": {0: "B"}}, more_args=[(torch.randn(5, 8),)],
                       capture=None)
    assert r.capture == "export"
    assert "capture: export (torch.export)" in r.report()


def test_a_script_module_is_read_as_its_own_graph():
    scripted = torch.jit.script(Affine().eval())
    r = assert_exports(scripted, (torch.randn(3, 8),), capture=None)
    assert r.capture == "torchscript"
    assert "capture: torchscript (the ScriptModule's own TorchScript graph)" in r.report()


def test_a_saved_torchscript_file_exports(tmp_path):
    path = tmp_path / "affine.pt"
    torch.jit.save(torch.jit.trace(Affine().eval(), torch.randn(2, 8)), str(path))
    r = t2n.export(str(path), (torch.randn(3, 8),), tmp_path / "a.nnef.tgz", check=True,
                   capture=None)
    assert r.passed and r.capture == "torchscript"


def test_a_torch_ao_quantized_model_is_traced_saying_why():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, 4)).eval()
    dq = torch.ao.quantization.quantize_dynamic(copy.deepcopy(mlp), {torch.nn.Linear},
                                                dtype=torch.qint8)
    r = assert_exports(dq, (torch.randn(2, 16),), capture=None)
    assert r.capture == "trace"
    line = next(ln for ln in r.report().splitlines() if "capture: trace" in ln)
    assert "torch.ao quantized packed weights" in line and "LinearPackedParams" in line, line


class _OnQuantized(torch.nn.Module):
    """``module`` on the input quantized to quint8; the result dequantized."""

    def __init__(self, module, two=False):
        super().__init__()
        self.m, self.two = module, two

    def forward(self, x):
        q = torch.quantize_per_tensor(x, 0.05, 10, torch.quint8)
        return torch.dequantize(self.m.add(q, q) if self.two else self.m(q))


def _quantized_modules():
    import torch.ao.nn.quantized as nnq

    bn = nnq.BatchNorm2d(4)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5), bn.bias.normal_(0, 0.1)
    return {"QFunctional add": _OnQuantized(nnq.QFunctional(), two=True),
            "BatchNorm2d": _OnQuantized(bn.eval()), "ReLU6": _OnQuantized(nnq.ReLU6()),
            "Hardswish": _OnQuantized(nnq.Hardswish(0.1, 3)),
            "LeakyReLU": _OnQuantized(nnq.LeakyReLU(0.1, 3, 0.2))}


@pytest.mark.parametrize("kind", list(_quantized_modules()))
def test_torch_ao_quantized_modules_without_packed_weights_are_traced_saying_why(kind):
    """torch.export fails inside these modules' ops (no fake kernel for ``quantized::add``
    and ``quantized::relu6``; batch norm and hardswish get their float scale as a fake
    tensor): the default capture traces them, as it does packed weights."""
    r = assert_exports(_quantized_modules()[kind].eval(), (torch.randn(2, 4, 5, 5),),
                       capture=None)
    assert r.capture == "trace"
    line = next(ln for ln in r.report().splitlines() if "capture: trace" in ln)
    assert f"m ({kind.split()[0]}) runs torch.ao quantized ops" in line, line


def test_a_float_model_with_float_functional_stays_with_torch_export():
    """``FloatFunctional`` (a quantization-ready model's add before conversion) computes in
    float: such a model is captured by torch.export like any other."""
    import torch.ao.nn.quantized as nnq

    class Residual(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.add = torch.nn.Conv2d(4, 4, 3, padding=1), nnq.FloatFunctional()

        def forward(self, x):
            return self.add.add(self.conv(x), x)

    r = assert_exports(Residual().eval(), (torch.randn(2, 4, 5, 5),), capture=None)
    assert r.capture == "export", r.report()


def test_an_fx_graph_calling_quantized_ops_is_traced():
    """FX-mode quantization of a model holding no layer: a graph of ``quantize_per_tensor``
    and ``quantized::add`` calls, no quantized module."""
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    class Add(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    ex = (torch.randn(2, 8), torch.randn(2, 8))
    p = prepare_fx(Add().eval(), get_default_qconfig_mapping("x86"), ex)
    p(*ex)
    q = convert_fx(p)
    assert any("quantized.add" in str(n.target) for n in q.graph.nodes)
    r = assert_exports(q, ex, capture=None)
    assert r.capture == "trace" and "runs torch.ao quantized ops" in r.report()


def test_a_model_torch_export_refuses_names_the_other_captures(tmp_path):
    with pytest.raises(Exception) as info:
        t2n.export(ValueBranch(), (torch.randn(3, 4),), tmp_path / "v.nnef.tgz",
                   capture=None)
    notes = getattr(info.value, "__notes__", [])
    assert any("capture='trace'" in n and "capture='auto'" in n for n in notes), notes
    assert not (tmp_path / "v.nnef.tgz").exists()


def test_an_explicit_capture_is_kept():
    r = assert_exports(Affine(), (torch.randn(3, 8),), capture="trace")
    assert r.capture == "trace" and "capture: trace" not in r.report()


def test_the_default_is_torch_export_for_a_python_module(tmp_path):
    from click.testing import CliRunner

    from t2n.cli import cli

    r = t2n.export(Affine(), (torch.randn(3, 8),), tmp_path / "a.nnef.tgz")
    assert r.capture == "export" and "capture: export (torch.export)" in r.report()
    out = tmp_path / "m.nnef.tgz"
    res = CliRunner().invoke(cli, ["export", "cli_models:make_mlp", "-o", str(out),
                                   "--input", "x:3x8:f32", "--json"])
    assert res.exit_code == 0, res.output
    assert '"capture": "export"' in res.stdout
    res = CliRunner().invoke(cli, ["export", "cli_models:make_mlp", "-o", str(out),
                                   "--input", "x:3x8:f32", "--json", "--capture", "trace"])
    assert res.exit_code == 0, res.output
    assert '"capture": "trace"' in res.stdout


def test_a_model_computing_in_numpy_is_refused_at_capture(tmp_path):
    """The trace freezes a value computed outside torch (the check then fails it on fresh
    inputs: tests/test_check_fresh.py); the default capture refuses it at once."""
    import cli_models

    with pytest.raises(Exception) as info:
        t2n.export(cli_models.NumpyTanh(), (torch.randn(2, 4),), tmp_path / "n.nnef.tgz",
                   capture=None)
    assert "cli_models.py:" in str(info.value), str(info.value)
    assert not (tmp_path / "n.nnef.tgz").exists()


def test_a_test_fixtures_capture_does_not_outlive_its_test():
    """tests/conftest.py's capture fixtures patch ``t2n.export``, a name the package
    resolves lazily from ``t2n.api``: the undo must restore the real function, or every
    later test of the worker would run the fixture's capture instead of the default."""
    import t2n.api as api
    from conftest import _default_capture

    vars(t2n).pop("export", None)  # as in a fresh worker: the name not yet resolved
    patch = pytest.MonkeyPatch()
    _default_capture(patch, "trace")
    assert t2n.export is api.export and api.export.__name__ == "call"  # the wrapper
    patch.undo()
    assert t2n.export is api.export and api.export.__name__ == "export"
