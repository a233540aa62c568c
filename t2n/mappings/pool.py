"""Pooling: ``max_pool1d/2d/3d``, ``avg_pool1d/2d/3d``, ``adaptive_avg_pool1d/2d/3d``.

tract pools with NNEF ``max_pool``/``avg_pool``/``box`` whose ``size``, ``stride``,
``dilation`` and ``padding`` cover every axis (batch and channel get 1 / no padding), and
whose default padding is automatic ("same"), so padding is always explicit. Borders:
``ignore`` leaves padded positions out of the max and out of the average's divisor,
``constant`` counts them as zeros.

PyTorch's ``ceil_mode`` adds a last, partial window unless it would start in the end
padding; it is reproduced with extra end padding that tract ignores. For average pooling
with ``count_include_pad=True`` PyTorch's divisor counts the user's padding but not that
extra ceil region, so the user's padding is applied as real zeros (``pad``) and only the
ceil region is left to the ``ignore`` border.

Known divergences of tract's ``max_pool``, kept because this is the hot CNN path: a window
holding NaN gives the max of its other values (PyTorch: NaN), and a window of only -inf gives
the lowest finite float (PyTorch: -inf). ``max_pool*_with_indices`` (pool_indices.py) and the
max/min reductions follow PyTorch in both cases.
"""

from __future__ import annotations

import math

import torch

from t2n.mappings.helpers.integer_conv import integer_conv
from t2n.mappings.helpers.matrix import matmul_nd
from t2n.mappings.helpers.ordered_sum import ordered_tap_sum
from t2n.mappings.helpers.windows import as_list, window_geometry
from t2n.walk.registry import aten


def _attrs(lead, k, s, d, pads):
    return dict(size=[1] * lead + k, stride=[1] * lead + s, dilation=[1] * lead + d,
                padding=[(0, 0)] * lead + [tuple(x) for x in pads])


def _unbatched(fn):
    """tract pools assume [N, C, spatial...]: an unbatched [C, spatial...] input gets a
    batch axis for the pool and loses it after."""

    def wrapper(g, self, *args):
        n = args[-1]
        if self.rank == n + 1:
            return g.squeeze(fn(g, g.unsqueeze(self, [0]), *args), [0])
        return fn(g, self, *args)

    wrapper.__doc__ = fn.__doc__
    return wrapper


@_unbatched
def _max_pool(g, self, kernel_size, stride, padding, dilation, ceil_mode, n):
    if self.dtype == torch.bool:
        raise g.error("self: max pooling of bool tensors is not supported")
    lead, k, s, p, d, sizes, extra = window_geometry(g, self, kernel_size, stride, padding,
                                               dilation, ceil_mode, n)
    pads = [(p[i], p[i] + extra[i]) for i in range(n)]
    return g.op("max_pool", self, border="ignore", out_shape=list(self.shape[:lead]) + sizes,
                **_attrs(lead, k, s, d, pads))


