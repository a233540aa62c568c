"""``col2im`` (``F.fold``, ``nn.Fold``): sum sliding blocks back into an image.

``F.fold`` is the adjoint of ``F.unfold``: column ``l`` of ``[N, C*kh*kw, L]`` holds the
``kh x kw`` block at grid position ``l`` (``L = Lh * Lw`` positions of the block grid) and
every block is added at its place, overlaps summing (VOLO's outlook attention). That is a
transposed convolution of the ``[N, C*kh*kw, Lh, Lw]`` grid, grouped by channel, whose filter
sends input channel ``c*kh*kw + i*kw + j`` to tap ``(i, j)`` of output channel ``c`` (a
one-hot ``[C, kh*kw, kh, kw]`` filter), with the block stride, dilation and padding. So the
lowering is one ``deconv`` (two ops more for a reshape and, when the image has rows no block
reaches, a zero pad), whatever the sizes. In float16 PyTorch adds the blocks into the image
in f16, tap after tap: the same order is kept with one scan over the kernel taps
(:mod:`t2n.mappings.helpers.ordered_sum`).
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.ordered_sum import col2im_tables, ordered_tap_sum
from t2n.walk.registry import aten


def _pair(v, what: str, g) -> list:
    v = [v] * 2 if isinstance(v, int) else list(v)
    if len(v) == 1:
        v = v * 2
    if len(v) != 2:
        raise g.error(f"{what}: col2im takes 2 values (a 2-d image), got {len(v)}")
    return v


@aten("col2im")
def col2im(g, self, output_size, kernel_size, dilation, padding, stride):
    size = _pair(output_size, "output_size", g)
    kernel = _pair(kernel_size, "kernel_size", g)
    dilation = _pair(dilation, "dilation", g)
    padding = _pair(padding, "padding", g)
    stride = _pair(stride, "stride", g)
    if not self.dtype.is_floating_point:
        raise g.error(f"self: col2im of {self.dtype} tensors is not supported (PyTorch folds "
                      "floats only)")
    if self.rank not in (2, 3):
        raise g.error(f"self: col2im takes [N, C*kh*kw, L] or [C*kh*kw, L], got rank "
                      f"{self.rank}")
    for name, v in (("output_size", size), ("kernel_size", kernel), ("dilation", dilation),
                    ("stride", stride)):
        if not all(isinstance(d, int) and d > 0 for d in v):
            raise g.error(f"{name}: col2im needs static positive values, got {v}")
    if not all(isinstance(p, int) and p >= 0 for p in padding):
        raise g.error(f"padding: col2im needs static values >= 0, got {padding}")
    x = self if self.rank == 3 else g.unsqueeze(self, [0])
    n, ckk, length = x.shape
    taps = kernel[0] * kernel[1]
    if not isinstance(ckk, int) or ckk % taps:
        raise g.error(f"self: dim 1 ({ckk}) must be a static multiple of kh*kw = {taps}")
    channels = ckk // taps
    grid, rest = [], []
    for i in range(2):
        span = size[i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1
        if span < 0:
            raise g.error(f"output_size: {size} is smaller than one block of "
                          f"kernel_size={kernel}, dilation={dilation}, padding={padding}")
        grid.append(span // stride[i] + 1)
        rest.append(span % stride[i])  # image rows/cols after the last block (no input)
    if not isinstance(length, int):
        raise g.error(f"self: the block count (last axis) is dynamic, but output_size={size} "
                      f"fixes it to {grid[0] * grid[1]}; export it with a static size")
    if length != grid[0] * grid[1]:
        raise g.error(f"self: {length} blocks given where output_size={size} holds "
                      f"{grid[0]}x{grid[1]} = {grid[0] * grid[1]} (PyTorch refuses it too)")
    if self.dtype == torch.float16:
        cols = g.reshape(x, [n, channels, taps, grid[0], grid[1]])
        y = ordered_tap_sum(g, cols, col2im_tables(3, grid, kernel, stride, padding, dilation,
                                                   size), tap_axis=2)
        y = g.reshape(y, [n, channels] + size)
        return y if self.rank == 3 else g.squeeze(y, [0])
    x = g.reshape(x, [n, ckk, grid[0], grid[1]])
    taps_eye = torch.eye(taps, dtype=self.dtype).reshape(taps, kernel[0], kernel[1])
    w = g.const(taps_eye.expand(channels, taps, kernel[0], kernel[1]).contiguous())
    # deconv's full output is (L-1)*s + d*(k-1) + 1 = size + 2*p - rest, cropped by `pads`;
    # the `rest` last rows receive no block: cropped less, or zero-padded when p < rest
    pads = [(padding[i], max(padding[i] - rest[i], 0)) for i in range(2)]
    extra = [max(rest[i] - padding[i], 0) for i in range(2)]
    inner = [size[i] - extra[i] for i in range(2)]
    y = g.op("deconv", x, w, g.scalar(0.0, self.dtype), border="constant", padding=pads,
             stride=stride, dilation=dilation, groups=channels,
             out_shape=[n, channels] + inner, out_dtype=self.dtype)
    if any(extra):
        y = g.op("pad", y, padding=[(0, 0), (0, 0)] + [(0, e) for e in extra],
                 border="constant", value=0.0, out_shape=[n, channels] + size,
                 out_dtype=self.dtype)
    return y if self.rank == 3 else g.squeeze(y, [0])
