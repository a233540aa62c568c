"""Ops whose output length depends on the data: nonzero, argwhere, masked_select,
nonzero_static.

The true positions come from ``tract_core_topk`` over a descending position key, with
``k = count(true)`` computed at run time (see ``t2n.mappings.index``): one op whatever the
data, and the result's length is a run-time size.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.indexing import flat_positions_to_columns, runtime_mask_positions
from t2n.walk import registry
from t2n.walk.registry import aten


def _nonzero_mask(g, x):
    if x.dtype == torch.bool:
        return x
    return g.binary("ne", x, g.scalar(0, x.dtype), x.dtype, out_dtype=torch.bool)


@aten("nonzero", "argwhere")
def nonzero(g, self):
    if self.rank == 0:  # [1, 0] or [0, 0]: the rows of a 1-element vector, no columns
        col = runtime_mask_positions(g, 0, _nonzero_mask(g, g.reshape(self, [1])))[0]
        # (a gather of no columns: tract's optimiser fails on an empty slice here)
        return g.gather(g.unsqueeze(col, [1]), g.const(torch.zeros(0, dtype=torch.int64)), 1)
    cols = runtime_mask_positions(g, 0, _nonzero_mask(g, self))
    return g.concat([g.unsqueeze(c, [1]) for c in cols], 1)


@aten("masked_select")
def masked_select(g, self, mask):
    from t2n.walk.builder import broadcast_shapes

    shape = list(broadcast_shapes(self.shape, mask.shape))
    x = g.broadcast_to(self, shape)
    m = g.broadcast_to(g.cast(mask, torch.bool), shape)
    if x.rank == 0:
        x, m = g.reshape(x, [1]), g.reshape(m, [1])
    return registry.lookup("index")(g, x, [m])


@aten("nonzero_static")
def nonzero_static(g, self, size, fill_value=-1):
    """The first ``size`` non-zero positions, padded with ``fill_value``: a static shape."""
    from t2n.mappings.helpers.indexing import flatten_all

    if self.rank == 0:  # [size, 0]: no columns to fill
        return g.broadcast_to(g.scalar(0, torch.int64), [size, 0])
    shape = self.static_shape()
    if shape is None:
        raise g.error("nonzero_static over a dynamic axis is not supported")
    n = 1
    for d in shape:
        n *= d
    if size == 0:
        return g.broadcast_to(g.scalar(0, torch.int64), [0, self.rank])
    flat = g.cast(flatten_all(g, _nonzero_mask(g, self)), torch.int64)
    count = g.reduce("sum_reduce", flat, [0], keepdim=False)
    k = min(size, n)
    key = g.binary("mul", flat, g.const(torch.arange(n, 0, -1)))
    _, pos = g.op("tract_core_topk", key, k, axis=0, largest=True, outputs=2,
                  out_dtypes=[torch.int64, torch.int64], out_shapes=[[k], [k]])
    cols = [g.unsqueeze(c, [1]) for c in flat_positions_to_columns(g, pos, shape)]
    out = g.concat(cols, 1)  # [k, rank]
    valid = g.binary("lt", g.const(torch.arange(k).reshape(k, 1)), count, torch.int64,
                     out_dtype=torch.bool)
    out = g.op("select", valid, out, g.broadcast_to(g.scalar(fill_value, torch.int64),
                                                    [k, self.rank]), out_dtype=torch.int64)
    if size > n:
        out = g.concat([out, g.broadcast_to(g.scalar(fill_value, torch.int64),
                                            [size - n, self.rank])], 0)
    return out


@aten("nonzero_numpy")
def nonzero_numpy(g, self):
    """``nonzero(as_tuple=True)``: one index tensor per axis (a 0-dim tensor is read as a
    1-element vector, as PyTorch does)."""
    if self.rank == 0:
        self = g.reshape(self, [1])
    return runtime_mask_positions(g, 0, _nonzero_mask(g, self))


@aten("masked_scatter")
def masked_scatter(g, self, mask, source):
    """The k-th true position of ``mask`` takes ``source.flatten()[k]``: its rank among the
    true positions is an exclusive cumsum, then one gather and one select."""
    from t2n.mappings.helpers.indexing import flatten_all
    from t2n.walk.builder import broadcast_shapes

    shape = list(broadcast_shapes(self.shape, mask.shape))
    if any(not isinstance(d, int) for d in shape):
        raise g.error("masked_scatter over a dynamic axis is not supported")
    n = 1
    for d in shape:
        n *= d
    x = g.broadcast_to(self, shape)
    m = g.broadcast_to(g.cast(mask, torch.bool), shape)
    if n == 0:
        return x
    fm = flatten_all(g, m)
    rank = g.op("tract_core_cumsum", g.cast(fm, torch.int64), axis=0, exclusive=True,
                reverse=False, out_shape=[n], out_dtype=torch.int64)
    src = flatten_all(g, g.cast(source, self.dtype))
    m_src = src.shape[0]
    if isinstance(m_src, int) and m_src == 0:
        return x
    rank = g.binary("min", rank, g.scalar(m_src - 1, torch.int64), torch.int64)
    picked = g.gather(src, rank, 0)
    out = g.op("select", fm, picked, flatten_all(g, x), out_shape=[n], out_dtype=self.dtype)
    return g.reshape(out, shape)
