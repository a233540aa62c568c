"""PyTorch-quantized models (torch.ao eager, FX, dynamic, QDQ) computed in int8 by tract:
tract_core_qconv for convolutions and linear layers; outputs within one quantization step
of PyTorch's quantized model."""

import copy
import warnings

import pytest
import torch
import torch.ao.quantization as tq
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

import t2n
from t2n.api import check_archive
from t2n.mappings.helpers import requantization as rq

warnings.filterwarnings("ignore", message=".*torchao.*")
warnings.filterwarnings("ignore", message=".*migrat.*")


@pytest.fixture(params=["x86", "qnnpack"])
def engine(request):
    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = request.param
    yield request.param
    torch.backends.quantized.engine = old


class EagerNet(torch.nn.Module):
    """QuantStub, conv+relu, conv+bn, FloatFunctional add_relu, max/adaptive pools, linear."""

    def __init__(self):
        super().__init__()
        self.q, self.dq = tq.QuantStub(), tq.DeQuantStub()
        self.c1, self.r1 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()
        self.c2, self.bn = torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.c3 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2)
        self.add = torch.nn.quantized.FloatFunctional()
        self.cat = torch.nn.quantized.FloatFunctional()
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(24, 4)

    def forward(self, x):
        x = self.q(x)
        y = self.r1(self.c1(x))
        y = self.add.add_relu(y, self.bn(self.c2(y)))
        z = self.c3(y)
        y = torch.nn.functional.max_pool2d(y, 2)
        y = self.cat.cat([y, z], 1)
        return self.dq(self.fc(self.pool(y).flatten(1)))


def _calibrated(prepared, shape, n=6):
    with torch.no_grad():
        for _ in range(n):
            prepared(torch.randn(*shape))
    return prepared


def _eager_int8(engine, per_channel=True):
    torch.manual_seed(0)
    m = EagerNet().eval()
    m.qconfig = tq.get_default_qconfig(engine) if per_channel else tq.QConfig(
        activation=tq.HistogramObserver.with_args(reduce_range=engine == "x86"),
        weight=tq.default_weight_observer)
    tq.fuse_modules(m, [["c1", "r1"], ["c2", "bn"]], inplace=True)
    return tq.convert(_calibrated(tq.prepare(m), (2, 3, 8, 8)))


def _assert_int8(result, grouped=0):
    """int8 products in tract's qconv; a grouped convolution's exact integer sums in its
    float conv (``grouped`` of them); no product of dequantized floats left."""
    ops = result.op_histogram
    assert ops.get("tract_core_qconv", 0) >= 1, ops
    assert ops.get("conv", 0) == grouped and "matmul" not in ops, ops


@pytest.mark.parametrize("per_channel", [True, False])
def test_eager_static_conv_net(tmp_path, engine, per_channel):
    qm = _eager_int8(engine, per_channel)
    x = torch.randn(2, 3, 8, 8)
    # qnnpack: its convolutions and linear layers are reproduced to the integer (their int32
    # bias and float32 multiplier), but two of its kernels are not yet: the global average
    # pool's requantization (1 step in ~1/1000 outputs) and a requantizing cat at exact ties
    # (1 step: tract re-associates the dequantize and requantize multiplies); the linear
    # layer after them turns one step into up to 4 of the output (measured on 20 inputs).
    near = {"atol": 5 * qm.fc.scale} if engine == "qnnpack" else {}
    r = t2n.export(qm, (x,), tmp_path / "q.nnef.tgz", check=True, **near)
    assert r.passed
    # the two 3x3 convs; c3 (groups=2) sums its integers in a float conv, the linear
    # layer (24 input features) in a float product (helpers/grouped_int8.py)
    assert r.op_histogram["tract_core_qconv"] == 2
    assert r.op_histogram["tract_core_einsum"] == 1, r.op_histogram
    _assert_int8(r, grouped=1)
    # saturating inputs too. x86 runs per-tensor convolutions through oneDNN, whose own
    # requantization rounds differently in a few places: those LSB differences compound
    # over the layers to about two steps of the output (per-channel goes through fbgemm,
    # whose rounding t2n follows exactly)
    loose = engine == "x86" and not per_channel
    step = qm.fc.scale * (1 + 1e-5)  # one step of the dequantized output, as export allows
    assert all(c.ok for c in check_archive(str(tmp_path / "q.nnef.tgz"), qm,
                                           (torch.randn(2, 3, 8, 8) * 3,), ["output_0"],
                                           atol=3 * qm.fc.scale if loose else step))


class FxNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(16)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1, groups=4)
        self.c3 = torch.nn.Conv2d(16, 8, 1)
        self.fc = torch.nn.Linear(24 * 4, 10)

    def forward(self, x):
        y = torch.relu(self.bn1(self.c1(x)))
        y = y + torch.nn.functional.hardswish(self.c2(y))
        y = torch.cat([self.c3(y), y], 1)
        y = torch.nn.functional.avg_pool2d(y, 4)
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(y, 2).flatten(1))


def test_fx_static_net(tmp_path, engine):
    torch.manual_seed(0)
    ex = (torch.randn(2, 3, 16, 16),)
    p = prepare_fx(FxNet().eval(), tq.get_default_qconfig_mapping(engine), ex)
    q = convert_fx(_calibrated(p, (2, 3, 16, 16)))
    r = t2n.export(q, ex, tmp_path / "fx.nnef", check=True)
    assert r.passed
    _assert_int8(r, grouped=1)  # c2, groups=4


def test_dynamic_linear(tmp_path, engine):
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, 8)).eval()
    dq = tq.quantize_dynamic(copy.deepcopy(mlp), {torch.nn.Linear}, dtype=torch.qint8)
    x = torch.randn(3, 5, 32)
    r = t2n.export(dq, (x,), tmp_path / "dyn.nnef", check=True, input_names=["x"],
                   dynamic_axes={"x": {0: "B"}})
    assert r.passed and r.op_histogram["tract_core_einsum_q"] == 2
    other = torch.zeros(7, 5, 32)  # a zero input: PyTorch's scale 0.1 rule
    other[0, 0, 0] = 4.0
    assert all(c.ok for c in check_archive(str(tmp_path / "dyn.nnef"), dq, (other,),
                                           ["output_0"]))


class _DynamicLinear(torch.nn.Module):
    """``quantized::linear(_relu)_dynamic`` with an explicit ``reduce_range`` (the module
    of quantize_dynamic always passes True)."""

    def __init__(self, packed, reduce_range, relu):
        super().__init__()
        self.packed, self.reduce_range, self.relu = packed, reduce_range, relu

    def forward(self, x):
        op = torch.ops.quantized.linear_relu_dynamic if self.relu else \
            torch.ops.quantized.linear_dynamic
        return op(x, self.packed, self.reduce_range)


@pytest.mark.parametrize("reduce_range", [True, False])
def test_dynamic_linear_equals_pytorch_bit_for_bit(tmp_path, engine, reduce_range):
    """The run-time quantization (f64 multiply-add, rounding by adding and subtracting
    1.5 * 2^23, saturating u8 cast), the int8 product and the engine's scaling
    (fbgemm: fma(acc, x_scale * w_scale, bias); qnnpack: the product, then the bias) give
    PyTorch's floats exactly: per tensor and per channel, with and without bias and relu,
    batch and sequence axes, an input of one sign (zero point 0 or qmax), sums beyond
    2^24 (1100 features: rounded to f32 first) and a width of 1024 (split in two)."""
    import numpy as np

    from t2n.check.tract_runner import run_in_tract

    torch.manual_seed(0)
    cases = [((64, 256), 1024, False, True, True), ((2, 33, 70), 48, True, False, False),
             ((3, 1, 5, 17), 40, False, True, True), ((1, 1100), 40, True, True, False)]
    for shape, n, per_channel, bias, relu in cases:
        qconfig = tq.per_channel_dynamic_qconfig if per_channel else tq.default_dynamic_qconfig
        dq = tq.quantize_dynamic(torch.nn.Sequential(torch.nn.Linear(shape[-1], n, bias=bias)),
                                 {torch.nn.Linear: qconfig}, dtype=torch.qint8)
        model = _DynamicLinear(dq[0]._packed_params._packed_params, reduce_range, relu).eval()
        out = tmp_path / "d.nnef.tar"
        t2n.export(model, (torch.randn(*shape),), out)
        for k in range(5):
            x = torch.randn(*shape) * (0.2 if k == 0 else 3)
            x = x.abs() + 1 if k == 2 else -x.abs() - 0.5 if k == 3 else x
            x = _near_rounding_ties(shape, reduce_range and engine != "qnnpack") if k == 4 else x
            got = run_in_tract(str(out), [x.numpy()])[0]
            assert np.array_equal(got, model(x).numpy()), (shape, n, per_channel, k)


