"""Element-wise quantized ops as the running kernel's map of the integers
(t2n/mappings/helpers/quantized_maps.py): hardtanh, relu6, clamp and relu as one clamp of
the integers (bounds on rounding ties included, no float round trip left in the archive);
sigmoid, hardsigmoid, tanh, gelu, leaky_relu and quantized hardswish/sigmoid/leaky_relu as a
lookup of the 256 integers. PyTorch's integers exactly."""

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import t2n
from t2n.check.tract_runner import run_in_tract
from t2n.mappings.helpers.quantized_maps import integer_map

warnings.filterwarnings("ignore", message=".*quantiz.*")

# scale 0.25: 6.125 and -0.375 sit on ties (24.5 and -1.5 steps), where the two roundings of
# quantize_val (zero point inside or after the rounding) can part when the zero point is odd
_OPS = {
    "hardtanh": lambda q: F.hardtanh(q, -0.375, 6.125),
    "relu6": lambda q: F.relu6(q),
    "clamp": lambda q: torch.clamp(q, -0.375, 6.125),
    "clamp_min": lambda q: torch.clamp(q, min=-0.375),
    "relu": lambda q: F.relu(q),
    "quantized_relu6": lambda q: torch.ops.quantized.relu6(q),
}


class _Clamped(torch.nn.Module):
    def __init__(self, op, dtype, zero_point, twice):
        super().__init__()
        self.op, self.dtype, self.zero_point, self.twice = op, dtype, zero_point, twice

    def forward(self, x):
        q = torch.quantize_per_tensor(x, 0.25, self.zero_point, self.dtype)
        y = _OPS[self.op](q)
        y = _OPS[self.op](y) if self.twice else y
        return torch.dequantize(y)


@pytest.mark.parametrize("op", list(_OPS))
@pytest.mark.parametrize("dtype,zero_point", [(torch.quint8, 3), (torch.quint8, 200),
                                              (torch.qint8, -5), (torch.qint8, 0)])
def test_quantized_clamps_equal_pytorch_on_every_integer(tmp_path, op, dtype, zero_point):
    x = torch.cat([(torch.arange(-300, 300) + 0.5) * 0.25,  # every integer, and ties
                   torch.arange(-300, 300) * 0.25, torch.tensor([1e6, -1e6])]).reshape(1, -1)
    for twice in (False, True):
        model = _Clamped(op, dtype, zero_point, twice).eval()
        out = tmp_path / f"{op}{twice}.nnef.tar"
        r = t2n.export(model, (x,), out, capture="trace")
        got = run_in_tract(str(out), [x.numpy()])[0]
        assert np.array_equal(got, model(x).numpy()), (op, dtype, zero_point, twice)
        # one clamp of the integers: no float hardtanh, no requantizing multiplication
        # beyond the quantization of the input and the dequantization of the output
        assert "t2n_clamp" not in r.op_histogram, (op, r.op_histogram)
        assert r.op_histogram.get("mul", 0) <= 2, (op, r.op_histogram)


def test_clamp_bounds_come_from_the_running_kernel():
    """The bounds are what PyTorch's own kernel returns, ties included; an op that is not a
    clamp of the integers has none, and arguments that are tensors are not answered."""
    for zero_point in (3, 4):
        ints = torch.arange(0, 256, dtype=torch.uint8)
        q = torch._make_per_tensor_quantized_tensor(ints, 0.25, zero_point)
        want = F.hardtanh(q, -0.375, 6.125).int_repr()
        a, b = integer_map("hardtanh", (-0.375, 6.125), 0.25, zero_point, torch.quint8).clamp
        assert torch.equal(ints.clamp(a, b), want), zero_point
    assert integer_map("leaky_relu", (0.5,), 0.25, 3, torch.quint8).clamp is None
    assert integer_map("clamp", (torch.tensor(0.0), None), 0.25, 3, torch.quint8) is None


_TABLES = {
    "sigmoid": lambda q: torch.sigmoid(q),
    "hardsigmoid": lambda q: F.hardsigmoid(q),
    "tanh": lambda q: torch.tanh(q),
    "gelu": lambda q: F.gelu(q),
    "gelu tanh": lambda q: F.gelu(q, approximate="tanh"),
    "leaky_relu": lambda q: F.leaky_relu(q, 0.2),
    "quantized hardswish": lambda q: torch.ops.quantized.hardswish(q, 0.031, 9),
    "quantized sigmoid": lambda q: torch.ops.quantized.sigmoid(q, 1 / 256, 0),
    "quantized leaky_relu": lambda q: torch.ops.quantized.leaky_relu(q, 0.1, False, 0.07, 60),
    "sigmoid then tanh": lambda q: torch.tanh(torch.sigmoid(q)),
}


class _Mapped(torch.nn.Module):
    def __init__(self, op, dtype, zero_point):
        super().__init__()
        self.op, self.dtype, self.zero_point = op, dtype, zero_point

    def forward(self, x):
        q = torch.quantize_per_tensor(x, 0.0625, self.zero_point, self.dtype)
        return torch.dequantize(_TABLES[self.op](q))