@aten("max_pool1d")
def max_pool1d(g, self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(g, self, kernel_size, stride, padding, dilation, ceil_mode, 1)


@aten("max_pool2d")
def max_pool2d(g, self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(g, self, kernel_size, stride, padding, dilation, ceil_mode, 2)


@aten("max_pool3d")
def max_pool3d(g, self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(g, self, kernel_size, stride, padding, dilation, ceil_mode, 3)


@_unbatched
def _avg_pool(g, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override, n):
    if self.dtype == torch.bool:
        raise g.error("self: average pooling of torch.bool tensors is not supported "
                      "(PyTorch has none either)")
    lead, k, s, p, d, sizes, extra = window_geometry(g, self, kernel_size, stride, padding, 1,
                                               ceil_mode, n)
    if not self.dtype.is_floating_point:
        return _integer_avg_pool(g, self, lead, k, s, p, sizes, extra, count_include_pad,
                                 divisor_override)
    out_shape = list(self.shape[:lead]) + sizes
    x = self
    if any(p[i] and g.streams(x, lead + i) for i in range(n)):
        return _avg_pool_streaming(g, x, lead, k, s, d, p, extra, out_shape,
                                   count_include_pad, divisor_override)
    if divisor_override is not None:
        if divisor_override == 0:
            raise g.error("divisor_override: must not be zero")
        # window sums (padding and the ceil region add zeros), divided by the given number
        pads = [(p[i], p[i] + extra[i]) for i in range(n)]
        total = g.op("box", x, border="constant", normalize=False, out_shape=out_shape,
                     **_attrs(lead, k, s, d, pads))
        return g.binary("div", total, float(divisor_override), x.dtype)
    if count_include_pad and any(p):
        if not any(extra):
            pads = [(p[i], p[i]) for i in range(n)]
            return g.op("avg_pool", x, border="constant", out_shape=out_shape,
                        **_attrs(lead, k, s, d, pads))
        # the user's padding counts in the divisor, the ceil region does not
        shape = list(x.shape[:lead]) + [x.shape[lead + i] + 2 * p[i] for i in range(n)]
        x = g.op("pad", x, padding=[(0, 0)] * lead + [(q, q) for q in p], border="constant",
                 value=0.0, out_shape=shape)
        pads = [(0, extra[i]) for i in range(n)]
    else:
        pads = [(p[i], p[i] + extra[i]) for i in range(n)]
    border = "ignore" if any(a or b for a, b in pads) else "constant"
    return g.op("avg_pool", x, border=border, out_shape=out_shape,
                **_attrs(lead, k, s, d, pads))


def _integer_avg_pool(g, x, lead, k, s, p, sizes, extra, count_include_pad,
                      divisor_override):
    """PyTorch's integer average: the window's integer sum (a depthwise integer convolution
    of ones, exact) divided with truncation by the kernel's divisor, which depends on the
    geometry only (a constant): the window clipped to input + padding when the padding
    counts, to the input when it does not; 0 where a window holds no input."""
    n = len(k)
    if divisor_override is not None and divisor_override == 0:
        raise g.error("divisor_override: must not be zero")
    if any(not isinstance(x.shape[lead + i], int) for i in range(n)):
        raise g.error("self: integer average pooling over a dynamic axis is not supported")
    c = x.shape[lead - 1]
    xb = g.unsqueeze(x, [0]) if lead == 1 else x
    ones = g.const(torch.ones([c, 1] + list(k), dtype=x.dtype))
    total = integer_conv(g, xb, ones, None, s, [(p[i], p[i] + extra[i]) for i in range(n)],
                         [1] * n, c)
    if lead == 1:
        total = g.squeeze(total, [0])
    div = torch.ones(sizes, dtype=torch.int64)
    empty = torch.zeros(sizes, dtype=torch.bool)
    for i in range(n):
        size = x.shape[lead + i]
        start = torch.arange(sizes[i]) * s[i] - p[i]
        end = torch.clamp(start + k[i], max=size + p[i])
        count = torch.clamp(end, max=size) - torch.clamp(start, min=0)
        shape = [1] * n
        shape[i] = sizes[i]
        div = div * (end - start if count_include_pad else count).reshape(shape)
        empty = empty | (count <= 0).reshape(shape)
    if divisor_override is not None:
        div = torch.full(sizes, int(divisor_override), dtype=torch.int64)
    div = torch.where(empty, 1, div)  # the sum of an empty window is 0: 0 / 1
    div = g.const(div.to(x.dtype).reshape([1] * lead + list(sizes)))
    return g.binary("div", total, div, x.dtype)


def _avg_pool_streaming(g, x, lead, k, s, d, p, extra, out_shape, count_include_pad,
                       divisor_override):
    """Average pooling padded on the streaming axis, in a form tract pulses: tract cannot
    pulse a pool's own padding ("no padding value for streaming pool"), so the padding is a
    ``pad`` of zeros, the window sums a ``box`` without padding, and the divisor the same
    ``box`` over ones (padded with ones when the padding counts, zeros when it does not;
    the ceil region of static axes never counts)."""
    n = len(k)
    c = x.shape[1] if x.rank == n + 2 else None
    if isinstance(c, int) and not (count_include_pad and any(extra)):
        return _avg_pool_as_conv(g, x, c, k, s, p, extra, out_shape, count_include_pad,
                                 divisor_override)
    pads = [(0, 0)] * lead + [(p[i], p[i]) for i in range(n)]
    attrs = _attrs(lead, k, s, d, [(0, extra[i]) for i in range(n)])
    padded = [x.shape[lead + i] + 2 * p[i] for i in range(n)]
    xp = g.op("pad", x, padding=pads, border="constant", value=0.0,
              out_shape=list(x.shape[:lead]) + padded)
    total = g.op("box", xp, border="constant", normalize=False, out_shape=out_shape, **attrs)
    if divisor_override is not None:
        if divisor_override == 0:
            raise g.error("divisor_override: must not be zero")
        return g.binary("div", total, float(divisor_override), x.dtype)
    ones = g.broadcast_to(g.scalar(1.0, x.dtype), [1] * lead + list(x.shape[lead:]))
    onesp = g.op("pad", ones, padding=pads, border="constant",
                 value=1.0 if count_include_pad else 0.0, out_shape=[1] * lead + padded)
    count = g.op("box", onesp, border="constant", normalize=False,
                 out_shape=[1] * lead + out_shape[lead:], **attrs)
    return g.binary("div", total, count, x.dtype)


def _avg_pool_as_conv(g, x, c, k, s, p, extra, out_shape, count_include_pad,
                      divisor_override):
    """The window sums as a depthwise convolution of ones (tract pulses a convolution's
    padding with the least delay: half the window, not the whole), divided by the window
    size, or by the same convolution over ones where padding does not count."""
    n = len(k)
    pads = [(p[i], p[i] + extra[i]) for i in range(n)]
    conv = dict(border="constant", padding=pads, stride=s, dilation=[1] * n)
    w = g.const(torch.ones([c, 1] + list(k), dtype=x.dtype))
    total = g.op("conv", x, w, g.scalar(0.0, x.dtype), groups=c, out_shape=out_shape, **conv)
    if divisor_override is not None:
        if divisor_override == 0:
            raise g.error("divisor_override: must not be zero")
        return g.binary("div", total, float(divisor_override), x.dtype)
    if count_include_pad:
        return g.binary("div", total, float(math.prod(k)), x.dtype)
    ones = g.broadcast_to(g.scalar(1.0, x.dtype), [1, 1] + list(x.shape[2:]))
    count = g.op("conv", ones, g.const(torch.ones([1, 1] + list(k), dtype=x.dtype)),
                 g.scalar(0.0, x.dtype), groups=1, out_shape=[1, 1] + out_shape[2:], **conv)
    return g.binary("div", total, count, x.dtype)


@aten("avg_pool1d")
def avg_pool1d(g, self, kernel_size, stride=(), padding=0, ceil_mode=False,
               count_include_pad=True):
    return _avg_pool(g, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     None, 1)


@aten("avg_pool2d")
def avg_pool2d(g, self, kernel_size, stride=(), padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _avg_pool(g, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, 2)


@aten("avg_pool3d")
def avg_pool3d(g, self, kernel_size, stride=(), padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _avg_pool(g, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, 3)


def _adaptive_windows(length: int, out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive windows: [floor(i*L/out), ceil((i+1)*L/out))."""
    return [((i * length) // out, -(-((i + 1) * length) // out)) for i in range(out)]


def _average_matrix(length: int, out: int, dtype) -> torch.Tensor:
    """[out, length] matrix whose row i averages PyTorch's i-th adaptive window."""
    m = torch.zeros(out, length, dtype=torch.float64)
    for i, (a, b) in enumerate(_adaptive_windows(length, out)):
        m[i, a:b] = 1.0 / (b - a)
    return m.to(dtype)


def _adaptive_axis(g, x, axis, out):
    """Adaptive average along one axis: a mean (global), a reshape+mean (divisible) or a
    product with a constant averaging matrix (PyTorch's overlapping uneven windows)."""
    length = x.shape[axis]
    if out is None or (isinstance(length, int) and length == out):
        return x
    if out == 1:
        return g.reduce("mean_reduce", x, [axis], keepdim=True)
    if not isinstance(length, int):
        raise g.error(f"output_size: {out} on a symbolic axis needs fixed windows "
                      "(only output size 1 is supported there)")
    if length == 0 or out <= 0:
        raise g.error(f"output_size: {out} from an axis of size {length}")
    if length % out == 0:
        k = length // out
        shape = list(x.shape[:axis]) + [out, k] + list(x.shape[axis + 1:])
        y = g.reduce("mean_reduce", g.reshape(x, shape), [axis + 1], keepdim=False)
        return y
    m = g.const(_average_matrix(length, out, x.dtype))
    # move the axis last, multiply by the transposed averaging matrix, move it back
    perm = [i for i in range(x.rank) if i != axis] + [axis]
    inv = [perm.index(i) for i in range(x.rank)]
    y = matmul_nd(g, g.transpose(x, perm), m, transpose_b=True)
    return g.transpose(y, inv)


def _adaptive_avg(g, self, output_size, n):
    if self.rank not in (n + 1, n + 2):
        raise g.error(f"self: expected rank {n + 1} or {n + 2}, got {self.rank}")
    if not self.dtype.is_floating_point:
        raise g.error(f"self: average pooling of {self.dtype} tensors is not supported")
    out = as_list(output_size, n) if output_size is not None else [None] * n
    x = self
    lead = self.rank - n
    if n == 3 and self.dtype == torch.float16:
        # t2n.walk.opmath keeps f16 here: PyTorch's 3-D kernel sums each window in f16
        return _adaptive_avg3d_f16(g, self, out)
    if all(o == 1 for o in out):  # global average pooling: one reduction
        return g.reduce("mean_reduce", x, list(range(lead, x.rank)), keepdim=True)
    for i in range(n):
        x = _adaptive_axis(g, x, lead + i, out[i])
    return x


def _adaptive_avg3d_f16(g, x, out):
    """PyTorch's float16 ``adaptive_avg_pool3d`` kernel: ``sum = 0; sum += v`` over the
    window in (t, h, w) raster order, each addition rounded to f16, then
    ``sum / kT / kH / kW``, each division rounded (one ordered scan over the window taps)."""
    lead = x.rank - 3
    sizes = list(x.shape[lead:])
    out = [s if o is None else o for o, s in zip(out, sizes)]
    for axis, (length, o) in enumerate(zip(sizes, out)):
        if not isinstance(length, int):
            raise g.error(f"self: float16 adaptive average pooling needs a fixed size on "
                          f"spatial axis {lead + axis} (PyTorch sums its windows in f16 in "
                          "order); export the model in float32")
        if length == 0 or o <= 0:
            raise g.error(f"output_size: {o} from an axis of size {length}")
    windows = [_adaptive_windows(length, o) for length, o in zip(sizes, out)]
    spans = [max(b - a for a, b in w) for w in windows]
    taps = torch.cartesian_prod(*[torch.arange(k) for k in spans]).reshape(-1, 3)
    tables = []
    for axis, w in enumerate(windows):
        start = torch.tensor([a for a, _ in w])
        end = torch.tensor([b for _, b in w])
        pos = start[None, :] + taps[:, axis:axis + 1]
        tables.append((lead + axis, torch.where(pos < end[None, :], pos, sizes[axis])))
    total = ordered_tap_sum(g, x, tables)
    for axis, w in enumerate(windows):
        count = torch.tensor([float(b - a) for a, b in w], dtype=torch.float16)
        count = count.reshape([len(w)] + [1] * (2 - axis))
        total = g.binary("div", total, g.const(count), torch.float16)
    return total


@aten("adaptive_avg_pool1d")
def adaptive_avg_pool1d(g, self, output_size):
    return _adaptive_avg(g, self, output_size, 1)


@aten("adaptive_avg_pool2d", "_adaptive_avg_pool2d")
def adaptive_avg_pool2d(g, self, output_size):
    return _adaptive_avg(g, self, output_size, 2)


@aten("adaptive_avg_pool3d", "_adaptive_avg_pool3d")
def adaptive_avg_pool3d(g, self, output_size):
    return _adaptive_avg(g, self, output_size, 3)
