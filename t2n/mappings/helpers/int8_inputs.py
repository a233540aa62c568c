"""A quantized convolution's input given to tract as int8 with zero point 0.

tract's int8 kernels multiply int8 by int8: a u8 input is shifted to i8 inside
``tract_core_qconv`` (an op of its own per layer), and its zero point, then non-zero, adds
the correction ``x0 * sum(w)`` to every output. tract folds ``sum(w)`` into a constant
only while the weight's int32 copy fits its constant-folding budget (4 MiB in 0.23.9);
above it, it casts and sums the weight at every run (measured: 1.1 ms for each of
ResNet-50's 512x512x3x3 layers, and the same for the 2048x1000 head with the activations'
sums: 7 % of its int8 run). Given ``x - offset`` as int8 with zero point 0 (``offset``
128 for quint8, 0 for qint8), tract computes ``acc' = sum((x - offset) * (w - a0))`` with
no correction; PyTorch's sums are ``acc' + (offset - x0) * sum(w - a0)`` per output
channel, an int32 constant added here. A padded convolution pads with ``x0``, which is
``x0 - offset`` here: an explicit pad of the input.
"""

from __future__ import annotations

import torch

_OFFSET = {torch.quint8: 128, torch.qint8: 0}
# tract 0.23.9's constant-folding budget: a weight whose int32 copy is larger is summed at
# every run (core/src/optim/mod.rs, CONST_FOLD_MEM_BUDGET)
_FOLD_BUDGET_ELEMENTS = (4 << 20) // 4


def worth_it(wi: torch.Tensor, dtype) -> bool:
    """Where tract would sum the weight at every run. (Elsewhere tract's own shift of the
    input is cheaper than the subtraction here, which a requantized tensor read by a float
    op too cannot fuse: measured 0.1 ms against 0.013 per ResNet-50 layer.)"""
    return dtype in _OFFSET and wi.numel() > _FOLD_BUDGET_ELEMENTS


def signed_input(g, xf, dtype, x_zp: int, padding):
    """(int8 input, padding left for the convolution) from ``xf``, the input's integers as
    float32 (``dtype`` its quantized dtype, ``x_zp`` its zero point)."""
    f32 = torch.float32
    offset = _OFFSET[dtype]
    xs = g.binary("sub", xf, float(offset), f32) if offset else xf
    border = x_zp - offset
    padding = list(padding)
    if border and any(padding):
        pairs = [(0, 0), (0, 0)] + [(p, p) for p in padding]
        shape = [d + b + e for d, (b, e) in zip(xs.shape, pairs)]
        xs = g.op("pad", xs, padding=pairs, border="constant", value=float(border),
                  out_shape=shape, out_dtype=f32)
        padding = [0] * len(padding)
    return g.cast(xs, torch.int8), padding


def zero_point_sums(wi: torch.Tensor, a0: int, dtype, x_zp: int) -> torch.Tensor | None:
    """The int32 per-channel constant ``(offset - x0) * sum(w - a0)`` that turns tract's sums
    of the shifted input into PyTorch's (None when it is 0)."""
    k = _OFFSET[dtype] - x_zp
    if not k:
        return None
    return (k * (wi.to(torch.int64) - a0).flatten(1).sum(1)).to(torch.int32)
