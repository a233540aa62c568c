"""Integer convolutions, exact: tract convolves floats only (an integer ``conv`` is refused
by its kernels), so an integer convolution is written as gathers and one exact integer
product.

- The input is zero-padded (or cropped, for negative padding), then each spatial axis of
  size P is gathered with a constant ``[L, K]`` index (``l * stride + k * dilation``): the
  axis becomes its output positions times its kernel taps (im2col, n gathers for n spatial
  axes).
- The channels split into groups and one integer einsum (:func:`matrix.einsum_op`: a
  broadcast product and a sum, tract's integer ``mul`` and sums wrap) contracts the
  channels of a group and the taps. Two's-complement sums do not depend on the order of
  the terms, so the result is PyTorch's bit for bit, overflow included.
- A transposed convolution is the forward convolution of the input dilated by the stride
  (stride - 1 zeros between elements) with the regrouped, spatially flipped filter,
  padded by ``dilation * (k - 1) - padding`` (plus ``output_padding`` at the end).

The op count depends on the rank only; the product's intermediate holds every (output,
channel of the group, tap) combination, which is the work of the convolution.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.matrix import einsum_op

_LETTERS = "pqrstuvwxyz"


def _pad_or_crop(g, x, axis, before, after):
    n = x.shape[axis]
    if before < 0 or after < 0:
        x = g.slice(x, axis, max(-before, 0), n - max(-after, 0))
        before, after = max(before, 0), max(after, 0)
    if before or after:
        pads = [(0, 0)] * x.rank
        pads[axis] = (before, after)
        shape = list(x.shape)
        shape[axis] = shape[axis] + before + after
        x = g.op("pad", x, padding=pads, border="constant", value=0.0, out_shape=shape,
                 out_dtype=x.dtype)
    return x


def integer_conv(g, x, w, bias, stride, pads, dilation, groups):
    """conv of a batched integer ``x`` [N, C, *S] with ``w`` [O, C/groups, *K], explicit
    ``pads = [(before, after), ...]`` (negative crops), in ``x``'s dtype."""
    n = w.rank - 2
    kernel = [int(k) for k in w.shape[2:]]
    c_in, c_out = x.shape[1], w.shape[0]
    if not isinstance(c_in, int) or c_in % groups or c_out % groups:
        raise g.error(f"groups: {c_in} input and {c_out} output channels do not split into "
                      f"{groups} groups")
    for i in range(n):
        if not isinstance(x.shape[2 + i], int):
            raise g.error("input: an integer convolution over a dynamic spatial axis is not "
                          "supported")
        x = _pad_or_crop(g, x, 2 + i, pads[i][0], pads[i][1])
    lengths = []
    for i in range(n):
        axis = 2 + 2 * i  # earlier spatial axes have become (positions, taps)
        size = x.shape[axis]
        out = (size - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
        if out <= 0:
            raise g.error(f"input: spatial size {size} (padded) is smaller than the kernel")
        lengths.append(out)
        index = (torch.arange(out).reshape(out, 1) * stride[i]
                 + torch.arange(kernel[i]).reshape(1, kernel[i]) * dilation[i])
        x = g.gather(x, g.const(index), axis)
    batch = x.shape[0]
    cg, og = c_in // groups, c_out // groups
    x = g.reshape(x, [batch, groups, cg] + list(x.shape[2:]))
    w = g.reshape(g.cast(w, x.dtype), [groups, og, cg] + kernel)
    pos, taps = _LETTERS[:n], _LETTERS[n:2 * n]
    spec = f"ngc{''.join(p + t for p, t in zip(pos, taps))},goc{taps}->ngo{pos}"
    y = einsum_op(g, spec, [x, w], [batch, groups, og] + lengths, x.dtype)
    y = g.reshape(y, [batch, c_out] + lengths)
    if bias is not None:
        b = g.reshape(g.cast(bias, x.dtype), [1, c_out] + [1] * n)
        y = g.binary("add", y, b, x.dtype)
    return y


def dilate(g, x, axis, stride):
    """``stride - 1`` zeros between the elements along ``axis``."""
    if stride == 1:
        return x
    size = x.shape[axis]
    x = g.unsqueeze(x, [axis + 1])
    x = _pad_or_crop(g, x, axis + 1, 0, stride - 1)
    shape = list(x.shape[:axis]) + [size * stride] + list(x.shape[axis + 2:])
    x = g.reshape(x, shape)
    return g.slice(x, axis, 0, (size - 1) * stride + 1)


def flip_spatial(g, w):
    """The filter reversed along each spatial axis (axes 2..)."""
    for axis in range(2, w.rank):
        k = int(w.shape[axis])
        w = g.gather(w, g.const(torch.arange(k - 1, -1, -1)), axis)
    return w
