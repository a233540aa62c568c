"""Basic slicing: slice, select, narrow, and their scatter inverses (writes into slices).

Bounds are normalised here the way PyTorch does (negative from the end, clamped to the
axis), because tract's ``slice`` only takes ``0 <= begin <= end <= dim``.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.indexing import slice_bounds
from t2n.walk.registry import aten


@aten("slice")
def slice_(g, self, dim=0, start=None, end=None, step=1):
    if step < 1:
        raise g.error(f"slice step must be >= 1 (got {step})")
    axis = dim % self.rank
    begin, stop = slice_bounds(self.shape[axis], start, end)
    return g.slice(self, axis, begin, stop, step)


@aten("narrow")
def narrow(g, self, dim, start, length):
    """``self[start:start + length]`` along ``dim``; ``start`` may be negative (from the end)
    or a 0-dim tensor computed at run time (then a ``tract_core_dyn_slice``)."""
    axis = dim % self.rank
    n = self.shape[axis]
    if hasattr(start, "rank") and start.is_const:
        start = int(start.value)
    if hasattr(start, "rank"):
        if length == 0:  # any valid start gives the same empty slice (dyn_slice refuses 0..0)
            return g.slice(self, axis, 0, 0)
        return _dyn_narrow(g, self, axis, start, length)
    if isinstance(start, int) and start < 0:
        start = start + n
    if isinstance(start, int) and isinstance(n, int) and not 0 <= start <= start + length <= n:
        raise g.error(f"start: {start}..{start + length} out of range for size {n}")
    return g.slice(self, axis, start, start + length)


def _dyn_narrow(g, self, axis, start, length):
    from t2n.mappings.helpers.indexing import wrap_negative

    if start.rank != 0:
        raise g.error(f"start: must be a 0-dim tensor, got rank {start.rank}")
    begin = wrap_negative(g, g.cast(start, torch.int64), self, axis)
    end = g.binary("add", begin, g.scalar(length, torch.int64))
    shape = list(self.shape)
    shape[axis] = length
    return g.op("tract_core_dyn_slice", self, begin, end, len=length, axis=axis,
                out_shape=shape, out_dtype=self.dtype)


@aten("select")
def select(g, self, dim, index):
    """``self[..., index, ...]`` along ``dim`` (negative ``index`` from the end): a one-wide
    slice, squeezed."""
    axis = dim % self.rank
    n = self.shape[axis]
    if isinstance(index, int) and index < 0:
        index = index + n
    if isinstance(index, int) and isinstance(n, int) and not 0 <= index < n:
        raise g.error(f"index: {index} out of range for size {n}")
    return g.squeeze(g.slice(self, axis, index, index + 1), [axis])


@aten("diagonal")
def diagonal(g, self, offset=0, dim1=0, dim2=1):
    """The (``dim1``, ``dim2``) axes move to the end; the diagonal is read from the window
    starting at ``max(0, -offset)`` on dim1 and ``max(0, offset)`` on dim2 with one
    ``tract_core_gather_elements`` (index ``k`` in row ``k``). An empty diagonal gives the
    zero-length result PyTorch gives."""
    if self.rank < 2:
        raise g.error(f"self: diagonal needs rank >= 2, got {self.rank}")
    d1, d2 = dim1 % self.rank, dim2 % self.rank
    if d1 == d2:
        raise g.error(f"dim1 and dim2 are the same axis ({d1})")
    rest = [i for i in range(self.rank) if i not in (d1, d2)]
    x = g.transpose(self, rest + [d1, d2])
    s1, s2 = self.shape[d1], self.shape[d2]
    b1, b2 = max(0, -offset), max(0, offset)
    length = _diag_length(g, s1 - b1, s2 - b2)
    r = x.rank
    if isinstance(length, int) and length == 0:
        x = g.slice(x, r - 2, 0, 0)
        x = g.slice(x, r - 1, 0, 0)
    else:
        x = g.slice(g.slice(x, r - 2, b1, b1 + length), r - 1, b2, b2 + length)
    lead = list(x.shape[:-2])
    if isinstance(length, int):
        ramp = g.const(torch.arange(length).reshape([1] * len(lead) + [length, 1]))
    else:
        ramp = g.op("tract_core_range", 0, length, 1, out_dtype=torch.int64,
                    out_shape=[length])
        ramp = g.unsqueeze(ramp, [1])
    idx = g.broadcast_to(ramp, lead + [length, 1])
    picked = g.op("tract_core_gather_elements", x, idx, axis=r - 1, out_dtype=x.dtype,
                  out_shape=lead + [length, 1])
    return g.squeeze(picked, [r - 1])


def _diag_length(g, n1, n2):
    if isinstance(n1, int) and isinstance(n2, int):
        return max(0, min(n1, n2))
    import sympy

    if sympy.simplify(sympy.sympify(n1) - sympy.sympify(n2)) == 0:
        return n1
    raise g.error(f"diagonal length min({n1}, {n2}) of symbolic axes cannot be expressed; "
                  "make one of the two axes static or both the same size")


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
