"""capture="export": torch.export as the front end, with what it adds over the trace
(torch.cond, loud data-dependent control flow, guards on dynamic axes) and the same
archives as the trace where both capture the model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import t2n
from t2n.errors import TraceError, UsageError
from t2n.testing import FunctionModule, assert_exports
from t2n.check.tract_runner import run_in_tract


class Branchy(torch.nn.Module):
    def __init__(self, runtime: bool):
        super().__init__()
        self.runtime = runtime
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        pred = x.sum() > 0 if self.runtime else torch.tensor(True)
        return torch.cond(pred, lambda x: self.lin(x).relu(), lambda x: x * 2.0 - 1.0, (x,))


def test_cond_with_a_constant_predicate_is_folded():
    r = assert_exports(Branchy(False).eval(), (torch.randn(3, 4),), capture="export")
    assert "select" not in r.op_histogram and r.op_histogram["relu"] == 1


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_with_a_runtime_predicate_selects_in_tract(tmp_path, sign):
    path = str(tmp_path / "m.nnef")
    model = Branchy(True).eval()
    x = torch.rand(3, 4) * sign
    r = t2n.export(model, (x,), path, capture="export", check=True)
    assert r.op_histogram["select"] == 1
    other = -x  # the other branch, run on the same archive
    got = run_in_tract(path, [other.numpy()])[0]
    with torch.no_grad():
        want = model(other).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_data_dependent_control_flow_is_an_error_naming_the_line(tmp_path):
    class Python(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x - 1

    with pytest.raises(TraceError, match=r"depends on tensor values.*test_capture_export\.py"):
        t2n.export(Python(), (torch.randn(3),), str(tmp_path / "m.nnef"), capture="export")


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_size_read_from_a_tensor_is_no_frozen_axis(tmp_path, dynamic):
    """A tensor's value used as a size torch.export cannot keep symbolic (``int(n)`` in a
    ``repeat``): the error says the size depends on tensor values, names the line and the
    other captures; it names no dynamic axis, whether the model has one or not."""
    m = FunctionModule(lambda x, n: x.repeat(int(n), 1))
    axes = {"x": {1: "F"}} if dynamic else None
    with pytest.raises(TraceError) as info:
        t2n.export(m, (torch.randn(4, 3), torch.tensor(2)), str(tmp_path / "m.nnef"),
                   capture="export", input_names=["x", "n"], dynamic_axes=axes)
    text = str(info.value)
    assert "a size depends on tensor values" in text and "test_capture_export.py:" in text \
        and "capture='trace'" in " ".join(getattr(info.value, "__notes__", [])), text
    assert "dynamic axis" not in text and "frozen" not in text, text


def test_an_axis_the_model_fixes_is_refused(tmp_path):
    m = FunctionModule(lambda x: x.reshape(4, 3))
    with pytest.raises(UsageError, match="x axis 0"):
        t2n.export(m, (torch.randn(2, 6),), str(tmp_path / "m.nnef"), capture="export",
                   input_names=["x"], dynamic_axes={"x": {0: "B"}})


def test_ranges_export_derives_are_reported(tmp_path):
    table = torch.randn(1, 16, 4)  # a position table: the model is valid up to 16 steps
    m = FunctionModule(lambda x: x + table[:, :x.shape[1]])
    r = t2n.export(m, (torch.randn(2, 5, 4),), str(tmp_path / "m.nnef"), capture="export",
                   input_names=["x"], dynamic_axes={"x": {1: "S"}}, check=True)
    assert any("S in [" in w and "16]" in w for w in r.warnings), r.warnings


def test_unknown_capture_refused(tmp_path):
    with pytest.raises(UsageError, match="capture="):
        t2n.export(torch.nn.ReLU(), (torch.randn(2),), str(tmp_path / "m.nnef"), capture="jit")


def test_torchscript_file_needs_the_trace(tmp_path):
    path = tmp_path / "m.pt"
    torch.jit.save(torch.jit.trace(torch.nn.ReLU(), (torch.randn(2),)), str(path))
    with pytest.raises(UsageError, match="capture='trace'"):
        t2n.export(str(path), (torch.randn(2),), str(tmp_path / "m.nnef"), capture="export")


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["resnet18", "mlp", "mobilenet_block"])
def test_both_captures_give_the_same_outputs(tmp_path, model_name):
    from fixtures.models import example_inputs, make_mlp, make_mobilenet_block, make_resnet18

    model = {"resnet18": make_resnet18, "mlp": make_mlp,
             "mobilenet_block": make_mobilenet_block}[model_name]()
    args = example_inputs(model_name)
    if model_name == "resnet18":
        args = (torch.randn(1, 3, 64, 64),)
    outs = {}
    for capture in ("trace", "export"):
        path = str(tmp_path / f"{capture}.nnef")
        t2n.export(model, args, path, capture=capture, check=True, rtol=1e-4, atol=1e-4)
        outs[capture] = run_in_tract(path, [a.numpy() for a in args])
    for a, b in zip(outs["trace"], outs["export"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=model_name)


@pytest.mark.slow
def test_transformers_model_as_it_is_names_its_outputs(tmp_path):
    import transformers
    cfg = transformers.Qwen3Config(vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                   intermediate_size=64, max_position_embeddings=32)
    model = transformers.Qwen3ForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (1, 6))
    r = t2n.export(model, {"input_ids": ids}, str(tmp_path / "m.nnef"), capture="export",
                   check=True, rtol=1e-4, atol=1e-4)
    names = [o.name for o in r.outputs]
    assert names[0] == "logits" and "present_key_0" in names and "present_value_0" in names


def test_buffer_and_input_updates_are_not_outputs(tmp_path):
    """export returns the running-stat updates of a training-mode batch norm as extra
    outputs of the program; the archive's outputs are the model's own."""
    def fn(x, w, b, rm, rv):
        return torch.nn.functional.batch_norm(x, rm, rv, w, b, training=True)

    args = (torch.randn(4, 3), torch.rand(3), torch.randn(3), torch.zeros(3), torch.ones(3))
    r = t2n.export(FunctionModule(fn), args, str(tmp_path / "m.nnef"), capture="export",
                   check=True)
    assert len(r.outputs) == 1


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_chunked_linear_cross_entropy_of_another_library_namespace(tmp_path, reduction):
    """``F.linear_cross_entropy(..., options=...)`` reaches torch.export as the custom op
    ``torch_nn::_linear_cross_entropy_batch_chunked[_no_reduction]`` (the trace takes the
    unchunked path): mapped by its qualified name, the same loss."""
    from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions

    options = LinearCrossEntropyOptions()

    def fn(x, w, b, target):
        return torch.nn.functional.linear_cross_entropy(x, w, target, linear_bias=b,
                                                        reduction=reduction, options=options)

    args = (torch.randn(5, 8), torch.randn(6, 8), torch.randn(6), torch.randint(0, 6, (5,)))
    t2n.export(FunctionModule(fn), args, str(tmp_path / "m.nnef"), capture="export",
               check=True)


def test_a_dynamic_axis_of_example_size_one_stays_dynamic():
    """A batch of one is captured as any batch (torch.export alone would fix it to 1)."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(2),
                                torch.nn.Linear(9, 2))
    r = assert_exports(model, (torch.randn(1, 3, 5, 5),), capture="export", input_names=["x"],
                       dynamic_axes={"x": {0: "B"}},
                       more_args=[(torch.randn(4, 3, 5, 5),), (torch.randn(2, 3, 5, 5),)])
    assert [str(d) for d in r.inputs[0].shape] == ["B", "3", "5", "5"]


