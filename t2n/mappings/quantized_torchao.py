"""torchao's own quantization primitives (``torchao::``, torchao/quantization/quant_primitives.py),
which its weight-only configs call when a layer runs: ``IntxWeightOnlyConfig`` (int8, and
int1-int7 values such as int4 held in int8) dequantizes its weight with
``torchao::dequantize_affine`` on every call. (``Int8WeightOnlyConfig`` casts its int8 weight
in aten ops instead: :func:`t2n.mappings.shape.to` keeps that weight stored as int8.)

The weight stays an int8 weight in the archive (the walker does not fold the dequantization:
:func:`t2n.walk.registry.stores_integers`), with its scales and zero points beside it, and
tract dequantizes it once, when it loads the model, with the kernel's float steps: an int4
group-32 layer takes a quarter of its float32 bytes plus its scales, and its numbers are
PyTorch's. (tract's Q4_0 would halve that again, but it rounds each group's scale to
float16, which torchao's float32 scales are not: not exact, so not used.)
"""

from __future__ import annotations

import torch

from t2n import dtypes
from t2n.walk.registry import aten, stores_integers


def _dtype(dtype):
    """A dtype argument as a torch dtype (the trace passes ScalarType codes)."""
    return dtypes.from_scalar_type(dtype) if isinstance(dtype, int) else dtype


def _all_zero(t) -> bool:
    return getattr(t, "is_const", False) and not bool(t.value.any())


@aten("torchao::dequantize_affine")
@stores_integers
def dequantize_affine(g, input, block_size, scale, zero_point, input_dtype, quant_min=None,
                      quant_max=None, output_dtype=torch.float32):
    """``(input.to(output_dtype) - zero_point.to(output_dtype)) * scale`` over blocks of
    ``block_size``: the input viewed as (blocks, block) per blocked axis, the scale and zero
    point broadcast over each block, the result viewed back."""
    out = _dtype(output_dtype)
    if out not in (torch.float32, torch.float16):
        raise g.error(f"output_dtype: {out} dequantization is not supported (float32, "
                      "float16)")
    shape = list(input.shape)
    if len(block_size) != len(shape) or not all(isinstance(d, int) for d in shape):
        raise g.error(f"block_size {list(block_size)} of an input of shape {shape}: expected "
                      "one static size per axis")
    split, params = [], []
    for size, block in zip(shape, block_size):
        if block != size and block > 1:
            if size % block:
                raise g.error(f"block_size: {block} does not divide the axis size {size}")
            split += [size // block, block]
            params += [size // block, 1]
        else:
            split.append(size)
            params.append(size if block == 1 else 1)
    compute = torch.promote_types(out, scale.dtype)
    x = g.cast(g.reshape(input, split), compute)
    if zero_point is not None and not _all_zero(zero_point):  # symmetric: not stored
        zp = g.cast(g.cast(g.reshape(zero_point, params), out), compute)
        x = g.binary("sub", x, zp, compute)
    x = g.binary("mul", x, g.cast(g.reshape(scale, params), compute), compute)
    return g.cast(g.reshape(x, shape), out)
