"""Convolutions: ``_convolution`` (what ``nn.Conv*d`` and ``F.conv*d`` trace to),
``_convolution_mode`` (string padding), ``convolution``, ``conv1d/2d/3d`` and
``conv_transpose1d/2d/3d``.

tract facts that shape this module:

* ``conv``/``deconv`` default to automatic "same" padding, so padding is always explicit;
* the bias is a ``[1, C]`` tensor (or the literal ``0.0``);
* ``deconv`` wants its filter as ``[C_out, C_in/groups, k...]`` while PyTorch stores a
  transposed-convolution weight as ``[C_in, C_out/groups, k...]``; the weight is regrouped
  here (once, in Python, for a stored weight);
* ``deconv`` padding crops the full output ``(L-1)*s + d*(k-1) + 1`` at both ends, which is
  PyTorch's ``padding`` at the start and ``padding - output_padding`` at the end; when
  ``output_padding`` exceeds ``padding`` the missing end positions receive no input at all
  in PyTorch (they hold the bias only), so the result is zero-padded there.

Padding modes other than zeros (``padding_mode='reflect'`` ...) reach t2n as a separate
``aten::pad`` node before the convolution. Integer convolutions (tract convolves floats
only) take the exact gather-and-product form of :mod:`t2n.mappings.helpers.integer_conv`.
float16 transposed convolutions follow the kernel the running torch picks for them
(helpers/conv_backend.py): its Half kernel (``slow_conv_transpose``), where each kernel
tap's column is an f32 product rounded to f16 and ``col2im`` adds the taps' columns into the
output in f16, tap after tap (:func:`_conv_transpose_f16`), or oneDNN's, computed in float32
and rounded once.
"""

from __future__ import annotations

import math

import torch

from t2n.mappings.helpers.integer_conv import dilate, flip_spatial, integer_conv
from t2n.mappings.helpers.conv_backend import sums_taps_in_f16
from t2n.mappings.helpers.ordered_sum import col2im_tables, ordered_tap_sum
from t2n.mappings.helpers.windows import as_list
from t2n.walk.registry import aten


def _check_dtypes(g, input, weight):
    for name, t in (("input", input), ("weight", weight)):
        if t.dtype == torch.bool:
            raise g.error(f"{name}: convolution of torch.bool tensors is not supported "
                          "(PyTorch has none either)")
    if input.dtype.is_floating_point != weight.dtype.is_floating_point:
        raise g.error(f"weight: a {weight.dtype} weight on a {input.dtype} input (PyTorch "
                      "wants one dtype)")


def _batched(g, input, weight):
    """(input with a batch axis, whether it was added): torch accepts unbatched inputs."""
    if input.rank == weight.rank - 1:
        return g.unsqueeze(input, [0]), True
    if input.rank != weight.rank:
        raise g.error(f"input: rank {input.rank} does not fit a weight of rank {weight.rank}")
    return input, False


def _bias(g, bias, channels, dtype):
    """NNEF wants the bias as [1, C]; no bias is the literal 0.0."""
    if bias is None:
        return g.scalar(0.0, dtype)
    bias = g.cast(bias, dtype)
    if bias.is_const:
        return g.reshaped_const(bias, (1, channels))
    return g.unsqueeze(bias, [0])


def _out_len(n, before, after, k, stride, dilation):
    return (n + before + after - dilation * (k - 1) - 1) // stride + 1


def _prologue(g, input, weight):
    """Shared checks of every convolution: numeric operands, a batch axis, the spatial
    rank."""
    _check_dtypes(g, input, weight)
    x, added = _batched(g, input, weight)
    n = weight.rank - 2
    if n < 1:
        raise g.error("weight: a convolution weight has rank >= 3")
    return x, added, n


def conv_nd(g, input, weight, bias, stride, pads, dilation, groups):
    """Forward convolution with explicit ``pads = [(before, after), ...]``."""
    x, added, n = _prologue(g, input, weight)
    stride, dilation = as_list(stride, n), as_list(dilation, n)
    kernel = list(weight.shape[2:])
    c_out = weight.shape[0]
    if groups < 1:
        raise g.error(f"groups: {groups} must be >= 1")
    dtype = x.dtype
    if not dtype.is_floating_point:
        y = integer_conv(g, x, weight, bias, stride, pads, dilation, groups)
        return g.squeeze(y, [0]) if added else y
    w = g.cast(weight, dtype)
    spatial = [_out_len(x.shape[2 + i], pads[i][0], pads[i][1], kernel[i], stride[i],
                        dilation[i]) for i in range(n)]
    y = g.op("conv", x, w, _bias(g, bias, c_out, dtype), border="constant",
             padding=[tuple(p) for p in pads], stride=stride, dilation=dilation,
             groups=groups, out_shape=[x.shape[0], c_out] + spatial, out_dtype=dtype)
    return g.squeeze(y, [0]) if added else y


