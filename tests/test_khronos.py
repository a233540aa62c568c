"""target="khronos": standard NNEF that the Khronos parser reads and nnef-tools' interpreter
runs with PyTorch's numbers; what the standard cannot express is refused, naming the op."""

from __future__ import annotations

import os

import nnef
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import t2n
from t2n.errors import UnsupportedOperatorsError, UsageError
from t2n.testing import FunctionModule

TOL = dict(rtol=1e-4, atol=1e-4)


def redraw(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Batch norms with non-trivial statistics and affine terms, so every block matters."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(n, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(n, generator=gen) * 0.1)
    return model.eval()


def export_khronos(model, args, tmp_path, name="m.nnef", **kw):
    path = str(tmp_path / name)
    result = t2n.export(model, args, path, target="khronos", check=True, **TOL, **kw)
    assert result.passed, result.report()
    return result, path


def graph_text(path: str) -> str:
    with open(os.path.join(path, "graph.nnef")) as f:
        return f.read()


class _SegmentationOut(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


def _cnn(name):
    import torchvision.models as tvm
    from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large

    return {
        "resnet18": lambda: tvm.resnet18(),
        "mobilenet_v3_small": lambda: tvm.mobilenet_v3_small(),
        "googlenet": lambda: tvm.googlenet(aux_logits=False, init_weights=False),
        "densenet121": lambda: tvm.densenet121(),
        "squeezenet1_1": lambda: tvm.squeezenet1_1(),
        "deeplabv3_mobilenet_v3": lambda: _SegmentationOut(deeplabv3_mobilenet_v3_large(
            weights=None, weights_backbone=None)),
    }[name]()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "googlenet", "densenet121",
                                  "squeezenet1_1", "deeplabv3_mobilenet_v3"])
def test_torchvision_cnn_parses_and_matches_in_nnef_tools(tmp_path, name):
    model = redraw(_cnn(name))
    x = torch.randn(1, 3, 64, 64)
    result, path = export_khronos(model, (x,), tmp_path)
    assert result.extras["checked_with"] == "nnef-tools"
    text = graph_text(path)
    assert "extension" not in text and "tract_" not in text, f"{name}: not standard NNEF"
    graph = nnef.load_graph(path)  # the reference parser reads it, shapes infer
    nnef.infer_shapes(graph)
    assert [tuple(graph.tensors[o].shape) for o in graph.outputs] == \
        [tuple(model(x).shape)], name


def test_tgz_archive_checks_too(tmp_path):
    model = redraw(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1),
                                       torch.nn.BatchNorm2d(8), torch.nn.Hardswish()))
    export_khronos(model, (torch.randn(2, 3, 9, 9),), tmp_path, name="m.nnef.tgz")


@pytest.mark.parametrize("fn, name", [
    (F.hardswish, "hardswish"), (F.silu, "silu"), (lambda x: F.gelu(x), "gelu_erf"),
    (lambda x: F.gelu(x, approximate="tanh"), "gelu_tanh"), (torch.erf, "erf"),
    (lambda x: torch.softmax(x, -1), "softmax"), (lambda x: F.log_softmax(x, 1), "log_softmax"),
    (lambda x: x.float().long().float(), "cast"), (lambda x: x.expand(3, 4, 6), "expand"),
])
def test_tract_ops_lowered_to_standard_ones(tmp_path, fn, name):
    x = torch.randn(4, 6) * 3
    x[0, :3] = torch.tensor([0.0, -0.0, 40.0])
    _, path = export_khronos(FunctionModule(fn), (x,), tmp_path)
    assert "tract_" not in graph_text(path), name


def test_erf_polynomial_is_float32_exact_enough(tmp_path):
    x = torch.linspace(-6, 6, 2001)
    r, _ = export_khronos(FunctionModule(torch.erf), (x,), tmp_path)
    assert r.checks[0].max_abs_err < 5e-7  # A&S 7.1.26: 1.5e-7, plus float32 rounding


