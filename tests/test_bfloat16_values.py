"""bfloat16 values inside float32 and float16 models (t2n/walk/bf16_values.py): a cast to bf16
rounds exactly as PyTorch's, every later op with a bf16 result is rounded once as PyTorch's
CPU kernels round it, ops PyTorch computes step by step in bf16 are refused naming the op,
and a float model's bf16 buffer is used as PyTorch promotes it."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import t2n
from t2n.errors import T2NError
from t2n.testing import assert_exports


def _tie_classes() -> np.ndarray:
    """Float32 bit patterns: every upper half (each sign, exponent and bf16 mantissa, so
    normals, subnormals, the largest finite values next to overflow, inf and NaN) with the
    lower halves that decide a rounding: exact, just above, just below and at the tie, and
    a few others."""
    high = np.arange(1 << 16, dtype=np.uint32) << 16
    low = np.array([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x3FFF, 0xC001],
                   dtype=np.uint32)
    return (high[:, None] | low[None, :]).ravel().view(np.float32)


class ToBf16AndBack(torch.nn.Module):
    def forward(self, x):
        return x.bfloat16().float()


def test_rounding_is_pytorch_s_on_every_tie_class(tmp_path, tract_worker):
    x = _tie_classes()
    path = str(tmp_path / "round.nnef.tar")
    t2n.export(ToBf16AndBack(), (torch.from_numpy(x.copy()),), path)
    got = tract_worker.run(path, [x])[0]
    want = torch.from_numpy(x.copy()).bfloat16().float().numpy()
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    bits, want_bits = got.view(np.uint32)[~nan], want.view(np.uint32)[~nan]
    wrong = np.flatnonzero(bits != want_bits)
    assert wrong.size == 0, (f"{wrong.size} float32 patterns round unlike PyTorch, e.g. "
                             f"{[hex(v) for v in x.view(np.uint32)[~nan][wrong[:5]]]}")


def _special(dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 64, generator=g) * torch.logspace(-6, 4, 64)
    big = 6e4 if dtype == torch.float16 else 3.3e38
    x[0, :6] = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0, big, -big])
    return x.to(dtype)


class TanhOfBf16(torch.nn.Module):
    """The issue's model: ``(x.bfloat16() * 3).tanh()`` back in the model's dtype (without
    NaN: tract 0.23.9's float32 tanh gives -1 for NaN, a tract matter), and a product."""

    def forward(self, x):
        finite = torch.nan_to_num(x, nan=0.5)
        return (finite.bfloat16() * 3).tanh().to(x.dtype), x.bfloat16() * 3


@pytest.mark.parametrize("capture", ["trace", "export"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
def test_ops_on_bf16_values_match_pytorch_bit_for_bit(dtype, capture):
    assert_exports(TanhOfBf16(), (_special(dtype),), rtol=0, atol=0, capture=capture)


class Conversions(torch.nn.Module):
    """Casts into and out of bf16: from float16 and int64 (PyTorch goes through float32:
    int64 is rounded twice), to float16 (one rounding of the bf16 value, overflow to inf)."""

    def forward(self, h, i):
        b = h.float().mul(300.0).bfloat16()
        return h.bfloat16(), i.bfloat16(), b.half(), b.double(), (b > 1).bfloat16()


def test_casts_into_and_out_of_bf16_match_pytorch():
    h = _special(torch.float16)
    i = torch.tensor([2 ** 24 + 1, 2 ** 31 - 1, -(2 ** 40) - 3, 7, 0, 2 ** 62 + 2 ** 50])
    assert_exports(Conversions(), (h, i), rtol=0, atol=0)


class ProdOfBf16(torch.nn.Module):
    def forward(self, x):
        return x.bfloat16().prod(-1).float()


def test_a_step_by_step_bf16_op_is_refused_naming_it(tmp_path):
    with pytest.raises(T2NError, match=r"(?s)aten::prod.*bfloat16.*test_bfloat16_values.py:"):
        t2n.export(ProdOfBf16(), (torch.randn(2, 8),), str(tmp_path / "m.nnef"))
    assert not os.listdir(tmp_path)


class Bf16Buffers(torch.nn.Module):
    """A float32 model keeping bf16 buffers (as RecurrentGemma's ``normalizer``): promoted
    with float32 tensors, cast to the model's dtype, and computed in bf16 on its own."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor(8.0 ** 0.5, dtype=torch.bfloat16))
        self.register_buffer("shift", torch.linspace(-1, 1, 16).to(torch.bfloat16))

    def forward(self, x):
        a = x * self.scale.type(x.dtype) + self.shift
        return a, (self.shift * 3 + self.scale).float() * x


def test_bf16_buffers_of_a_float_model_need_no_dtype():
    model = Bf16Buffers()
    result = assert_exports(model, (torch.randn(2, 16),), rtol=0, atol=0)
    assert all(o.dtype == "f32" for o in result.outputs)
    assert model.scale.dtype == torch.bfloat16  # the model is left as it is


class ScalarOperands(torch.nn.Module):
    """Python numbers beside bf16 tensors: PyTorch rounds them to bf16 for add, sub, pow,
    fmod and comparisons (TensorIterator's common dtype), keeps them in float for mul and
    the activations' parameters."""

    def forward(self, x):
        b = x.bfloat16()
        return (b + 0.1, 0.7 - b, b * 0.1, b.abs() ** 2.1, torch.fmod(b, 0.3),
                torch.where(b > 0, b, 0.1), b.clamp(0.1, 0.5), b > 0.1, b == 0.1, b <= 0.1,
                torch.nn.functional.leaky_relu(b, 0.3))


def test_python_numbers_beside_bf16_tensors_round_as_pytorch():
    x = torch.linspace(-1, 1, 4097)
    x[100], x[101] = 0.10009765625, 0.0999755859375  # bf16(0.1) and f16(0.1)
    assert_exports(ScalarOperands(), (x,), rtol=0, atol=0)