@pytest.mark.parametrize("op", list(_TABLES))
@pytest.mark.parametrize("dtype,zero_point", [(torch.quint8, 131), (torch.qint8, -7)])
def test_quantized_element_wise_ops_equal_pytorch_on_every_integer(tmp_path, op, dtype,
                                                                    zero_point):
    """Every input integer (and values far out) gives PyTorch's output integer: tract's
    own sigmoid/tanh/erf differ from PyTorch's at rounding ties, so these are lookups."""
    x = torch.cat([(torch.arange(-300, 300) + 0.5) * 0.0625, torch.arange(-300, 300) * 0.0625,
                   torch.tensor([1e6, -1e6])]).reshape(1, -1)
    model = _Mapped(op, dtype, zero_point).eval()
    out = tmp_path / "m.nnef.tar"
    r = t2n.export(model, (x,), out, capture="trace")
    got = run_in_tract(str(out), [x.numpy()])[0]
    assert np.array_equal(got, model(x).numpy()), (op, dtype, zero_point)
    assert r.op_histogram.get("tract_core_gather", 0) >= 1, (op, r.op_histogram)


def test_clamp_of_integers_without_a_float_twin(tmp_path):
    """A quantized tensor that no requantization made (a max pool of the input's integers
    reads them as they are) is clamped as integers, as PyTorch does."""

    class Pooled(torch.nn.Module):
        def forward(self, x):
            q = torch.quantize_per_tensor(x, 0.25, 3, torch.quint8)
            q = F.max_pool2d(torch.cat([q, q], 1), 2)
            return torch.dequantize(F.relu6(F.relu(q)))

    x = torch.randn(1, 2, 8, 8) * 4
    r = t2n.export(Pooled().eval(), (x,), tmp_path / "p.nnef.tar", capture="trace")
    got = run_in_tract(str(tmp_path / "p.nnef.tar"), [x.numpy()])[0]
    assert np.array_equal(got, Pooled()(x).numpy())
    assert "t2n_clamp" not in r.op_histogram, r.op_histogram


def test_qnnpack_clamp_of_a_channels_last_tensor_is_refused_naming_pytorchs_bug(tmp_path):
    """On qnnpack, PyTorch's hardtanh of a channels-last quantized tensor (a quantized
    convolution's output, then a ReLU6 that FX did not fuse) returns the channels-last
    buffer in a plainly laid out tensor: its elements land elsewhere. t2n refuses it,
    naming the op, rather than export a result PyTorch does not compute (or reproduce the
    scrambling); the same model on the x86 engine exports and equals PyTorch."""
    import copy

    import torch.ao.quantization as tq
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    from t2n.errors import UnsupportedOperatorsError

    old = torch.backends.quantized.engine
    try:
        for engine in ("qnnpack", "x86"):
            torch.backends.quantized.engine = engine
            torch.manual_seed(0)
            m = torch.nn.Sequential(torch.nn.Conv2d(4, 16, 3, padding=1), torch.nn.ReLU6())
            ex = (torch.randn(1, 4, 12, 12),)
            p = prepare_fx(copy.deepcopy(m.eval()), tq.get_default_qconfig_mapping(engine), ex)
            p(*ex)
            q = convert_fx(p)
            # the bug itself: PyTorch's result is not the op element by element
            c = getattr(q, "0")(torch.quantize_per_tensor(ex[0], float(getattr(
                q, "0_input_scale_0")), int(getattr(q, "0_input_zero_point_0")), torch.quint8))
            scrambled = not torch.equal(F.hardtanh(c, 0.0, 6.0).int_repr(),
                                        F.hardtanh(c.contiguous(), 0.0, 6.0).int_repr())
            out = tmp_path / f"{engine}.nnef.tar"
            if engine == "qnnpack":
                assert scrambled
                with pytest.raises(UnsupportedOperatorsError, match="hardtanh of a channels-last"):
                    t2n.export(q, ex, out, capture="trace")
            else:
                t2n.export(q, ex, out, capture="trace")
                assert np.array_equal(run_in_tract(str(out), [ex[0].numpy()])[0],
                                      q(*ex).numpy())
    finally:
        torch.backends.quantized.engine = old


def test_an_op_without_a_quantized_lowering_is_refused_at_the_op(tmp_path):
    """An aten op given a torch.ao quantized tensor, with no quantized lowering and not one
    that only moves the integers (a pad: PyTorch pads with the zero point's integer), is
    refused naming that op; its float mapping would compute on the integers as values."""
    from t2n.errors import UnsupportedOperatorsError

    class Padded(torch.nn.Module):
        def forward(self, x):
            q = torch.quantize_per_tensor(x, 0.1, 100, torch.quint8)
            return torch.dequantize(F.pad(q, (1, 1)))

    x = torch.randn(1, 2, 4, 4)
    # the export without check wrote an archive padding with -10.0 (the integer 0) where
    # PyTorch pads with 0.0 (the zero point)
    with pytest.raises(UnsupportedOperatorsError,
                       match="aten::pad[^\\n]*\\n.*torch.ao quantized tensors"):
        t2n.export(Padded().eval(), (x,), tmp_path / "p.nnef.tar", capture="trace")
