"""Models quantized with torchao's PyTorch 2 export flow (``prepare_pt2e`` / ``convert_pt2e``)
exported and run in tract: ``X86InductorQuantizer`` (static, per-channel weights; dynamic)
and ``XNNPACKQuantizer`` (static per-tensor and per-channel; dynamic) on a ResNet-style CNN,
a MobileNet-style CNN and an MLP. The converted model is an exported program's module
(``train()``/``eval()`` refuse), its weights int8 tensors dequantized in the graph: the
archive stores them as int8 (at most 0.4 of the float archive's bytes) and tract's outputs
match the quantized model's within the check's policy (one quantization step on outputs
dequantized from integers, t2n/mappings/quantized_pt2e.py)."""

import warnings

import pytest
import torch
from torch import nn
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86
from torchao.testing.pt2e._xnnpack_quantizer import (XNNPACKQuantizer,
                                                     get_symmetric_quantization_config)

import t2n
from t2n.archive_info import inspect_archive
from t2n.testing import FunctionModule, assert_exports
from fixtures.models import InvertedResidual, _seeded, make_mlp

warnings.filterwarnings("ignore", message=".*XNNPACKQuantizer is deprecated.*")


# pt2e quantizers find their patterns by the module that made each op: a module instance
# called twice (the fixtures' BasicBlock calls its one ``self.relu`` twice, DepthwiseSeparable
# its ``self.act``) makes torchao 0.18's X86InductorQuantizer fail ("Input partition has more
# than one output node"). These blocks call each activation module once.
class Block(nn.Module):
    """ResNet's basic block: two 3x3 convolutions with BN, the identity or a strided 1x1
    projection added, ReLU."""

    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False),
                                  nn.BatchNorm2d(c_out), nn.ReLU(),
                                  nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(c_out))
        self.skip = nn.Identity() if stride == 1 and c_in == c_out else nn.Sequential(
            nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
        self.out = nn.ReLU()

    def forward(self, x):
        return self.out(self.body(x) + self.skip(x))


class ResNetStyle(nn.Module):
    """A stem, two basic blocks (one strided, with its projection), pooling, a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32),
                                  nn.ReLU())
        self.blocks = nn.Sequential(Block(32, 32, 1), Block(32, 64, 2))
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


class MobileNetStyle(nn.Module):
    """A hardswish stem, two of the fixtures' inverted residuals (depthwise 3x3 convolutions,
    ReLU6; one strided, one with its residual add), pooling, a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32),
                                  nn.Hardswish())
        self.blocks = nn.Sequential(InvertedResidual(32, 64, 2, 4),
                                    InvertedResidual(64, 64, 1, 4))
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


def _x86(dynamic=False):
    q = x86.X86InductorQuantizer()
    return q.set_global(x86.get_default_x86_inductor_quantization_config(is_dynamic=dynamic))


def _xnnpack(per_channel=True, dynamic=False):
    return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(
        is_per_channel=per_channel, is_dynamic=dynamic))


QUANTIZERS = {
    "x86-static": lambda: _x86(),
    "x86-dynamic": lambda: _x86(dynamic=True),
    "xnnpack-per-tensor": lambda: _xnnpack(per_channel=False),
    "xnnpack-per-channel": lambda: _xnnpack(),
    "xnnpack-dynamic": lambda: _xnnpack(dynamic=True),
}
# the layers whose weights each quantizer makes int8
QUANTIZED = {q: (nn.Conv2d, nn.Linear) for q in QUANTIZERS}
QUANTIZED["xnnpack-dynamic"] = (nn.Linear,)
MODELS = {
    "resnet": (lambda: _seeded(0, ResNetStyle), (2, 3, 24, 24)),
    "mobilenet": (lambda: _seeded(0, MobileNetStyle), (1, 3, 32, 32)),
    "mlp": (lambda: make_mlp(64, 256), (4, 1, 8, 8)),
    "relu-mlp": (lambda: _seeded(0, lambda: nn.Sequential(
        nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
        nn.Linear(256, 10))), (4, 1, 8, 8)),
}
# (model, quantizer, capture): XNNPACK's dynamic config quantizes linear layers only
# (the LayerNorm MLP under x86-dynamic: see docs/quantized.md, a last-bit difference of tract's
# layer norm can move one integer of the next layer's run-time quantization)
CASES = [("resnet", q, "export") for q in QUANTIZERS if q != "xnnpack-dynamic"] + \
    [("mlp", q, "export") for q in QUANTIZERS if q != "x86-dynamic"] + \
    [("relu-mlp", "x86-dynamic", "export")] + \
    [("mobilenet", "x86-static", "export"), ("mobilenet", "xnnpack-per-channel", "export"),
     ("resnet", "x86-static", "trace"), ("mlp", "xnnpack-dynamic", "trace")]


