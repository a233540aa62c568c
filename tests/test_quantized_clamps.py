"""Quantized hardtanh, relu6, clamp and relu as one clamp of the integers
(t2n/mappings/helpers/quantized_clamps.py): PyTorch's integers exactly, bounds on rounding
ties included, and no float round trip left in the archive."""

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import t2n
from t2n.check.tract_runner import run_in_tract
from t2n.mappings.helpers.quantized_clamps import integer_clamp_bounds

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
    """The bounds are what PyTorch's own kernel returns, ties included; ops that are not
    clamps of the integers, and arguments that are tensors, are not answered."""
    for zero_point in (3, 4):
        ints = torch.arange(0, 256, dtype=torch.uint8)
        q = torch._make_per_tensor_quantized_tensor(ints, 0.25, zero_point)
        want = F.hardtanh(q, -0.375, 6.125).int_repr()
        a, b = integer_clamp_bounds("hardtanh", (-0.375, 6.125), 0.25, zero_point, torch.quint8)
        assert torch.equal(ints.clamp(a, b), want), zero_point
    assert integer_clamp_bounds("leaky_relu", (0.1,), 0.25, 3, torch.quint8) is None
    assert integer_clamp_bounds("clamp", (torch.tensor(0.0), None), 0.25, 3,
                                torch.quint8) is None


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
