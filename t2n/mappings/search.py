"""Sorted search: bucketize and searchsorted, as counts of comparisons.

The position PyTorch's binary search returns for value ``v`` in a sorted row ``s`` is the
number of entries for which ``not (s >= v)`` holds (``side='left'``), or ``not (s > v)``
(``side='right'``). Written that way (rather than ``s < v``) a NaN value lands at the end,
exactly as PyTorch's search puts it. The lowering compares every value with every entry of
its row on a new last axis and sums: seven ops whatever the sizes, no per-element work.
"""

from __future__ import annotations

import torch

from t2n.walk.builder import _result_type
from t2n.walk.registry import aten


def _count_before(g, seq, values, right: bool, out_int32: bool):
    """For ``values`` of shape ``[*lead, K]`` (``lead`` matching ``seq``'s leading axes) or any
    shape when ``seq`` is 1-D: the insertion position of each value in ``seq``'s last axis."""
    dtype = _result_type(seq, values)
    seq, values = g.as_tensor(seq, dtype), g.as_tensor(values, dtype)
    out_shape = list(values.shape)
    if values.is_const:
        v = g.const(values.value.reshape(out_shape + [1]))
    else:
        v = g.unsqueeze(values, [values.rank])  # [..., K, 1]
    if seq.rank == 1:
        s = g.unsqueeze_to_rank(seq, v.rank)  # [1, ..., 1, M]
    else:
        s = g.unsqueeze(seq, [seq.rank - 1])  # [*lead, 1, M]
    shape = list(v.shape[:-1]) + [s.shape[-1]]
    after = g.op("gt" if right else "ge", s, v, out_dtype=torch.bool, out_shape=shape)
    before = g.op("not", after, out_dtype=torch.bool, out_shape=shape)
    out_dtype = torch.int32 if out_int32 else torch.int64
    counts = g.reduce("sum_reduce", g.cast(before, out_dtype), [len(shape) - 1], keepdim=False)
    if list(counts.shape) != out_shape:
        counts = g.reshape(counts, out_shape)
    return counts


@aten("bucketize")
def bucketize(g, self, boundaries, out_int32=False, right=False):
    if boundaries.rank != 1:
        raise g.error(f"boundaries: must be 1-D, got rank {boundaries.rank}")
    return _count_before(g, boundaries, self, right, out_int32)


@aten("searchsorted")
def searchsorted(g, sorted_sequence, self, out_int32=False, right=False, side=None,
                 sorter=None):
    if side is not None:
        if side not in ("left", "right"):
            raise g.error(f"side: must be 'left' or 'right', got {side!r}")
        if right and side == "left":
            raise g.error("side: 'left' contradicts right=True")
        right = side == "right"
    seq = sorted_sequence
    if seq.rank == 0:
        raise g.error("sorted_sequence: must have at least one dimension")
    if sorter is not None:
        if tuple(sorter.shape) != tuple(seq.shape):
            raise g.error(f"sorter: shape {list(sorter.shape)} differs from sorted_sequence "
                          f"{list(seq.shape)}")
        seq = g.op("tract_core_gather_elements", seq, g.cast(sorter, torch.int64),
                   axis=seq.rank - 1, out_dtype=seq.dtype, out_shape=list(seq.shape))
    if seq.rank > 1:
        vrank = self.rank if hasattr(self, "rank") else 0
        if vrank != seq.rank or list(self.shape[:-1]) != list(seq.shape[:-1]):
            raise g.error("self: with a batched sorted_sequence the values must have the same "
                          "leading dimensions")
    return _count_before(g, seq, self, right, out_int32)