def _near_rounding_ties(shape, reduce_range):
    """An input of range -1 .. 2 whose other values sit one or two float32 steps from a
    rounding tie of its quantization, where fbgemm's fused multiply-add (torch 2.13) and the
    product rounded before the zero point is added (torch 2.14) give different integers for
    about one value in ten."""
    qmax = 127 if reduce_range else 255
    scale = torch.tensor(3.0 / qmax, dtype=torch.float32)
    zp = round(1.0 / (3.0 / qmax))
    j = torch.randint(1, qmax - 1, shape, dtype=torch.float64)
    nudge = torch.tensor([1, -1, 2, -2], dtype=torch.float32)[torch.randint(0, 4, shape)]
    x = ((j - zp + 0.5) * float(scale)).to(torch.float32) * (1 + nudge * 2.0 ** -23)
    x = x.clamp(-0.99, 1.99).reshape(-1)
    x[0], x[-1] = -1.0, 2.0
    return x.reshape(shape)


def test_qdq_pattern_around_float_ops(tmp_path):
    class QDQ(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)

        def forward(self, x):
            x = torch.dequantize(torch.quantize_per_tensor(x, 0.05, 128, torch.quint8))
            y = torch.tanh(self.lin(x))
            return torch.dequantize(torch.quantize_per_tensor(y, 1 / 127, 0, torch.qint8))

    torch.manual_seed(0)
    r = t2n.export(QDQ().eval(), (torch.randn(4, 16) * 4,), tmp_path / "qdq.tgz", check=True)
    assert r.passed


