"""Scatter-style writes: slice_scatter, select_scatter (the inverses the walker uses to
write into slice/select views), and the scatter family.
"""

from __future__ import annotations

from t2n.registry import aten
from op_mappings.slicing import _bounds


@aten("slice_scatter")
def slice_scatter(g, self, src, dim=0, start=None, end=None, step=1):
    axis = dim % self.rank
    n = self.shape[axis]
    begin, stop = _bounds(n, start, end)
    src = g.cast(src, self.dtype)
    if step != 1:
        raise g.error("slice_scatter with step != 1 is not supported yet")
    parts = []
    if not (isinstance(begin, int) and begin == 0):
        parts.append(g.slice(self, axis, 0, begin))
    parts.append(src)
    if not (isinstance(stop, int) and isinstance(n, int) and stop == n):
        parts.append(g.slice(self, axis, stop, n))
    return g.concat(parts, axis)


@aten("select_scatter")
def select_scatter(g, self, src, dim, index):
    axis = dim % self.rank
    n = self.shape[axis]
    if isinstance(index, int) and index < 0:
        index = index + n
    return slice_scatter(g, self, g.unsqueeze(src, [axis]), axis, index, index + 1, 1)
