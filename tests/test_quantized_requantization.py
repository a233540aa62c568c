"""The requantization of quantized convolutions and linear layers at rounding ties: the x86
engine runs fbgemm's float steps, or oneDNN's on a CPU with AVX-512 VNNI (symmetric weights,
at most 100 groups; the order of the scale products per kernel), and t2n asks the running
torch which (t2n/mappings/helpers/requantization.py). Each test places one output per
channel on a tie in exact arithmetic, where the forms round differently, and compares
every integer tract computes with PyTorch's."""

import warnings

import numpy as np
import pytest
import torch
import torch.ao.nn.intrinsic.quantized as nniq
import torch.ao.nn.quantized as nnq

import t2n
from t2n.check.tract_runner import run_in_tract
from t2n.mappings.helpers import requantization as rq

warnings.filterwarnings("ignore", message=".*quantiz.*")

X_SCALE, X_ZP, OUT_SCALE, OUT_ZP = 0.0371, 61, 0.0923, 67

# name: (module class, in channels, out channels, kernel, groups, bias, input spatial size);
# per-channel symmetric weights unless the name says "per-tensor" (zero point: WEIGHT_ZP)
LAYERS = {
    "3x3": (nnq.Conv2d, 16, 32, 3, 1, True, (12, 12)),
    "1x1": (nnq.Conv2d, 16, 64, 1, 1, True, (12, 12)),
    "depthwise": (nnq.Conv2d, 32, 32, 3, 32, True, (12, 12)),  # oneDNN on VNNI
    "depthwise 128": (nnq.Conv2d, 128, 128, 3, 128, True, (8, 8)),  # fbgemm's own kernel
    "3x3 relu no bias": (nniq.ConvReLU2d, 16, 32, 3, 1, False, (12, 12)),
    "3d": (nnq.Conv3d, 4, 16, 3, 1, True, (6, 6, 6)),
    "linear": (nnq.Linear, 64, 48, None, 1, True, ()),
    "linear per-tensor": (nnq.Linear, 64, 48, None, 1, True, ()),  # fbgemm's fused bias
    "3x3 per-tensor": (nnq.Conv2d, 16, 32, 3, 1, True, (12, 12)),
    "3x3 per-tensor zero point 3": (nnq.Conv2d, 16, 32, 3, 1, True, (12, 12)),  # fbgemm
}