class _Recurrent(torch.nn.Module):
    """quantize_dynamic swaps the recurrent layers of a model (a bare nn.LSTM given to it
    is returned as it is, in float)."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16, num_layers=2, bidirectional=True, batch_first=True)
        self.gru = torch.nn.GRU(32, 16)
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):
        y, _ = self.lstm(x)
        y, h = self.gru(y.transpose(0, 1))
        return self.fc(y), h


def _graph_text(path):
    import tarfile

    with tarfile.open(path) as tar:
        return tar.extractfile("graph.nnef").read().decode()


def test_dynamic_lstm_and_gru_run_in_int8(tmp_path, engine):
    """quantized_lstm / quantized_gru: the scan-based layers with int8 products, the input
    quantized once per call for the input projection and each direction's state at every
    step (its own range), as PyTorch's dynamic cells do. On x86 the same model has its GRU
    and head quantized to float16 instead (float products of the f16-rounded weights, so
    the GRU is a float one: tract's GruSeq)."""
    torch.manual_seed(0)
    int8, fp16 = tq.default_dynamic_qconfig, tq.float16_dynamic_qconfig
    spec = {torch.nn.LSTM: int8, torch.nn.GRU: int8} if engine == "qnnpack" else \
        {torch.nn.LSTM: int8, torch.nn.GRU: fp16, torch.nn.Linear: fp16}
    dq = tq.quantize_dynamic(_Recurrent().eval(), spec)
    r = t2n.export(dq, (torch.randn(2, 7, 8) * 3,), tmp_path / "l.tgz", check=True)
    # an f16-dynamic GRU runs float products of its rounded weights: tract's fused GruSeq
    loops = {"tract_core_scan": 3} if engine == "qnnpack" else \
        {"tract_core_scan": 2, "tract_core_gru_seq": 1}
    assert r.passed and {k: r.op_histogram.get(k) for k in loops} == loops
    text = _graph_text(tmp_path / "l.tgz")
    # per int8 layer: one input projection for both directions (outside the loop) and one
    # product per direction in the loop body
    assert text.count("tract_core_einsum_q(") == (3 + 5 if engine == "qnnpack" else 2 + 4), text
    if engine == "qnnpack":  # only the float head is a float product
        assert text.count("matmul(") + text.count("tract_core_einsum(") <= 1, text


@pytest.mark.parametrize("per_channel", [True, False])
def test_qnnpack_conv_and_linear_integers_equal_pytorch(tmp_path, per_channel):
    """qnnpack's requantization (int32 bias, one float32 multiplier) to the integer, on
    fresh inputs: the archive's dequantized outputs equal PyTorch's exactly."""
    import numpy as np

    from t2n.check.tract_runner import run_in_tract

    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = "qnnpack"
    try:
        torch.manual_seed(0)
        m = torch.nn.Sequential(tq.QuantStub(), torch.nn.Conv2d(4, 16, 3, padding=1),
                                torch.nn.Flatten(), torch.nn.Linear(16 * 36, 8),
                                tq.DeQuantStub()).eval()
        m.qconfig = tq.get_default_qconfig("qnnpack") if per_channel else tq.QConfig(
            activation=tq.HistogramObserver, weight=tq.default_weight_observer)
        qm = tq.convert(_calibrated(tq.prepare(m), (4, 4, 6, 6)))
        out = tmp_path / "q.nnef.tar"
        t2n.export(qm, (torch.randn(2, 4, 6, 6),), out)
        for k in range(8):
            x = torch.randn(2, 4, 6, 6) * (1 + k % 3)
            got = run_in_tract(str(out), [x.numpy()])[0]
            assert np.array_equal(got, qm(x).numpy()), (per_channel, k)
    finally:
        torch.backends.quantized.engine = old


def test_quantize_per_tensor_rounds_as_fbgemm(tmp_path):
    """quantize_per_tensor on x86, whatever the engine: the product by ``1.f / scale``, with
    the zero point added inside the rounding (fbgemm's fused multiply-add, torch <= 2.13) or
    after it (torch 2.14), as the running torch does (helpers/quantize_rounding.py). The two
    differ on 5 of these 2 M values: both versions compare every integer."""
    import numpy as np

    from t2n.check.tract_runner import run_in_tract

    class Q(torch.nn.Module):
        def forward(self, x):
            return torch.dequantize(torch.quantize_per_tensor(x, 0.0371, 57, torch.quint8))

    torch.manual_seed(0)
    x = torch.randn(2, 1000, 1000) * 3
    out = tmp_path / "q.nnef.tar"
    t2n.export(Q().eval(), (x,), out)
    assert np.array_equal(run_in_tract(str(out), [x.numpy()])[0], Q()(x).numpy())


class _Bottleneck(torch.nn.Module):
    """A ResNet bottleneck: conv-bn-relu twice, conv-bn, add the input, relu; then a pooled
    linear head."""

    def __init__(self, c=16):
        super().__init__()
        self.a, self.bna = torch.nn.Conv2d(c, c, 1), torch.nn.BatchNorm2d(c)
        self.b, self.bnb = torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.BatchNorm2d(c)
        self.c, self.bnc = torch.nn.Conv2d(c, c, 1), torch.nn.BatchNorm2d(c)
        self.stem, self.fc = torch.nn.Conv2d(3, c, 3, padding=1), torch.nn.Linear(c, 10)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        y = torch.relu(self.bna(self.a(x)))
        y = torch.relu(self.bnb(self.b(y)))
        y = torch.relu(self.bnc(self.c(y)) + x)
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))


def test_x86_conv_and_linear_integers_equal_pytorch(tmp_path):
    """x86/fbgemm's requantization (float32 sums plus ``bias / (x_scale * w_scale)``, one
    float32 multiplier) to the integer: an FX-quantized bottleneck's outputs equal
    PyTorch's exactly on inputs within the calibrated range (beyond it fbgemm's AVX2
    kernels saturate pairs of products to int16, which t2n does not reproduce)."""
    import numpy as np

    from t2n.check.tract_runner import run_in_tract

    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = "x86"
    try:
        torch.manual_seed(0)
        ex = (torch.randn(2, 3, 16, 16),)
        p = prepare_fx(_Bottleneck().eval(), tq.get_default_qconfig_mapping("x86"), ex)
        q = convert_fx(_calibrated(p, (2, 3, 16, 16), n=8))
        out = tmp_path / "fx.nnef.tar"
        t2n.export(q, ex, out)
        for k in range(8):
            x = torch.randn(2, 3, 16, 16) * 0.8
            assert np.array_equal(run_in_tract(str(out), [x.numpy()])[0], q(x).numpy()), k
    finally:
        torch.backends.quantized.engine = old


