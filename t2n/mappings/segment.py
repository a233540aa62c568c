"""``segment_reduce``: sum / mean / max / min / prod over consecutive segments of one axis,
the segments given by ``lengths`` or ``offsets`` (runtime tensors).

The op count does not depend on the data (no per-segment unrolling):

1. ``offsets`` (``[..., S + 1]``; from ``lengths`` it is ``0`` then their inclusive cumsum)
   are clamped to ``[0, N]`` and a one is scattered (``add``) at each into zeros of
   ``N + 1`` slots; the inclusive cumsum of that, minus one, is each row's segment id
   (several offsets at one position are empty segments). Rows before the first offset or at
   or after the last one get the spare id ``S``;
2. ``scatter_reduce`` (the existing mapping: NaN-propagating max/min) of the data into
   ``[..., S + 1, ...]`` slots that start at ``initial`` or the reduction's identity;
   ``mean`` divides by a per-segment count (scatter-add of ones).

PyTorch's rules, checked against eager: ``initial`` joins every segment (for ``mean`` it is
added to the sum, not counted: ``(initial + sum) / len``, and is the value of an empty
segment); without it an empty segment is 0 (sum), 1 (prod), -inf (max), +inf (min) or NaN
(mean). ``lengths``/``offsets`` may carry leading batch axes: ``axis`` is their last axis.
PyTorch computes float data only; ``indices`` is not implemented by PyTorch either.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import where_
from t2n.mappings.helpers.indexing import neutral, scatter_elements
from t2n.walk.registry import aten, lookup

_REDUCE = {"sum": "sum", "mean": "sum", "max": "amax", "min": "amin", "prod": "prod"}


@aten("segment_reduce")
def segment_reduce(g, data, reduce, lengths=None, indices=None, offsets=None, axis=0,
                   unsafe=False, initial=None):
    if reduce not in _REDUCE:
        raise g.error(f"reduce: {reduce!r} is not one of sum, mean, max, min, prod")
    if indices is not None:
        raise g.error("indices: index-based segments are not implemented (nor by PyTorch)")
    if (lengths is None) == (offsets is None):
        raise g.error("lengths/offsets: exactly one of them must be given")
    if not data.dtype.is_floating_point:
        raise g.error(f"data: {data.dtype} (PyTorch reduces segments of float data only)")
    axis = axis % data.rank
    bounds = lengths if lengths is not None else offsets
    if bounds.rank != axis + 1:
        raise g.error(f"axis: must be the last axis of lengths/offsets (rank {bounds.rank})")
    bounds = g.cast(bounds, torch.int64)
    if lengths is not None:
        offsets = _offsets_from_lengths(g, bounds)
    else:
        offsets = bounds
    n_seg = offsets.shape[axis] - 1
    seg = _segment_ids(g, offsets, data.shape[axis], n_seg, axis)  # [..., N] in [0, S]
    seg = g.reshape(seg, list(seg.shape) + [1] * (data.rank - axis - 1))
    seg = g.broadcast_to(seg, data.shape)
    slots = list(data.shape)
    slots[axis] = n_seg + 1
    d = data.dtype
    start = g.scalar(float(initial), d) if initial is not None else \
        neutral(g, _REDUCE[reduce], d)
    base = g.broadcast_to(start, slots)
    scatter_reduce = lookup("scatter_reduce")
    out = scatter_reduce(g, base, axis, seg, data, _REDUCE[reduce], True)
    if reduce == "mean":
        ones = g.broadcast_to(g.scalar(1.0, d), data.shape)
        count = scatter_elements(g, g.broadcast_to(g.scalar(0.0, d), slots), axis, seg, ones,
                                 "add")
        empty = g.binary("eq", count, 0.0, d, out_dtype=torch.bool)
        mean = g.binary("div", out, g.binary("max", count, 1.0, d), d)
        fill = g.scalar(float(initial) if initial is not None else float("nan"), d)
        out = where_(g, empty, fill, mean)
    return g.slice(out, axis, 0, n_seg)


def _offsets_from_lengths(g, lengths):
    """``[0, l0, l0 + l1, ...]`` along the last axis."""
    last = lengths.rank - 1
    ends = g.op("tract_core_cumsum", lengths, axis=last, exclusive=False, reverse=False,
                out_dtype=torch.int64, out_shape=lengths.shape)
    zero_shape = list(lengths.shape[:-1]) + [1]
    zero = g.broadcast_to(g.scalar(0, torch.int64), zero_shape)
    return g.concat([zero, ends], last)


def _segment_ids(g, offsets, n, n_seg, axis):
    """Segment id of each of the ``n`` rows (``[..., n]`` i64); rows outside every segment
    get ``n_seg`` (the spare slot)."""
    lead = list(offsets.shape[:-1])
    at = g.binary("min", g.binary("max", offsets, 0, torch.int64), g.scalar(n, torch.int64),
                  torch.int64)
    marks = g.broadcast_to(g.scalar(0, torch.int64), lead + [n + 1])
    ones = g.broadcast_to(g.scalar(1, torch.int64), offsets.shape)
    marks = scatter_elements(g, marks, axis, at, ones, "add")
    count = g.op("tract_core_cumsum", marks, axis=axis, exclusive=False, reverse=False,
                 out_dtype=torch.int64, out_shape=marks.shape)
    count = g.slice(count, axis, 0, n)  # offsets at or before each row
    seg = g.binary("sub", count, 1, torch.int64)
    inside = g.binary("and", g.binary("ge", seg, 0, torch.int64, out_dtype=torch.bool),
                      g.binary("lt", seg, g.scalar(n_seg, torch.int64), torch.int64,
                               out_dtype=torch.bool), torch.bool)
    return where_(g, inside, seg, g.scalar(n_seg, torch.int64))
