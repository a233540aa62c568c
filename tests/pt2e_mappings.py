"""A user's mappings of the quantize/dequantize ops of PyTorch's pt2e flow
(``quantized_decomposed::``, defined in ``torch.ao.quantization.fx._decomposed``), as
tests/test_extensions.py loads them: what a torchao pt2e-quantized model needs beyond the
aten ops (its per-channel weight dequantization has constant inputs and is folded)."""

import torch

import t2n


def _dtype(g, dtype):
    if not isinstance(dtype, torch.dtype):  # both captures give a ScalarType as a dtype
        raise g.error(f"dtype: expected a torch.dtype, got {dtype!r}")
    return dtype


@t2n.mapping("quantized_decomposed::quantize_per_tensor", override=True)
def quantize_per_tensor(g, input, scale, zero_point, quant_min, quant_max, dtype):
    """clamp(round_half_even(input / scale) + zero_point, quant_min, quant_max), as the
    kernel computes it (input * (1 / scale), in float32)."""
    x = g.binary("mul", g.cast(input, torch.float32), 1.0 / scale, torch.float32)
    x = g.binary("add", g.op("tract_core_round_even", x), float(zero_point), torch.float32)
    x = g.binary("min", g.binary("max", x, float(quant_min)), float(quant_max))
    return g.cast(x, _dtype(g, dtype))


@t2n.mapping("quantized_decomposed::dequantize_per_tensor", override=True)
def dequantize_per_tensor(g, input, scale, zero_point, quant_min, quant_max, dtype,
                          out_dtype=None):
    _dtype(g, dtype)
    x = g.binary("sub", g.cast(input, torch.float32), float(zero_point), torch.float32)
    return g.cast(g.binary("mul", x, scale, torch.float32), out_dtype or torch.float32)
