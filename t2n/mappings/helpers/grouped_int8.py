"""Grouped (depthwise) quantized convolutions: their int32 sums from tract's float conv.

tract has no grouped int8 kernel: ``tract_core_qconv`` with groups runs one small matrix
product per group over an explicit im2col copy. Its float depthwise and grouped kernels are
fast: measured on this project's probes (AVX-512 VNNI), MobileNetV2's 96-channel 3x3
depthwise layer at 56x56 runs in 1.3 ms instead of 9.5, a ResNeXt-style 128-channel
32-group layer in 4.8 ms instead of 7.2, a 2-group one in 2.3 instead of 3.2. The sums stay
PyTorch's int32 sums exactly: the input's integers minus its zero point and the weight's
minus theirs are exact float32 numbers, and so is every partial sum while its magnitude
stays below 2**24 (:func:`float_sums_exact` checks that from the weights for every
possible input), whatever order tract adds them in. Only grouped convolutions take this
route: for an ungrouped float conv, tract folds a following per-channel multiply into the
kernel (``declutter_channel_arithmetic_succ`` in its conv.rs), which would round products
at the output's scale instead of the exact sums (measured: 3 of 800 k outputs of
ResNet-50's stem differ); a test pins that the grouped route keeps them exact.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.matrix import einsum_op

_EXACT_BELOW = 2 ** 24


def float_sums_exact(wi: torch.Tensor, a0: int, input_range: tuple[int, int]) -> bool:
    """Whether float32 sums of ``(x - x0) * (w - a0)`` are exact for every input of the
    8-bit ``input_range``: for each output channel, the sum of ``|w - a0|`` times the
    widest ``|x - x0|`` (at most the range's width) stays below 2**24 (a 3x3 depthwise
    kernel: at most 9 * 128 * 255)."""
    lo, hi = input_range
    per_channel = (wi.to(torch.int64) - a0).abs().flatten(1).sum(1)
    return bool(per_channel.numel()) and int(per_channel.max()) * (hi - lo) < _EXACT_BELOW


def grouped_sums_in_float(g, xf, w, a0: int, x_zp: int, groups: int, dilation, stride,
                          padding, out_shape):
    """``sum((x - x_zp) * (w - a0))`` per output as exact float32 integers, from ``xf`` (the
    input's integers as float32) and the stored integer weight ``w``; padding with 0 after
    taking the zero point off is qconv's padding with the zero point."""
    f32 = torch.float32
    xf, wf = _centred(g, xf, w, a0, x_zp)
    return g.op("conv", xf, wf, g.scalar(0.0, f32), border="constant",
                padding=[(p, p) for p in padding], stride=list(stride), dilation=list(dilation),
                groups=groups, out_shape=out_shape, out_dtype=f32)


# the input channels up to which a 1x1 layer's float product beats tract's int8 one
# (measured on AVX-512 VNNI: MobileNetV2 int8 2.1x -> 1.2x its float32 archive with 1x1
# layers of up to 200 input channels in float, no gain past that; ResNet-50 0.63x -> 0.60x)
POINTWISE_FLOAT_CHANNELS = 192


def pointwise_in_float(wi: torch.Tensor, a0: int, input_range, stride, padding) -> bool:
    """Whether an ungrouped layer takes :func:`pointwise_sums_in_float`: 1x1 (or a linear
    layer's 1-wide kernel), stride 1, unpadded, few input channels, exact sums."""
    return (wi.dim() >= 3 and all(k == 1 for k in wi.shape[2:]) and not any(padding)
            and all(s == 1 for s in stride) and wi.shape[1] <= POINTWISE_FLOAT_CHANNELS
            and float_sums_exact(wi, a0, input_range))


def pointwise_sums_in_float(g, xf, w, a0: int, x_zp: int, out_shape):
    """The int32 sums of an ungrouped 1x1 quantized convolution (stride 1, no padding) as
    exact float32 integers from one float matrix product ``[O, C] x [N, C, HW]``: tract's
    int8 product is several times slower than its float32 one when the layer has few input
    channels. Written as an einsum rather than a conv: tract folds a per-channel multiply
    that follows an ungrouped float conv into its kernel, which it does not do to an
    einsum's operand (a test pins it)."""
    f32 = torch.float32
    xf, wf = _centred(g, xf, w, a0, x_zp)
    n, c = xf.shape[0], xf.shape[1]
    hw = 1
    for d in xf.shape[2:]:
        hw = hw * d
    o = out_shape[1]
    wf = g.reshape(wf, [o, c])
    x3 = g.reshape(xf, [n, c, hw])
    y = einsum_op(g, "oc,nch->noh", [wf, x3], [n, o, hw], f32)
    return g.reshape(y, out_shape)


def _centred(g, xf, w, a0: int, x_zp: int):
    """``x - x_zp`` and the stored integer weight ``w - a0``, as exact float32 integers."""
    f32 = torch.float32
    if x_zp:
        xf = g.binary("sub", xf, float(x_zp), f32)
    wf = g.cast(w, f32)
    return xf, (g.binary("sub", wf, float(a0), f32) if a0 else wf)