def pt2e_quantized(model, shape, quantizer, calibration=4, seed=0):
    """torchao's pt2e recipe: export, prepare, calibrate, convert."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen)
    prepared = prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
    for _ in range(calibration):
        prepared(torch.randn(*shape, generator=gen))
    return convert_pt2e(prepared), x


def _export(model, x, path, **kw):
    return t2n.export(model, (x,), path, check=True, **kw)


@pytest.mark.parametrize("name,quantizer,capture", CASES)
def test_pt2e_quantized_model_stores_int8_and_checks(name, quantizer, capture, tmp_path):
    build, shape = MODELS[name]
    model = build()
    qmodel, x = pt2e_quantized(model, shape, QUANTIZERS[quantizer]())
    with pytest.raises(NotImplementedError):
        qmodel.eval()  # an exported program's module: t2n must not need eval()
    quantized = _export(qmodel, x, tmp_path / "q.nnef", capture=capture)
    assert all(c.ok for c in quantized.checks), [c.line() for c in quantized.checks]
    hist = quantized.op_histogram
    # activations rounded and clamped to integers in the graph (round half to even by two
    # float32 additions: t2n/mappings/helpers/round_by_adds.py)
    assert hist.get("t2n_clamp", 0) >= 1, str(sorted(hist.items()))
    assert hist.get("tract_core_cast", 0) >= 2, str(sorted(hist.items()))
    if "dynamic" in quantizer:  # the scale and zero point computed from each input
        assert hist.get("min_reduce", 0) >= 1 and hist.get("max_reduce", 0) >= 1, hist
    stored = inspect_archive(str(tmp_path / "q.nnef"), macs=False).by_format()
    assert stored["i8"]["params"] >= 0.9 * sum(
        m.weight.numel() for m in model.modules() if isinstance(m, QUANTIZED[quantizer])), stored
    floating = t2n.export(model, (x,), tmp_path / "f.nnef")
    ratio = quantized.archive_bytes / floating.archive_bytes
    assert ratio <= 0.4, (name, quantizer, ratio)


def test_check_accepts_one_step_carried_to_the_float_output(monkeypatch, tmp_path):
    """X86InductorQuantizer leaves the classifier's output float: the check's tolerance on it
    is one step of the classifier's dequantized input through its largest weight (the
    quantization steps t2n/walk/quant_steps.py carries), no more."""
    from t2n.check import verify

    build, shape = MODELS["resnet"]
    qmodel, x = pt2e_quantized(build(), shape, QUANTIZERS["x86-static"]())
    linear = next(n for n in qmodel.graph.nodes if n.target == torch.ops.aten.linear.default)
    dq_x, dq_w = linear.args[0], linear.args[1]

    def value(a):
        return getattr(qmodel, a.target) if isinstance(a, torch.fx.Node) else a

    weight = dq_w.target(*[value(a) for a in dq_w.args])
    expected = dq_x.args[1] * float(weight.abs().max())
    seen = {}
    real = verify.quantization_steps

    def spy(session, names, handles):
        seen.update(real(session, names, handles))
        return seen

    monkeypatch.setattr(verify, "quantization_steps", spy)
    _export(qmodel, x, tmp_path / "q.nnef")
    assert seen == {"output_0": pytest.approx(expected * (1 + 1e-5), rel=1e-6)}, (seen, expected)


@pytest.mark.parametrize("name,quantizer", [("resnet", "x86-static"),
                                            ("mlp", "xnnpack-dynamic")])
def test_pt2e_quantized_model_with_a_dynamic_batch(name, quantizer):
    build, shape = MODELS[name]
    qmodel, x = pt2e_quantized(build(), shape, QUANTIZERS[quantizer]())
    other = torch.randn(5, *shape[1:], generator=torch.Generator().manual_seed(1))
    assert_exports(qmodel, (x,), capture="export", input_names=["x"],
                   dynamic_axes={"x": {0: "B"}}, more_args=[(other,)])


# ---------------------------------------------------------------------------- the ops alone
class QuantizeOps(nn.Module):
    """Each quantized_decomposed op on run-time inputs, its integers returned (compared
    exactly): per-tensor with fixed parameters, per-channel along axis 1, and run-time
    parameters (affine u8, symmetric i8) as dynamic quantization computes them."""

    def __init__(self):
        super().__init__()
        import torch.ao.quantization.fx._decomposed  # noqa: F401  (declares the ops)

        self.register_buffer("scales", torch.tensor([0.02, 0.05, 0.013]))
        self.register_buffer("zero_points", torch.tensor([3, -7, 0]))

    def forward(self, x):
        ops = torch.ops.quantized_decomposed
        eps = torch.finfo(torch.float32).eps
        q1 = ops.quantize_per_tensor(x, 0.037, 101, 0, 255, torch.uint8)
        q2 = ops.quantize_per_channel(x, self.scales, self.zero_points, 1, -128, 127,
                                      torch.int8)
        q5 = ops.quantize_per_channel(x, self.scales.double() / 3, self.zero_points, 1, 0,
                                      255, torch.uint8)  # float64 scales: computed in it
        s, z = ops.choose_qparams.tensor(x, 0, 255, eps, torch.uint8)
        q3 = ops.quantize_per_tensor.tensor(x, s, z, 0, 255, torch.uint8)
        ss, zs = ops.choose_qparams_symmetric.tensor(x, -128, 127, eps, torch.int8)
        q4 = ops.quantize_per_tensor.tensor(x, ss, zs, -128, 127, torch.int8)
        d = ops.dequantize_per_tensor.tensor(q3, s, z, 0, 255, torch.uint8) + \
            ops.dequantize_per_channel(q2, self.scales, self.zero_points, 1, -128, 127,
                                       torch.int8)
        return q1, q2, q3, q4, q5, s, z, d


@pytest.mark.parametrize("capture", ["export", "trace"])
def test_quantize_ops_give_pytorchs_integers(capture):
    x = torch.randn(4, 3, 5, 6, generator=torch.Generator().manual_seed(0)) * 3
    assert_exports(QuantizeOps(), (x,), capture=capture, input_names=["x"],
                   dynamic_axes={"x": {0: "B"}}, more_args=[(torch.rand(2, 3, 5, 6) * 9 - 1,)])


def test_float64_per_channel_quantization_rounds_ties_to_even():
    """float64 scales: PyTorch computes in float64, which tract's round_even does not take
    (t2n rounds from the floor); halves go to the even integer."""
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (declares the ops)

    def quantize(x):
        ops = torch.ops.quantized_decomposed
        return ops.quantize_per_channel(x, torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64),
                                        torch.tensor([0, 1, -1]), 1, -128, 127, torch.int8)

    x = (torch.arange(-12, 12, dtype=torch.float32) + 0.5).reshape(2, 3, 4)
    assert_exports(FunctionModule(quantize), (x,), fresh_inputs=False)