_AVERAGES = {
    "avg_pool2d": (4, lambda t: torch.nn.functional.avg_pool2d(t, 2)),
    "avg_pool2d padded": (4, lambda t: torch.nn.functional.avg_pool2d(
        t, 3, 2, padding=1, count_include_pad=False)),
    "adaptive_avg_pool2d global": (4, lambda t: torch.nn.functional.adaptive_avg_pool2d(t, 1)),
    "adaptive_avg_pool2d 2": (4, lambda t: torch.nn.functional.adaptive_avg_pool2d(t, 2)),
    "avg_pool3d": (5, lambda t: torch.nn.functional.avg_pool3d(t, 2)),
    "adaptive_avg_pool3d 2": (5, lambda t: torch.nn.functional.adaptive_avg_pool3d(t, 2)),
    # channels-last global 3-D pool and mean: their ties go either way (not reproduced)
    "adaptive_avg_pool3d global nchw": (5, lambda t: torch.nn.functional.adaptive_avg_pool3d(
        t, 1)),
    "mean nchw": (4, lambda t: t.mean((2, 3), keepdim=True)),
}


@pytest.mark.parametrize("op,layout", [(op, layout) for op in _AVERAGES
                                       for layout in ("nchw", "channels_last")
                                       if layout == "nchw" or not op.endswith(" nchw")])
def test_quantized_averages_round_as_pytorch_at_ties(tmp_path, op, layout, capture):
    """Averages of integers with an odd zero point hit exact ties; PyTorch rounds the
    average or the average minus the zero point depending on the op, the layout (a quantized
    convolution's output is channels-last), the torch version and, on AVX-512, the channel
    (24 channels: 16 in a vector, 8 left over): every value equal."""
    import numpy as np

    from t2n.check.tract_runner import run_in_tract

    rank, fn = _AVERAGES[op]
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}[rank]
    scale, zp = 0.03, 47

    class A(torch.nn.Module):
        def forward(self, x):
            q = torch.quantize_per_tensor(x, scale, zp, torch.quint8)
            if layout == "channels_last":
                q = q.contiguous(memory_format=fmt)
            return torch.dequantize(fn(q))

    ints = torch.randint(0, 256, (2, 24) + (6,) * (rank - 2),
                         generator=torch.Generator().manual_seed(4))
    x = (ints.float() - zp) * scale
    out = tmp_path / "a.nnef.tar"
    t2n.export(A().eval(), (x,), out, capture=capture)  # (the fixture patches t2n.api.export)
    assert np.array_equal(run_in_tract(str(out), [x.numpy()])[0], A()(x).numpy())


class _GroupedNet(torch.nn.Module):
    """Grouped quantized convolutions: depthwise 3x3 (1-D, 2-D and 3-D), 2 groups strided
    and dilated, and 2 groups of 520 channels whose float sums could leave float32's exact
    integers once its weights are pushed to +-127 (it stays in tract's qconv)."""

    def __init__(self, three_d: bool):
        super().__init__()
        self.three_d = three_d
        self.d1 = torch.nn.Conv1d(8, 8, 3, padding=1, groups=8)
        self.d2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.d3 = torch.nn.Conv3d(8, 8, 3, padding=1, groups=8)
        self.g2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=2, dilation=2, groups=2)
        self.wide = torch.nn.Conv2d(1040, 4, 1, groups=2)

    def forward(self, x1, x2, xw, *x3):
        y2 = torch.relu(self.d2(x2))
        outs = (self.d1(x1), y2, self.g2(y2), self.wide(xw))
        return outs + (self.d3(x3[0]),) if self.three_d else outs