class _OnQuantized(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        q = torch.quantize_per_tensor(x, X_SCALE, X_ZP, torch.quint8)
        return torch.dequantize(self.layer(q))


def _layer_at_ties(name, gen):
    """A quantized layer with symmetric per-channel weights and a u8 input whose exact
    requantized values lie on ties (x.5): each channel's bias, or without one its weight
    scale, set from one of its sums."""
    cls, cin, cout, k, groups, has_bias, spatial = LAYERS[name]
    linear = k is None
    w_shape = (cout, cin) if linear else (cout, cin // groups) + (k,) * len(spatial)
    per_tensor = "per-tensor" in name
    w_zp = 3 if "zero point 3" in name else 0
    w_int = torch.randint(-127, 125, w_shape, generator=gen) + w_zp
    x_int = torch.randint(0, 128, (2, cin) + spatial, generator=gen)
    xd, wd = (x_int - X_ZP).double(), (w_int - w_zp).double()
    if linear:
        acc = (xd @ wd.t()).t().reshape(cout, -1)
    else:
        conv = torch.nn.functional.conv2d if len(spatial) == 2 else torch.nn.functional.conv3d
        acc = conv(xd, wd, None, 1, k // 2, 1, groups).transpose(0, 1).reshape(cout, -1)
    acc0 = acc.gather(1, torch.argmax((acc > 0).double(), 1, keepdim=True))[:, 0]
    half = torch.randint(1, 40, (cout,), generator=gen).double() + 0.5
    ws = 0.002 + 0.01 * torch.rand(cout, generator=gen, dtype=torch.float64)
    if per_tensor:
        ws = torch.full((cout,), float(ws[0]), dtype=torch.float64)
    bias = (half * OUT_SCALE - acc0 * X_SCALE * ws).float() if has_bias else None
    if not has_bias:
        ws = half * OUT_SCALE / (acc0 * X_SCALE)
    wq = torch._make_per_tensor_quantized_tensor(w_int.to(torch.int8), float(ws[0]), w_zp) \
        if per_tensor else torch._make_per_channel_quantized_tensor(
            w_int.to(torch.int8), ws, torch.full((cout,), w_zp, dtype=torch.long), 0)
    if linear:
        layer = cls(cin, cout)
    else:
        layer = cls(cin, cout, k, padding=k // 2, groups=groups, bias=has_bias)
    layer.set_weight_bias(wq, bias)
    layer.scale, layer.zero_point = OUT_SCALE, OUT_ZP
    x = ((x_int - X_ZP).float() * X_SCALE).reshape((2, cin) + spatial)
    if linear:
        x = x.reshape(2, cin)
    return layer, x, ws.float(), bias


@pytest.mark.parametrize("name", list(LAYERS))
def test_x86_requantization_at_ties_equals_pytorch(tmp_path, name):
    """Every integer equal to PyTorch's, whichever kernel the x86 engine runs here; and the
    data separates fbgemm's form from oneDNN's (and, for the per-tensor linear layer, from
    its fused bias): a lowering with another form's steps differs from PyTorch on it."""
    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = "x86"
    try:
        gen = torch.Generator().manual_seed(7)
        layer, x, ws, bias = _layer_at_ties(name, gen)
        model = _OnQuantized(layer).eval()
        out = tmp_path / "q.nnef.tar"
        r = t2n.export(model, (x,), out, check=True)
        assert r.passed
        got, want = run_in_tract(str(out), [x.numpy()])[0], model(x).numpy()
        assert np.array_equal(got, want), (name, int((got != want).sum()))
        # the forms differ on these sums (the layout of x does not matter here)
        q = torch.quantize_per_tensor(x, X_SCALE, X_ZP, torch.quint8).int_repr().double()
        acc = _exact_sums(layer, q - X_ZP)
        forms = {f: rq.apply(rq.requantization(f, ws, X_SCALE, bias, OUT_SCALE, OUT_ZP),
                             acc, 1 if acc.dim() > 2 else -1) for f in rq.FORMS}
        assert not torch.equal(forms["fbgemm"], forms[
            "onednn two_step x_scale:reciprocal out_inverse:reciprocal"])
        if name == "linear per-tensor":
            assert not torch.equal(forms["fbgemm"], forms["fbgemm fma"])
    finally:
        torch.backends.quantized.engine = old


def _exact_sums(layer, xd):
    wq = layer.weight()
    zp = wq.q_zero_point() if wq.qscheme() == torch.per_tensor_affine \
        else wq.q_per_channel_zero_points().reshape([-1] + [1] * (wq.dim() - 1))
    w = wq.int_repr().double() - zp
    if xd.dim() == 2:
        return xd @ w.t()
    conv = torch.nn.functional.conv2d if xd.dim() == 4 else torch.nn.functional.conv3d
    return conv(xd, w, None, layer.stride, layer.padding, layer.dilation, layer.groups)


def test_the_probe_names_a_form_for_each_layer_here():
    """The running torch's kernels match one of the known forms for each test layer (a
    kernel matching none would make the export refuse the layer)."""
    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = "x86"
    try:
        for name, (cls, cin, cout, k, groups, has_bias, spatial) in LAYERS.items():
            layer, x, _, _ = _layer_at_ties(name, torch.Generator().manual_seed(7))
            kind = "linear" if k is None else "conv"
            form = rq.requantization_form(
                kind, layer.weight(), has_bias, getattr(layer, "stride", ()),
                getattr(layer, "padding", ()), getattr(layer, "dilation", ()), groups,
                tuple(x.shape), torch.quint8, cls is nniq.ConvReLU2d)
            assert form in rq.FORMS, name
    finally:
        torch.backends.quantized.engine = old


@pytest.mark.parametrize("name", [n for n in LAYERS if n != "3d"])  # qnnpack: 2-d convs
def test_qnnpack_requantization_at_ties_equals_pytorch(tmp_path, name):
    """qnnpack's steps: the bias quantized by PyTorch's own quantize_per_channel (or
    _per_tensor) with the double scales ``w_scale * x_scale``, and the multiplier ``(w_scale
    * x_scale) * (1 / out_scale)``. On these tie-placed layers, dividing by the output scale
    or rounding ``bias / scale`` in float32 instead (t2n's steps before) differs from PyTorch
    (3 seeds per layer; 1-7 integers of a layer moved)."""
    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = "qnnpack"
    try:
        for seed in (7, 8, 9):
            layer, x, _, _ = _layer_at_ties(name, torch.Generator().manual_seed(seed))
            model = _OnQuantized(layer).eval()
            out = tmp_path / f"q{seed}.nnef.tar"
            t2n.export(model, (x,), out, capture="trace")
            got, want = run_in_tract(str(out), [x.numpy()])[0], model(x).numpy()
            assert np.array_equal(got, want), (name, seed, int((got != want).sum()))
    finally:
        torch.backends.quantized.engine = old


@pytest.mark.parametrize("engine_name", ["x86", "qnnpack"])
@pytest.mark.parametrize("relu", [False, True])
def test_quantized_batch_norm_equals_pytorch(tmp_path, engine_name, relu):
    """quantized::batch_norm2d(_relu) as PyTorch's kernel computes it: alpha and beta in its
    float/double steps, then fma(alpha, q - zp, beta) rounded half to even. Every integer of
    each of 64 channels; on these parameters (seed 21) computing ``(q - zp) * scale * w /
    sigma + b`` and requantizing, t2n's form before, gives one integer otherwise (DenseNet-121's
    quantized BN-ReLU layers: 40 of 351 k)."""
    import torch.ao.nn.intrinsic.quantized as nniq_bn
    import torch.ao.nn.quantized as nnq_bn

    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine_name
    try:
        torch.manual_seed(21)
        bn = nniq_bn.BNReLU2d(64) if relu else nnq_bn.BatchNorm2d(64)
        with torch.no_grad():
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.normal_(0, 0.1)
            bn.running_mean.normal_(0, 0.3)
            bn.running_var.uniform_(0.5, 1.5)
            bn.scale.fill_(0.0371)
            bn.zero_point.fill_(117)
        model = _OnQuantized(bn).eval()
        ints = torch.arange(256).reshape(1, 1, 16, 16).expand(1, 64, 16, 16)
        x = (ints - X_ZP).float() * X_SCALE
        out = tmp_path / "bn.nnef.tar"
        t2n.export(model, (x,), out, capture="trace")
        got, want = run_in_tract(str(out), [x.numpy()])[0], model(x).numpy()
        assert np.array_equal(got, want), (engine_name, relu, int((got != want).sum()))
        inv = torch.rsqrt(bn.running_var.double() + bn.eps)
        a = (bn.weight.double() * inv).float().reshape(1, -1, 1, 1)
        b = (bn.bias.double() - bn.running_mean.double() * bn.weight.double() * inv).float()
        plain = torch.round(((ints.float() - X_ZP) * X_SCALE * a + b.reshape(1, -1, 1, 1))
                            * torch.tensor(1 / 0.0371)) + 117
        plain = (plain.clamp(0, 255) - 117) * 0.0371
        if not relu:  # the integer that differs is negative: the ReLU hides it
            assert not torch.equal(plain.float(), torch.from_numpy(want))
    finally:
        torch.backends.quantized.engine = old


# (scale, zero point) of the two inputs and the output: parameters where the two ways of
# dequantizing give another integer for one of the 65,536 pairs
ADD = ((0.07965049147605896, 212), (0.10142746567726135, 68), (0.10351036489009857, 113))


class _QuantizedAdd(torch.nn.Module):
    def __init__(self, relu):
        super().__init__()
        self.add = nnq.QFunctional()
        self.add.scale, self.add.zero_point = ADD[2]
        self.relu = relu

    def forward(self, a, b):
        qa = torch.quantize_per_tensor(a, *ADD[0], torch.quint8)
        qb = torch.quantize_per_tensor(b, *ADD[1], torch.quint8)
        y = self.add.add_relu(qa, qb) if self.relu else self.add.add(qa, qb)
        return torch.dequantize(y)


@pytest.mark.parametrize("relu", [False, True])
def test_quantized_add_dequantizes_as_pytorchs_vectors(tmp_path, relu):
    """quantized::add(_relu) on every pair of input integers: PyTorch's x86 kernel
    dequantizes each input with fma(q, scale, scale * -zero_point), which t2n computes
    exactly in float32 (helpers/quantized_tensors.py); ``(q - zero_point) * scale``
    (t2n's form before) gives other integers on this data."""
    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = "x86"
    try:
        ia = torch.arange(256).repeat_interleave(256).reshape(1, 1, 256, 256)
        ib = torch.arange(256).repeat(256).reshape(1, 1, 256, 256)
        (sa, za), (sb, zb), (so, zo) = ADD
        a, b = (ia - za).float() * sa, (ib - zb).float() * sb
        model = _QuantizedAdd(relu).eval()
        out = tmp_path / "add.nnef.tar"
        t2n.export(model, (a, b), out, capture="trace")
        got, want = run_in_tract(str(out), [a.numpy(), b.numpy()])[0], model(a, b).numpy()
        assert np.array_equal(got, want), (relu, int((got != want).sum()))
        f32 = torch.float32
        plain = (ia - za).to(f32) * sa + (ib - zb).to(f32) * sb
        plain = torch.round(plain * torch.tensor(1 / so, dtype=f32)) + zo
        plain = (plain.clamp(zo if relu else 0, 255) - zo) * torch.tensor(so, dtype=f32)
        assert not torch.equal(plain.to(f32), torch.from_numpy(want))
    finally:
        torch.backends.quantized.engine = old
