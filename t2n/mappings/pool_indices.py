"""Max pooling that returns indices, adaptive max pooling, max unpooling and the max
pooling gradient: ``max_pool1d/2d/3d_with_indices``, ``adaptive_max_pool1d/2d/3d``,
``max_unpool2d/3d``, ``max_pool2d/3d_with_indices_backward``.

tract has no pool that returns positions, so windows are extracted explicitly: the input's
spatial axes are flattened into one plane per (N, C), and one ``tract_core_gather`` with a
constant [P, K] table (P output positions, K window slots, built in Python from the
geometry) gives every window. Then

* values  = ``max_reduce`` over the slots (slots in padding or past a short window are
  masked to the dtype's lowest value; an all -inf window is repaired, as tract's float
  ``max_reduce`` stops at the lowest finite value);
* indices = the smallest plane position among the slots that equal the maximum. PyTorch
  scans a window in row-major order and keeps the first strict maximum; plane positions
  grow along that scan order, so the first one is the smallest.

A float window holding NaN gives NaN and the position of its LAST NaN, as PyTorch's
``val > max || isnan(val)`` scan does (tract's own ``max_pool`` skips NaN; this path is not a
hot one, so PyTorch's rule is kept here). The op count is fixed; the table costs P*K i64.

Unpooling scatters each plane's values to its indices in a zero plane with
``tract_core_scatter_elements`` (last write wins on duplicates, as PyTorch's CPU loop).
An index outside the output plane (PyTorch raises) is sent to a spare slot that is cut off,
because tract aborts the process on an out-of-range scatter. The pooling gradient is the
same scatter with ``add``.
"""

from __future__ import annotations

import math

import torch

from t2n.mappings.helpers.elementwise import is_nan, select
from t2n.mappings.helpers.windows import as_list, window_geometry
from t2n.walk.registry import aten


def _lowest(dtype):
    if dtype.is_floating_point:
        return float("-inf")
    return torch.iinfo(dtype).min


def _pool_axis(length, k, s, p, d, out):
    o = torch.arange(out).unsqueeze(1)
    coord = o * s - p + torch.arange(k).unsqueeze(0) * d
    return coord, (coord >= 0) & (coord < length), length