@pytest.mark.parametrize("engine_name", ["x86", "qnnpack"])
def test_grouped_quantized_convs_integers_equal_pytorch(tmp_path, engine_name):
    """A grouped convolution's int32 sums from tract's float conv (helpers/grouped_int8.py)
    equal PyTorch's, weights at the int8 extremes included; one whose sums could reach
    2**24 stays in qconv. Every integer is compared, on fresh inputs beyond the calibrated
    range too (clamped at 0 and 255)."""
    import numpy as np

    from t2n.check.tract_runner import run_in_tract

    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine_name
    try:
        torch.manual_seed(0)
        m = _GroupedNet(three_d=engine_name == "x86").eval()  # QNNPACK has no 3-D conv
        with torch.no_grad():  # extreme weights: every |w| of some channels is 127 or 128
            m.wide.weight.copy_(torch.sign(torch.randn_like(m.wide.weight)))
            m.d2.weight[:4] = torch.sign(torch.randn_like(m.d2.weight[:4]))
        shapes = [(2, 8, 12), (2, 8, 9, 9), (1, 1040, 2, 2)] + \
            ([(1, 8, 5, 5, 5)] if engine_name == "x86" else [])
        ex = tuple(torch.randn(s) for s in shapes)
        p = prepare_fx(m, tq.get_default_qconfig_mapping(engine_name), ex)
        with torch.no_grad():
            for _ in range(4):
                p(*(torch.randn(s) for s in shapes))
        q = convert_fx(p)
        out = tmp_path / "g.nnef.tar"
        r = t2n.export(q, ex, out)
        assert r.op_histogram["conv"] == len(shapes) and \
            r.op_histogram["tract_core_qconv"] == 1, \
            r.op_histogram
        for k in range(4):
            xs = [torch.randn(s) * (1 + 2 * (k % 2)) for s in shapes]
            got = run_in_tract(str(out), [x.numpy() for x in xs])
            for i, (a, b) in enumerate(zip(got, q(*xs))):
                assert np.array_equal(a, b.numpy()), (engine_name, k, i)
    finally:
        torch.backends.quantized.engine = old


def test_quantize_per_tensor_rounds_far_values_and_ties(tmp_path):
    """Rounding half to even by float32 additions (helpers/round_by_adds.py) at exact ties
    of every magnitude up to the 8-bit range and beyond 2**22 steps (clamped, as PyTorch
    clamps), for quint8 and qint8."""
    import numpy as np

    from t2n.check.tract_runner import run_in_tract

    class Q(torch.nn.Module):
        def __init__(self, dtype, zp):
            super().__init__()
            self.dtype, self.zp = dtype, zp

        def forward(self, x):
            return torch.dequantize(torch.quantize_per_tensor(x, 0.25, self.zp, self.dtype))

    halves = (torch.arange(-600, 600) + 0.5) * 0.25  # x / scale = k + 0.5, exactly
    far = torch.tensor([2.0 ** 20, 2.0 ** 21 + 0.5, 2.0 ** 22, 3e6, 2.0 ** 23, 1e9, 3e38])
    x = torch.cat([halves, far, -far, torch.randn(4000) * 40]).reshape(1, -1)
    for dtype, zp in ((torch.quint8, 7), (torch.qint8, 0), (torch.qint8, -3)):
        out = tmp_path / f"q{zp}.nnef.tar"
        t2n.export(Q(dtype, zp).eval(), (x,), out)
        assert np.array_equal(run_in_tract(str(out), [x.numpy()])[0], Q(dtype, zp)(x).numpy()), \
            (dtype, zp)


# (groups, kernel, padding, the op tract runs the float sums in)
_FLOAT_SUMS = {"depthwise 3x3": (64, 3, 1, "conv"), "pointwise 1x1": (1, 1, 0, "tract_core_einsum")}