class _OtherPathAtOne(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 1:  # a path of its own at the example's size
            return x * 2
        return x + 1


class _SqueezesOne(torch.nn.Module):
    def forward(self, x):
        return x.squeeze(0) * 2  # drops the axis at size 1 only


@pytest.mark.parametrize("model", [_OtherPathAtOne(), _SqueezesOne()],
                         ids=lambda m: type(m).__name__)
def test_a_model_with_another_path_at_size_one_is_refused_naming_the_axis(model, tmp_path):
    with pytest.raises(UsageError, match=r"dynamic axis B|x axis 0 \(B\) is 1.*size >= 2"):
        t2n.export(model, (torch.randn(1, 3),), str(tmp_path / "m.nnef"), capture="export",
                   input_names=["x"], dynamic_axes={"x": {0: "B"}})
    assert not (tmp_path / "m.nnef").exists()


@torch.jit.script_if_tracing
def _scripted_pad(x: torch.Tensor, n: int) -> torch.Tensor:
    if x.size(-1) < n:  # a prim::If in the trace
        return torch.nn.functional.pad(x, (0, n - x.size(-1)))
    return x


class _ScriptIfTracing(torch.nn.Module):  # VitDet's position-embedding helper, in small
    def forward(self, x):
        return _scripted_pad(x * 2, 8) + 1


def test_scripted_control_flow_is_refused_by_the_trace_and_exported_by_export(tmp_path):
    from t2n.errors import UnsupportedOperatorsError

    x = torch.randn(2, 5)
    with pytest.raises(UnsupportedOperatorsError, match=r"prim::If.*capture='export'"):
        t2n.export(_ScriptIfTracing(), (x,), tmp_path / "t.nnef", capture="trace")
    assert_exports(_ScriptIfTracing(), (x,), capture="export")
    assert_exports(_ScriptIfTracing(), (x,), capture=None)  # the default


def test_the_failing_line_is_found_when_torch_quotes_no_stack():
    """torch.export's message does not always quote the user's stack (it depends on what
    the process ran before): the line then comes from the exception's own traceback."""
    from t2n.capture.user_frames import user_line

    def forward():
        raise RuntimeError("Could not guard on data-dependent expression Eq(u0, 1)")

    try:
        forward()
    except RuntimeError as e:
        where = user_line(str(e), e)
    assert where.startswith(" at test_capture_export.py:"), where


class Functional(torch.nn.Module):
    """Mapped functional ops only: nothing for run_decompositions to do."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 5)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2.0


class InPlace(Functional):
    """The same computation with an in-place relu_ into a fresh value no one else reads:
    read as relu (t2n/capture/inplace_ops.py), no re-trace."""

    def forward(self, x):
        return self.lin(x).relu_() * 2.0


class WriteIntoView(Functional):
    """A write into a view of the value: functionalised by run_decompositions."""

    def forward(self, x):
        y = self.lin(x)
        y[:, 1:3].relu_()
        return y * 2.0


class TwoWrites(Functional):
    """Two in-place ops on one value, their results unused: export records the second as
    reading the first's result, so both are read as functional ops, no re-trace."""

    def forward(self, x):
        y = self.lin(x)
        y.relu_()
        y.add_(1.0)
        return y * 2.0


class ReadBeforeWrite(Functional):
    """The old value read before the write, the result after: read as relu, no re-trace."""

    def forward(self, x):
        y = self.lin(x)
        before = y * 3.0
        return before + torch.nn.functional.relu(y, inplace=True)


@pytest.mark.parametrize("model_cls, relowered", [
    (Functional, False), (InPlace, False), (ReadBeforeWrite, False), (TwoWrites, False),
    (WriteIntoView, True)])
def test_export_retraces_only_when_the_program_needs_it(model_cls, relowered, monkeypatch,
                                                       tmp_path):
    """capture="export": run_decompositions (a whole re-trace) runs only for a program
    with an in-place op that its functional form cannot replace as it stands (a write into
    a view) or an unmapped op; the archive matches torch in tract and, where no re-trace
    ran, is the trace's byte for byte (the functionalised view write is the same ops,
    labelled otherwise)."""
    calls = []
    real = torch.export.ExportedProgram.run_decompositions

    def counted(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", counted)
    torch.manual_seed(0)
    model, x = model_cls().eval(), torch.randn(3, 6)
    assert_exports(model, (x,), capture="export")
    assert bool(calls) == relowered, calls
    t2n.export(model, (x,), str(tmp_path / "e.nnef.tar"), capture="export")
    t2n.export(model, (x,), str(tmp_path / "t.nnef.tar"))
    if not relowered:
        assert (tmp_path / "e.nnef.tar").read_bytes() == (tmp_path / "t.nnef.tar").read_bytes()
