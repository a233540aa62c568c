"""Basic slicing: slice, select, narrow, and their scatter inverses (writes into slices).

Bounds are normalised here the way PyTorch does (negative from the end, clamped to the
axis), because tract's ``slice`` only takes ``0 <= begin <= end <= dim``.
"""

from __future__ import annotations

import torch

from t2n.registry import aten


def _bounds(n, start, end):
    """PyTorch's clamping of slice bounds on an axis of size ``n`` (int or symbolic)."""
    if start is None:
        start = 0
    if end is None or (isinstance(end, int) and end >= 2 ** 62):
        end = n
    if isinstance(n, int):
        if start < 0:
            start += n
        if end < 0:
            end += n
        start = min(max(start, 0), n)
        end = min(max(end, start), n)
    else:
        if isinstance(start, int) and start < 0:
            start = n + start
        if isinstance(end, int) and end < 0:
            end = n + end
    return start, end


@aten("slice")
def slice_(g, self, dim=0, start=None, end=None, step=1):
    if step < 1:
        raise g.error(f"slice step must be >= 1 (got {step})")
    axis = dim % self.rank
    begin, stop = _bounds(self.shape[axis], start, end)
    return g.slice(self, axis, begin, stop, step)


@aten("narrow")
def narrow(g, self, dim, start, length):
    axis = dim % self.rank
    n = self.shape[axis]
    if isinstance(start, int) and start < 0:
        start = start + n
    return g.slice(self, axis, start, start + length)


@aten("select")
def select(g, self, dim, index):
    axis = dim % self.rank
    n = self.shape[axis]
    if isinstance(index, int) and index < 0:
        index = index + n
    return g.squeeze(g.slice(self, axis, index, index + 1), [axis])


@aten("fill")
def fill(g, self, value):
    v = g.as_tensor(value, self.dtype)
    return g.broadcast_to(g.cast(v, self.dtype), self.shape)


@aten("zero")
def zero(g, self):
    return g.broadcast_to(g.scalar(0, self.dtype), self.shape)


@aten("copy")
def copy(g, self, src, non_blocking=False):
    """``self.copy_(src)``: src broadcast to self's shape, in self's dtype."""
    return g.broadcast_to(g.cast(g.as_tensor(src, self.dtype), self.dtype), self.shape)