@pytest.mark.parametrize("layer", list(_FLOAT_SUMS))
def test_float_sums_keep_the_multiplier_out_of_the_kernel(tmp_path, layer):
    """The float routes (helpers/grouped_int8.py) rely on tract keeping the
    requantization's per-channel multiply after the float product (tract 0.23.9 folds such
    a multiply into the kernel of an ungrouped float conv, which is why 1x1 layers are an
    einsum): folded, or merely applied before the bias, products rounded at the output's
    scale round some outputs the other way. tract's integers are compared with the x86
    requantization (the running kernel's steps, helpers/requantization.py) computed here
    from exact sums, float32 op for float op, on 2.4 M outputs spanning the 8-bit range,
    and with PyTorch's own."""
    import numpy as np

    from t2n.check.tract_runner import run_in_tract

    groups, k, pad, op = _FLOAT_SUMS[layer]
    torch.manual_seed(0)
    c, xs, x0, out_scale, out_zp = 64, 0.02, 128, 0.04 * (1 if groups > 1 else 3), 128
    w = torch.randn(c, c // groups, k, k)
    scales = (w.abs().flatten(1).amax(1) / 127).double()
    qw = torch.quantize_per_channel(w, scales, torch.zeros(c, dtype=torch.long), 0,
                                    torch.qint8)
    bias = torch.randn(c)

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.ao.nn.quantized.Conv2d(c, c, k, padding=pad, groups=groups)
            self.conv.set_weight_bias(qw, bias)
            self.conv.scale, self.conv.zero_point = out_scale, out_zp

        def forward(self, x):
            return torch.dequantize(self.conv(torch.quantize_per_tensor(x, xs, x0,
                                                                        torch.quint8)))

    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = "x86"
    try:
        m = Layer().eval()
        x = torch.rand(1, c, 192, 192) * 5.1 - 2.56
        out = tmp_path / "l.nnef.tar"
        r = t2n.export(m, (x,), out, capture="trace")
        # the running kernel's steps: fbgemm's, or oneDNN's on a CPU with AVX-512 VNNI
        form = rq.requantization_form("conv", qw, True, [1, 1], [pad, pad], [1, 1], groups,
                                      (1, c, 192, 192), torch.quint8, False)
    finally:
        torch.backends.quantized.engine = old
    assert r.op_histogram.get(op) == 1 and "tract_core_qconv" not in r.op_histogram, \
        r.op_histogram
    q = torch.quantize_per_tensor(x, xs, x0, torch.quint8).int_repr().double() - x0
    acc = torch.nn.functional.conv2d(q, qw.int_repr().double(), padding=pad, groups=groups)
    y = rq.apply(rq.requantization(form, qw.q_per_channel_scales(), xs, bias, out_scale,
                                   out_zp), acc)
    ref = (torch.clamp(y, 0, 255) - out_zp) * out_scale
    assert torch.unique(ref).numel() > 200  # the outputs use the 8-bit range
    got = run_in_tract(str(out), [x.numpy()])[0]
    assert int((got != ref.numpy()).sum()) == 0, (layer, int((got != ref.numpy()).sum()))
    torch.backends.quantized.engine = "x86"
    try:
        assert np.array_equal(got, m(x).numpy()), layer
    finally:
        torch.backends.quantized.engine = old


class _WideLayers(torch.nn.Module):
    """Layers whose weights tract would sum at every run (over 1 M int8 values: a padded
    3x3 conv and a linear head), given to tract as int8 with zero point 0
    (helpers/int8_inputs.py)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(384, 384, 3, padding=1)
        self.fc = torch.nn.Linear(384 * 16, 200)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


@pytest.mark.parametrize("engine_name", ["x86", "qnnpack"])
def test_wide_layers_take_a_shifted_input_with_pytorchs_integers(tmp_path, engine_name):
    """The shifted input's padding (the input's zero point minus 128) and the per-channel
    zero-point sums reproduce PyTorch's integers exactly, on fresh inputs too."""
    import numpy as np

    from t2n.check.tract_runner import run_in_tract

    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine_name
    try:
        torch.manual_seed(0)
        ex = (torch.randn(1, 384, 4, 4) + 0.7,)  # a zero point far from 128
        p = prepare_fx(_WideLayers().eval(), tq.get_default_qconfig_mapping(engine_name), ex)
        q = convert_fx(_calibrated(p, (2, 384, 4, 4)))
        out = tmp_path / "w.nnef.tar"
        t2n.export(q, ex, out, check=True)
        text = _graph_text(out)
        assert "b0 = 0" in text and "pad(" in text, text[-3000:]
        for k in range(3):
            x = torch.randn(1, 384, 4, 4) * 0.8 + 0.5
            assert np.array_equal(run_in_tract(str(out), [x.numpy()])[0], q(x).numpy()), k
    finally:
        torch.backends.quantized.engine = old