def _adaptive_axis(length, out):
    starts = torch.tensor([(i * length) // out for i in range(out)])
    ends = torch.tensor([-(-((i + 1) * length) // out) for i in range(out)])
    k = int((ends - starts).max())
    j = torch.arange(k).unsqueeze(0)
    coord = starts.unsqueeze(1) + j
    return coord, j < (ends - starts).unsqueeze(1), length


def _windows_table(axes):
    """Per-axis windows ``(coord [o_i, k_i], valid [o_i, k_i], length_i)`` combined into a
    [P, K] table of plane positions (row-major) and its validity mask; slots are row-major
    in the window, PyTorch's scan order. Invalid slots point at position 0 (in range)."""
    n = len(axes)
    grids = []
    for i, (coord, valid, length) in enumerate(axes):
        shape = [1] * (2 * n)
        shape[i], shape[n + i] = coord.shape
        grids.append((coord.reshape(shape), valid.reshape(shape), length))
    full = torch.broadcast_shapes(*(c.shape for c, _, _ in grids))
    flat = torch.zeros(full, dtype=torch.int64)
    ok = torch.ones(full, dtype=torch.bool)
    stride = 1
    for coord, valid, length in reversed(grids):
        flat = flat + torch.where(valid, coord, 0) * stride
        ok = ok & valid
        stride *= length
    p = math.prod(full[:n])
    return flat.reshape(p, -1), ok.reshape(p, -1)


def _window_max(g, x, axes, out_spatial):
    """Values and PyTorch indices of the max over each window of a batched
    [N, C, spatial...] tensor; ``axes`` describes the windows of each spatial axis."""
    lead = x.rank - len(axes)
    plane = math.prod(x.shape[lead:])
    flat, ok = _windows_table(axes)
    p, k = flat.shape
    dtype = x.dtype
    planes = g.reshape(x, list(x.shape[:lead]) + [plane])
    win = g.gather(planes, g.const(flat), lead)  # [N, C, P, K]
    table = g.const(flat.reshape([1] * lead + [p, k]))
    mask = None if bool(ok.all()) else g.const(ok.reshape([1] * lead + [p, k]))
    masked = win if mask is None else select(g, mask, win, _lowest(dtype), dtype)
    values = g.reduce("max_reduce", masked, [lead + 1], keepdim=True)
    hit = g.binary("eq", win, values, dtype, out_dtype=torch.bool)
    if mask is not None:
        hit = g.binary("and", hit, mask, torch.bool)
    big = g.scalar(plane, torch.int64)
    first = g.reduce("min_reduce", select(g, hit, table, big, torch.int64), [lead + 1],
                     keepdim=True)
    if dtype.is_floating_point:
        # tract's max_reduce never goes below the lowest finite float: a window holding
        # only -inf finds no slot equal to its "max"; its max is -inf at its first slot
        lost = g.binary("eq", first, big, torch.int64, out_dtype=torch.bool)
        first_valid = torch.where(ok, flat, plane).min(dim=1).values
        first = select(g, lost, g.const(first_valid.reshape([1] * lead + [p, 1])), first,
                       torch.int64)
        values = select(g, lost, float("-inf"), values, dtype)
        nan = is_nan(g, win)
        if mask is not None:
            nan = g.binary("and", nan, mask, torch.bool)
        any_nan = g.reduce("any_reduce", nan, [lead + 1], keepdim=True)
        last_nan = g.reduce("max_reduce", select(g, nan, table, -1, torch.int64), [lead + 1],
                            keepdim=True)
        values = select(g, any_nan, g.scalar(float("nan"), dtype), values, dtype)
        first = select(g, any_nan, last_nan, first, torch.int64)
    shape = list(x.shape[:lead]) + list(out_spatial)
    return g.reshape(values, shape), g.reshape(first, shape)


def _batched(g, self, n, fn):
    """Run ``fn`` on a [N, C, spatial...] view of a possibly unbatched input."""
    if self.rank == n + 1:
        outs = fn(g.unsqueeze(self, [0]))
        return tuple(g.squeeze(t, [0]) for t in outs)
    if self.rank != n + 2:
        raise g.error(f"self: expected rank {n + 1} or {n + 2}, got {self.rank}")
    return fn(self)


def _static_spatial(g, self, n):
    spatial = list(self.shape[self.rank - n:])
    if not all(isinstance(d, int) for d in spatial):
        raise g.error(f"self: the spatial axes {spatial} must be static to index windows")
    if any(d == 0 for d in spatial):
        raise g.error(f"self: empty spatial axes {spatial}")
    return spatial


def _check_dtype(g, self):
    if self.dtype == torch.bool:
        raise g.error("self: max pooling of bool tensors is not supported")


def _max_pool_with_indices(g, self, kernel_size, stride, padding, dilation, ceil_mode, n):
    _check_dtype(g, self)

    def run(x):
        spatial = _static_spatial(g, x, n)
        lead, k, s, p, d, sizes, _ = window_geometry(g, x, kernel_size, stride, padding, dilation,
                                               ceil_mode, n)
        for i in range(n):
            if p[i] > k[i] // 2:
                raise g.error(f"padding: {p[i]} is more than half the kernel {k[i]}")
        axes = [_pool_axis(spatial[i], k[i], s[i], p[i], d[i], sizes[i]) for i in range(n)]
        return _window_max(g, x, axes, sizes)

    return _batched(g, self, n, run)


@aten("max_pool1d_with_indices")
def max_pool1d_with_indices(g, self, kernel_size, stride=(), padding=0, dilation=1,
                            ceil_mode=False):
    return _max_pool_with_indices(g, self, kernel_size, stride, padding, dilation, ceil_mode, 1)


@aten("max_pool2d_with_indices")
def max_pool2d_with_indices(g, self, kernel_size, stride=(), padding=0, dilation=1,
                            ceil_mode=False):
    return _max_pool_with_indices(g, self, kernel_size, stride, padding, dilation, ceil_mode, 2)


@aten("max_pool3d_with_indices")
def max_pool3d_with_indices(g, self, kernel_size, stride=(), padding=0, dilation=1,
                            ceil_mode=False):
    return _max_pool_with_indices(g, self, kernel_size, stride, padding, dilation, ceil_mode, 3)


def _adaptive_max(g, self, output_size, n):
    _check_dtype(g, self)
    out = as_list(output_size, n)

    def run(x):
        spatial = _static_spatial(g, x, n)
        if any(o is None or o <= 0 for o in out):
            raise g.error(f"output_size: {list(out)} must be positive sizes")
        axes = [_adaptive_axis(spatial[i], out[i]) for i in range(n)]
        return _window_max(g, x, axes, out)

    return _batched(g, self, n, run)


@aten("adaptive_max_pool1d")
def adaptive_max_pool1d(g, self, output_size):
    return _adaptive_max(g, self, output_size, 1)


@aten("adaptive_max_pool2d")
def adaptive_max_pool2d(g, self, output_size):
    return _adaptive_max(g, self, output_size, 2)


@aten("adaptive_max_pool3d")
def adaptive_max_pool3d(g, self, output_size):
    return _adaptive_max(g, self, output_size, 3)


def _max_unpool(g, self, indices, output_size, n):
    if self.rank not in (n + 1, n + 2):
        raise g.error(f"self: expected rank {n + 1} or {n + 2}, got {self.rank}")
    if list(indices.shape) != list(self.shape):
        raise g.error(f"indices: shape {list(indices.shape)} differs from self's "
                      f"{list(self.shape)}")
    size = [int(v) for v in as_list(output_size, n)]
    if len(size) != n:
        raise g.error(f"output_size: expected {n} sizes, got {size}")
    lead = self.rank - n
    out = _scatter_to_planes(g, self, indices, lead, math.prod(size), "none")
    return g.reshape(out, list(self.shape[:lead]) + size)


def _scatter_to_planes(g, values, indices, lead, plane, reduction):
    """Zero planes of ``plane`` positions per leading index, receiving ``values`` at
    ``indices`` (both shaped [lead..., spatial...]); returns [lead..., plane]. Indices
    outside the plane go to a spare slot that is cut off."""
    batch = list(values.shape[:lead])
    count = math.prod(values.shape[lead:])
    vals = g.reshape(values, batch + [count])
    idx = g.reshape(g.cast(indices, torch.int64), batch + [count])
    inside = g.binary("and", g.binary("ge", idx, 0, torch.int64, out_dtype=torch.bool),
                      g.binary("lt", idx, plane, torch.int64, out_dtype=torch.bool),
                      torch.bool)
    idx = select(g, inside, idx, plane, torch.int64)
    zeros = g.broadcast_to(g.scalar(0, values.dtype), batch + [plane + 1])
    out = g.op("tract_core_scatter_elements", zeros, idx, vals, axis=lead,
               reduction=reduction, out_shape=batch + [plane + 1], out_dtype=values.dtype)
    return g.slice(out, lead, 0, plane)


@aten("max_unpool2d")
def max_unpool2d(g, self, indices, output_size):
    return _max_unpool(g, self, indices, output_size, 2)


@aten("max_unpool3d")
def max_unpool3d(g, self, indices, output_size, stride, padding):
    """``stride`` and ``padding`` only serve PyTorch's argument checks."""
    return _max_unpool(g, self, indices, output_size, 3)


def _max_pool_backward(g, grad_output, self, indices, n):
    """The gradient of max pooling: each output's gradient added at its index (windows that
    overlap may pick the same input, whose gradients then sum)."""
    if self.rank not in (n + 1, n + 2):
        raise g.error(f"self: expected rank {n + 1} or {n + 2}, got {self.rank}")
    if list(indices.shape) != list(grad_output.shape):
        raise g.error(f"indices: shape {list(indices.shape)} differs from grad_output's "
                      f"{list(grad_output.shape)}")
    lead = self.rank - n
    spatial = list(self.shape[lead:])
    if not all(isinstance(d, int) for d in spatial):
        raise g.error(f"self: the spatial axes {spatial} must be static")
    grad = g.cast(grad_output, self.dtype)
    out = _scatter_to_planes(g, grad, indices, lead, math.prod(spatial), "add")
    return g.reshape(out, list(self.shape))


@aten("max_pool2d_with_indices_backward")
def max_pool2d_with_indices_backward(g, grad_output, self, kernel_size, stride, padding,
                                     dilation, ceil_mode, indices):
    return _max_pool_backward(g, grad_output, self, indices, 2)


@aten("max_pool3d_with_indices_backward")
def max_pool3d_with_indices_backward(g, grad_output, self, kernel_size, stride, padding,
                                     dilation, ceil_mode, indices):
    return _max_pool_backward(g, grad_output, self, indices, 3)