def test_embedding_model_matches(tmp_path):
    class Emb(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(50, 16)
            self.head = torch.nn.Linear(16, 4)

        def forward(self, ids):
            return self.head(torch.relu(self.emb(ids)).mean(1))

    _, path = export_khronos(Emb().eval(), (torch.randint(0, 50, (2, 7)),), tmp_path)
    assert "gather(" in graph_text(path)


def test_constant_negative_indices_made_positive(tmp_path):
    idx = torch.tensor([-1, 0, -3, 2])
    export_khronos(FunctionModule(lambda x: x[:, idx]), (torch.randn(3, 5),),
                   tmp_path)


def test_array_literals_become_variables(tmp_path):
    scale = torch.tensor([1.5, -2.0, 0.25])
    _, path = export_khronos(FunctionModule(lambda x: x * scale + 1.0), (torch.randn(2, 3),),
                             tmp_path)
    assert "[1.5" not in graph_text(path)


class _Unexpressible(torch.nn.Module):
    """Ops standard NNEF has no form for, in a module's forward (torch.export records the
    source lines of modules' forward methods)."""

    def forward(self, x, i):
        y = torch.zeros(4, 8).scatter_add(0, i, x)
        return y.cumsum(1) + torch.topk(x, 2, dim=1).values.sum()


@pytest.mark.parametrize("capture", ["export", "trace"])
def test_every_unexpressible_op_refused_at_once_with_lines(tmp_path, capture):
    with pytest.raises(UnsupportedOperatorsError) as e:
        t2n.export(_Unexpressible(), (torch.randn(3, 8), torch.randint(0, 4, (3, 8))),
                   str(tmp_path / "m.nnef"), target="khronos", capture=capture)
    msg = str(e.value)
    assert "target 'khronos' cannot express" in msg
    for op in ("aten::scatter_add", "aten::cumsum", "aten::topk"):
        assert op in msg, msg
    assert "test_khronos.py" in msg  # the model's source line
    assert not os.path.exists(tmp_path / "m.nnef")  # nothing half-written


def test_integer_arithmetic_refused_naming_the_op(tmp_path):
    with pytest.raises(UnsupportedOperatorsError, match="aten::add"):
        t2n.export(FunctionModule(lambda i: i + i), (torch.randint(0, 9, (3,)),),
                   str(tmp_path / "m.nnef"), target="khronos")


def test_dynamic_axes_refused(tmp_path):
    with pytest.raises(UsageError, match="static shapes"):
        t2n.export(torch.nn.Linear(3, 2), (torch.randn(2, 3),), str(tmp_path / "m.nnef"),
                   target="khronos", input_names=["x"], dynamic_axes={"x": {0: "B"}})


def test_unknown_target_refused(tmp_path):
    with pytest.raises(UsageError, match="unknown target"):
        t2n.export(torch.nn.Linear(3, 2), (torch.randn(2, 3),), str(tmp_path / "m.nnef"),
                   target="onnx")


def test_tract_target_unchanged(tmp_path):
    path = str(tmp_path / "m.nnef")
    t2n.export(torch.nn.Linear(3, 2), (torch.randn(2, 3),), path, check=True)
    assert "extension tract_registry tract_core;" in graph_text(path)


def test_mismatch_in_interpreter_is_a_check_failure(tmp_path, monkeypatch):
    """The khronos check really compares: a wrong archive fails it."""
    import t2n.targets.khronos as khronos

    monkeypatch.setitem(khronos.LOWERINGS, "silu",
                        lambda g, op: [g.op("sigmoid", op.args[0])])
    with pytest.raises(t2n.CheckFailedError, match="nnef-tools"):
        t2n.export(FunctionModule(F.silu), (torch.randn(3, 4),), str(tmp_path / "m.nnef"),
                   target="khronos", check=True)


def test_cli_target_khronos(tmp_path):
    from t2n.cli import main

    out = tmp_path / "mlp.nnef"
    with pytest.raises(SystemExit) as e:
        main(["export", "fixtures.models:make_mlp", "-o", str(out), "--input", "x:2x1x8x8:f32",
              "--target", "khronos", "--check", "--atol", "1e-4"])
    assert e.value.code == 0
    nnef.load_graph(str(out))


def test_dat_read_back_every_dtype(tmp_path):
    """The writer's .dat files are what the Khronos reference reader reads, in every dtype
    (and for a strided weight, written from a non-contiguous view)."""
    gen = torch.Generator().manual_seed(3)
    buffers = {f"b_{str(dt)[6:]}": (torch.randn(3, 11, generator=gen) * 50).to(dt)
               for dt in (torch.float32, torch.float16, torch.float64, torch.int64,
                          torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)}
    buffers["b_strided"] = torch.randn(11, 3, generator=gen).t()

    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for k, v in buffers.items():
                self.register_buffer(k, v)

        def forward(self, idx):
            return [b.index_select(1, idx) for b in self.buffers()]

    path = str(tmp_path / "m.nnef")
    t2n.export(Holder(), (torch.tensor([0, 5, 10]),), path, check=True)
    for label, want in buffers.items():
        with open(os.path.join(path, label + ".dat"), "rb") as f:
            got = nnef.read_tensor(f)
        assert got.dtype == want.numpy().dtype and np.array_equal(got, want.numpy()), label


class TinyUNet(torch.nn.Module):
    """Convolutions down, transposed convolutions up (k2 s2, then k3 s2 p1 with
    output_padding 1, 64 -> 32 channels), skip concatenations."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.d1 = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU())
        self.d2 = nn.Sequential(nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU())
        self.d3 = nn.Sequential(nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU())
        self.u1 = nn.ConvTranspose2d(64, 64, 2, stride=2)
        self.u2 = nn.ConvTranspose2d(128, 32, 3, stride=2, padding=1, output_padding=1)
        self.out = nn.Conv2d(64, 2, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(a)
        u = torch.cat([self.u1(self.d3(b)), b], 1)
        return self.out(torch.cat([self.u2(u), a], 1))


def test_transposed_convolution_unet_matches(tmp_path):
    _, path = export_khronos(TinyUNet().eval(), (torch.randn(1, 3, 16, 16),), tmp_path)
    assert graph_text(path).count("deconv(") == 2


@pytest.mark.parametrize("layer, shape", [
    (torch.nn.ConvTranspose2d(64, 32, 2, stride=2), (1, 64, 5, 5)),
    (torch.nn.ConvTranspose2d(64, 32, 3, stride=2, padding=1, output_padding=1), (1, 64, 5, 5)),
    (torch.nn.ConvTranspose1d(8, 6, 3, stride=2, padding=1, output_padding=1, groups=2,
                              dilation=2), (2, 8, 7)),
    (torch.nn.ConvTranspose3d(4, 6, 2, stride=2, groups=2), (1, 4, 3, 3, 3)),
], ids=["2d_k2s2", "2d_k3s2p1op1", "1d_groups_dilation", "3d_groups"])
def test_transposed_convolution_filter_in_the_standard_layout(tmp_path, layer, shape):
    """The standard deconv filter is [C_in, C_out/groups, k...] (tract's is transposed per
    group): the parser checks filter[0] against the input channels."""
    export_khronos(layer.eval(), (torch.randn(*shape),), tmp_path)


def test_transposed_convolution_with_a_runtime_filter(tmp_path):
    fn = lambda x, w: F.conv_transpose2d(x, w, stride=2, groups=2)  # noqa: E731
    export_khronos(FunctionModule(fn), (torch.randn(1, 4, 3, 3), torch.randn(4, 3, 2, 2)),
                   tmp_path)


@pytest.mark.parametrize("shape", [(1, 5, 16), (2, 5, 16), (2, 2, 3, 16)],
                         ids=["rank3_batch1", "rank3_batch2", "rank4"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_linear_of_rank_above_two_is_standard_matmul(tmp_path, shape, bias):
    """The standard linear takes rank-2 inputs only (BERT's are [B, S, H])."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 8, bias=bias), torch.nn.ReLU(),
                                torch.nn.Linear(8, 4, bias=bias)).eval()
    _, path = export_khronos(model, (torch.randn(*shape),), tmp_path)
    text = graph_text(path)
    assert "linear(" not in text and "matmul(" in text


@pytest.mark.slow
def test_bert_encoder_matches(tmp_path):
    """A BERT encoder (rank-3 linear layers, attention) in standard NNEF; input ids only
    (transformers' padding mask takes a gather_nd, which the standard lacks)."""
    import transformers

    class Ids(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(input_ids=ids, return_dict=False)[0]

    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64,
                                  max_position_embeddings=64, attn_implementation="eager")
    export_khronos(Ids(transformers.BertModel(cfg).eval()), (torch.randint(0, 100, (2, 8)),),
                   tmp_path)


def test_archive_the_parser_refuses_is_not_written(tmp_path, monkeypatch):
    """Without check, a Khronos export is still parsed by nnef.load_graph before it is
    accepted; a refusal names the op and the model's line (the old deconv layout)."""
    from t2n.check.load import LoadRefusedError
    from t2n.targets import capabilities

    monkeypatch.setitem(capabilities.KHRONOS, "deconv", capabilities.FLOAT)  # tract's layout
    out = tmp_path / "m.nnef"
    with pytest.raises(LoadRefusedError) as e:
        t2n.export(TinyUNet().eval(), (torch.randn(1, 3, 16, 16),), str(out), target="khronos")
    assert "filter batch" in str(e.value) and e.value.exit_code == 2
    # the trace records aten::_convolution, torch.export the functional conv_transpose2d
    assert e.value.op in ("aten::_convolution", "aten::conv_transpose2d")
    assert "(deconv)" in str(e.value)
    assert "test_khronos.py" in e.value.where  # self.u2's line
    assert list(tmp_path.iterdir()) == []