def _derived_const(g, src, data):
    """A constant computed from a stored weight keeps that weight's file label."""
    var = next((v for v in g.variables if v.tensor is src), None)
    if var is None or data.numel() <= 8:
        return g.const(data)
    return g.variable(data, var.label)


def _deconv_filter(g, weight, groups):
    """PyTorch [C_in, C_out/g, k...] -> tract [C_out, C_in/g, k...]."""
    c_in, c_out_g = weight.shape[0], weight.shape[1]
    kernel = list(weight.shape[2:])
    if not isinstance(c_in, int) or c_in % groups:
        raise g.error(f"weight: {c_in} input channels do not split into {groups} groups")
    c_in_g = c_in // groups
    if weight.is_const:
        w = weight.value.reshape(groups, c_in_g, c_out_g, *kernel).transpose(1, 2)
        w = w.reshape(groups * c_out_g, c_in_g, *kernel).contiguous()
        return _derived_const(g, weight, w)
    w = g.reshape(weight, [groups, c_in_g, c_out_g] + kernel)
    perm = [0, 2, 1] + list(range(3, 3 + len(kernel)))
    w = g.transpose(w, perm)
    return g.reshape(w, [groups * c_out_g, c_in_g] + kernel)


def conv_transpose_nd(g, input, weight, bias, stride, padding, output_padding, groups,
                      dilation):
    x, added, n = _prologue(g, input, weight)
    stride, padding = as_list(stride, n), as_list(padding, n)
    output_padding, dilation = as_list(output_padding, n), as_list(dilation, n)
    if groups < 1:
        raise g.error(f"groups: {groups} must be >= 1")
    for i in range(n):
        if output_padding[i] >= max(stride[i], dilation[i]):
            raise g.error(f"output_padding: {output_padding[i]} must be smaller than stride "
                          "or dilation (PyTorch refuses it too)")
    dtype = x.dtype
    kernel = list(weight.shape[2:])
    c_out = weight.shape[1] * groups
    if dtype == torch.float16:
        if sums_taps_in_f16(x.shape, weight.shape, bias is not None, stride, padding,
                            dilation, output_padding, groups):
            y = _conv_transpose_f16(g, x, weight, bias, stride, padding, output_padding,
                                    groups, dilation)
        else:  # oneDNN: float32 sums, the result rounded once (helpers/conv_backend.py)
            f32 = torch.float32
            y = g.cast(conv_transpose_nd(
                g, g.cast(x, f32), g.cast(weight, f32),
                None if bias is None else g.cast(bias, f32), stride, padding,
                output_padding, groups, dilation), torch.float16)
        return g.squeeze(y, [0]) if added else y
    w = _deconv_filter(g, g.cast(weight, dtype), groups)
    if not dtype.is_floating_point:
        # the forward convolution of the stride-dilated input with the flipped filter
        for i in range(n):
            x = dilate(g, x, 2 + i, stride[i])
        reach = [dilation[i] * (kernel[i] - 1) - padding[i] for i in range(n)]
        y = integer_conv(g, x, flip_spatial(g, w), bias, [1] * n,
                         [(reach[i], reach[i] + output_padding[i]) for i in range(n)],
                         dilation, groups)
        return g.squeeze(y, [0]) if added else y
    pads, extra = [], []
    for i in range(n):
        after = padding[i] - output_padding[i]
        pads.append((padding[i], max(after, 0)))
        extra.append(max(-after, 0))
    spatial = [(x.shape[2 + i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1
               - pads[i][0] - pads[i][1] for i in range(n)]
    b = _bias(g, bias, c_out, dtype)
    y = g.op("deconv", x, w, b if not any(extra) else g.scalar(0.0, dtype),
             border="constant", padding=pads, stride=stride, dilation=dilation,
             groups=groups, out_shape=[x.shape[0], c_out] + spatial, out_dtype=dtype)
    if any(extra):
        shape = [x.shape[0], c_out] + [s + e for s, e in zip(spatial, extra)]
        y = g.op("pad", y, padding=[(0, 0), (0, 0)] + [(0, e) for e in extra],
                 border="constant", value=0.0, out_shape=shape, out_dtype=dtype)
        if bias is not None:
            b = g.unsqueeze_to_rank(b, 2)
            b = g.reshaped_const(b, (1, c_out) + (1,) * n) if b.is_const else \
                g.unsqueeze(b, list(range(2, 2 + n)))
            y = g.binary("add", y, b, dtype)
    return g.squeeze(y, [0]) if added else y


def _column_filter(g, weight, groups):
    """PyTorch [C_in, C_out/g, k...] -> the [g * C_out/g * K, C_in/g, 1...] filter of the
    1x1 convolution that computes every tap's column (channel order (C_out, tap))."""
    c_in, c_out_g = weight.shape[0], weight.shape[1]
    kernel = list(weight.shape[2:])
    if not isinstance(c_in, int) or c_in % groups:
        raise g.error(f"weight: {c_in} input channels do not split into {groups} groups")
    taps = math.prod(kernel)
    shape = [groups * c_out_g * taps, c_in // groups] + [1] * len(kernel)
    if weight.is_const:
        w = weight.value.reshape(groups, c_in // groups, c_out_g * taps).transpose(1, 2)
        return _derived_const(g, weight, w.reshape(shape).contiguous())
    w = g.reshape(weight, [groups, c_in // groups, c_out_g * taps])
    return g.reshape(g.transpose(w, [0, 2, 1]), shape)


def _conv_transpose_f16(g, x, weight, bias, stride, padding, output_padding, groups,
                        dilation):
    """PyTorch's float16 transposed convolution: ``columns = W^T x`` (f32 sums rounded to
    f16), then ``col2im`` adds tap ``k``'s column into the output for k = 0, 1, ... in f16,
    then the bias (one ordered scan over the kernel taps)."""
    n = weight.rank - 2
    kernel, sizes = list(weight.shape[2:]), list(x.shape[2:])
    if not all(isinstance(d, int) for d in sizes + kernel):
        raise g.error("input: a float16 transposed convolution needs fixed spatial sizes "
                      "(PyTorch adds its columns in f16 in order); export the model in float32")
    c_out = weight.shape[1] * groups
    f32 = torch.float32
    w = _column_filter(g, g.cast(weight, f32), groups)
    cols = g.op("conv", g.cast(x, f32), w, g.scalar(0.0, f32), border="constant",
                padding=[(0, 0)] * n, stride=[1] * n, dilation=[1] * n, groups=groups,
                out_shape=[x.shape[0], w.shape[0]] + sizes, out_dtype=f32)
    taps = math.prod(kernel)
    cols = g.reshape(g.cast(cols, torch.float16), [x.shape[0], c_out, taps] + sizes)
    out = [(sizes[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (kernel[i] - 1)
           + output_padding[i] + 1 for i in range(n)]
    if any(o <= 0 for o in out):
        raise g.error(f"input: transposed convolution output size {out} is not positive")
    tables = col2im_tables(3, sizes, kernel, stride, padding, dilation, out)
    y = ordered_tap_sum(g, cols, tables, tap_axis=2)
    y = g.reshape(y, [x.shape[0], c_out] + out)
    if bias is not None:
        b = g.cast(bias, torch.float16)
        b = g.reshaped_const(b, (c_out,) + (1,) * n) if b.is_const else \
            g.unsqueeze(b, list(range(1, 1 + n)))
        y = g.binary("add", y, b, torch.float16)
    return y


def _same_pads(g, weight, stride, dilation):
    n = weight.rank - 2
    if any(s != 1 for s in as_list(stride, n)):
        raise g.error("padding: 'same' needs stride 1 (PyTorch refuses it too)")
    pads = []
    for k, d in zip(weight.shape[2:], as_list(dilation, n)):
        total = d * (k - 1)
        pads.append((total // 2, total - total // 2))
    return pads


def _pads(g, weight, padding, stride, dilation):
    """Explicit (before, after) pairs from PyTorch's int/list/'same'/'valid' padding."""
    n = weight.rank - 2
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * n
        if padding == "same":
            return _same_pads(g, weight, stride, dilation)
        raise g.error(f"padding: unknown mode {padding!r}")
    return [(p, p) for p in as_list(padding, n)]


@aten("_convolution", "convolution")
def _convolution(g, input, weight, bias, stride, padding, dilation, transposed,
                 output_padding, groups, *_):
    if transposed:
        return conv_transpose_nd(g, input, weight, bias, stride, padding, output_padding,
                                 groups, dilation)
    return conv_nd(g, input, weight, bias, stride, _pads(g, weight, padding, stride, dilation),
                   dilation, groups)


@aten("_convolution_mode", "conv1d", "conv2d", "conv3d")
def conv(g, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv_nd(g, input, weight, bias, stride, _pads(g, weight, padding, stride, dilation),
                   dilation, groups)


@aten("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
def conv_transpose(g, input, weight, bias=None, stride=1, padding=0, output_padding=0,
                   groups=1, dilation=1):
    return conv_transpose_nd(g, input, weight, bias, stride, padding, output_padding, groups,
                             dilation)
