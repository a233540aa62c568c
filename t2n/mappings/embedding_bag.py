"""Pooled embeddings: ``embedding_bag`` (``nn.EmbeddingBag``, ``F.embedding_bag``) and the
internal ``_embedding_bag`` / ``_embedding_bag_forward_only`` it dispatches to.

Bags are ragged and their boundaries (``offsets``) are usually a runtime input, so the
lowering must not unroll per bag and must not build a ``[num_indices, num_bags]`` comparison.
It works in O(num_indices * dim + num_bags * dim) with a fixed number of ops:

1. ``rows = gather(weight, indices)``, times ``per_sample_weights`` (sum mode);
2. the bag of every index: a one is scattered (``add``) at each offset into a zero vector of
   ``num_indices + 1`` slots (several offsets at one position = empty bags; an offset equal to
   ``num_indices`` = trailing empty bags, lands in the extra slot), then an inclusive cumsum
   minus one gives ``bag[i]``;
3. ``scatter_elements(zeros[slots, dim], bag, rows, 'add' | 'max')`` pools the rows. ``slots``
   has one spare row past the last bag: entries equal to ``padding_idx`` are routed there, and
   with ``include_last_offset`` so are entries past the final offset, so they touch no bag;
4. ``mean`` divides by a per-bag count (scatter-add of ones); ``max`` starts from ``-inf`` and
   empty bags (count 0) are set to zero, as PyTorch does.

Two cheaper forms when the trace tells more: equal bags (``nn.EmbeddingBag`` on a 2-D input
traces ``offsets = arange(0, numel, per_bag)``) reshape to ``[bags, per_bag, dim]`` and reduce;
constant ragged offsets with a static index count get the bag ids as a constant.

Only output 0 (the pooled bags) is computed. The other three (offset2bag, bag_size,
max_indices) are returned as :class:`~t2n.walk.builder.Unavailable`: harmless while unused, an error
naming this op as soon as anything consumes them.
"""

from __future__ import annotations

import numpy as np
import torch

from t2n.walk.registry import aten

_MODES = {0: "sum", 1: "mean", 2: "max"}
_OTHER_OUTPUTS = ("offset2bag", "bag_size", "max_indices")


@aten("embedding_bag")
def embedding_bag(g, weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """Public schema: ``padding_idx`` None means no padding; a negative one counts from the
    end of the table."""
    if padding_idx is not None and padding_idx < 0:
        padding_idx += _table_rows(g, weight)
    return _embedding_bag(g, weight, indices, offsets, mode, per_sample_weights,
                          include_last_offset, padding_idx)


@aten("_embedding_bag", "_embedding_bag_forward_only")
def internal_embedding_bag(g, weight, indices, offsets, scale_grad_by_freq=False, mode=0,
                           sparse=False, per_sample_weights=None, include_last_offset=False,
                           padding_idx=-1):
    """Internal schema: ``padding_idx`` is already normalised and -1 means no padding."""
    return _embedding_bag(g, weight, indices, offsets, mode, per_sample_weights,
                          include_last_offset, None if padding_idx < 0 else padding_idx)


def _table_rows(g, weight) -> int:
    rows = weight.shape[0]
    if not isinstance(rows, int):
        raise g.error("padding_idx: a negative padding_idx needs a table of static size")
    return rows


def _embedding_bag(g, weight, indices, offsets, mode, per_sample_weights, include_last_offset,
                   padding_idx):
    if mode not in _MODES:
        raise g.error(f"mode: {mode} is not one of 0 (sum), 1 (mean), 2 (max)")
    if weight.rank != 2:
        raise g.error(f"weight: the table must be 2-D (got rank {weight.rank})")
    if not weight.dtype.is_floating_point:
        raise g.error(f"weight: PyTorch pools float tables only (got {weight.dtype})")
    if per_sample_weights is not None and mode != 0:
        raise g.error("per_sample_weights: only supported with mode='sum' (as in PyTorch)")
    if indices.rank != 1:  # F.embedding_bag flattens 2-D input before calling the aten op
        raise g.error(f"indices: must be 1-D at the aten level (got rank {indices.rank}); "
                      "PyTorch checks offsets against size(0) but bags the flattened indices")
    if offsets is None or offsets.rank != 1:
        raise g.error("offsets: must be a 1-D tensor")
    if indices.dtype not in (torch.int32, torch.int64) or \
            offsets.dtype not in (torch.int32, torch.int64):
        raise g.error("indices/offsets: must be int32 or int64")

    rows = g.gather(weight, indices, 0)  # [N, D]
    if per_sample_weights is not None:
        psw = g.cast(per_sample_weights, weight.dtype)
        rows = g.binary("mul", rows, g.unsqueeze(psw, [1]))
    keep = None
    if padding_idx is not None:
        keep = g.binary("ne", indices, g.scalar(padding_idx, indices.dtype),
                        out_dtype=torch.bool)

    per_bag = _equal_bag_size(g, indices, offsets, include_last_offset)
    if per_bag is not None:
        out = _pool_equal_bags(g, rows, keep, mode, per_bag)
    else:
        out = _pool_ragged(g, rows, keep, mode, indices, offsets, include_last_offset)
    return (out,) + tuple(
        g.unavailable(f"output {i + 1} ({name}) is not supported: t2n computes only the "
                      "pooled bags (output 0)")
        for i, name in enumerate(_OTHER_OUTPUTS))


# ---------------------------------------------------------------------- equal bags
def _equal_bag_size(g, indices, offsets, include_last_offset):
    """The common bag size when offsets are ``arange(0, N, k)`` with k dividing N, else None."""
    n = indices.shape[0]
    if include_last_offset:
        return None
    if offsets.is_const:
        if not isinstance(n, int):
            return None
        off = offsets.value.to(torch.int64)
        if off.numel() == 0 or n == 0:
            return None
        k = n if off.numel() == 1 else int(off[1] - off[0])
        if k <= 0 or off.numel() * k != n:
            return None
        return k if torch.equal(off, torch.arange(0, n, k)) else None
    return _range_step(g, offsets, n)


def _range_step(g, offsets, n):
    """k when ``offsets`` is computed in the graph as ``k * [0, 1, ..., m-1]`` with
    ``m * k == n``: what ``arange(0, numel, size(1))`` becomes for a 2-D input with a dynamic
    batch. The ramp is recognised through casts and a multiply by a constant, as a
    ``tract_core_range`` or as an exclusive cumsum of ones (the builder's symbolic arange)."""
    import sympy

    k, t = 1, offsets
    while True:
        op = _producer(g, t)
        if op is None:
            return None
        if op.kind == "tract_core_cast":
            t = op.args[0]
        elif op.kind == "mul" and len(op.args) == 2:
            factor = [a for a in op.args if _const_int(a) is not None]
            if len(factor) != 1:
                return None
            k *= _const_int(factor[0])
            t = next(a for a in op.args if a is not factor[0])
        else:
            break
    ramp = _ramp(g, op)
    if ramp is None:
        return None
    length, step = ramp
    k *= step
    if k <= 0 or sympy.simplify(sympy.sympify(length) * k - sympy.sympify(n)) != 0:
        return None
    return k


def _ramp(g, op):
    """(length, step) when ``op`` computes ``[0, step, 2 * step, ...]``, else None."""
    import sympy

    if op.kind == "tract_core_range" and len(op.args) == 3:
        start, end, step = (_const_int(a) if hasattr(a, "is_const") else a for a in op.args)
        if start == 0 and isinstance(step, int) and step > 0 and end is not None:
            return sympy.ceiling(sympy.sympify(end) / step), step
        return None
    if op.kind == "tract_core_cumsum" and op.attrs.get("exclusive") is True and \
            op.attrs.get("reverse") is False and op.attrs.get("axis") == 0 and \
            op.outputs[0].rank == 1:
        src = _producer(g, op.args[0])
        if src is not None and src.kind == "tract_core_broadcast" and \
                _const_int(src.args[0]) == 1:
            return op.outputs[0].shape[0], 1
    return None


def _const_int(t):
    """The value of a constant integer handle holding one element, else None."""
    if getattr(t, "is_const", False) and t.value.numel() == 1 and \
            not t.value.dtype.is_floating_point and t.value.dtype != torch.bool:
        return int(t.value.item())
    return None


def _producer(g, t):
    for op in reversed(g.ops):
        if any(o is t for o in op.outputs):
            return op
    return None


def _pool_equal_bags(g, rows, keep, mode, k):
    n, d = rows.shape
    bags = n // k
    if keep is not None:
        fill = 0.0 if mode != 2 else float("-inf")
        rows = g.op("select", g.unsqueeze(keep, [1]), rows, g.scalar(fill, rows.dtype),
                    out_shape=rows.shape, out_dtype=rows.dtype)
    grouped = g.op("reshape", rows, shape=[-1, k, d], out_shape=[bags, k, d])
    kind = "max_reduce" if mode == 2 else "sum_reduce"
    pooled = g.reduce(kind, grouped, [1], keepdim=False)  # [bags, D]
    if mode == 0 or (mode == 2 and keep is None):
        return pooled
    if keep is None:  # mean of full bags
        return g.binary("div", pooled, g.scalar(float(k), rows.dtype))
    kept = g.op("reshape", g.cast(keep, rows.dtype), shape=[-1, k], out_shape=[bags, k])
    count = g.reduce("sum_reduce", kept, [1], keepdim=True)  # [bags, 1]
    return _finish(g, pooled, count, mode)


# ---------------------------------------------------------------------- ragged bags
def _pool_ragged(g, rows, keep, mode, indices, offsets, include_last_offset):
    n, d = rows.shape
    n_off = offsets.shape[0]
    bags = n_off - 1 if include_last_offset else n_off
    slots = bags + 1  # one spare slot: padding entries, entries past the last offset
    if isinstance(bags, int) and bags < 0:
        raise g.error("offsets: include_last_offset=True needs at least one offset")
    bag = _bag_ids(g, indices, offsets)  # [N] i64 in [0, n_off - 1]
    if keep is not None:
        bag = g.op("select", keep, bag, g.scalar(-1, torch.int64), out_shape=[n],
                   out_dtype=torch.int64)  # -1: the spare (last) slot
    bag_nd = g.broadcast_to(g.unsqueeze(bag, [1]), [n, d])
    init = float("-inf") if mode == 2 else 0.0
    acc = g.broadcast_to(g.scalar(init, rows.dtype), [slots, d])
    pooled = g.op("tract_core_scatter_elements", acc, bag_nd, rows, axis=0,
                  reduction="max" if mode == 2 else "add", out_shape=[slots, d],
                  out_dtype=rows.dtype)
    pooled = g.slice(pooled, 0, 0, bags)
    if mode == 0:
        return pooled
    zeros = g.broadcast_to(g.scalar(0.0, rows.dtype), [slots])
    ones = g.broadcast_to(g.scalar(1.0, rows.dtype), [n])
    count = g.op("tract_core_scatter_elements", zeros, bag, ones, axis=0, reduction="add",
                 out_shape=[slots], out_dtype=rows.dtype)
    count = g.unsqueeze(g.slice(count, 0, 0, bags), [1])  # [bags, 1]
    return _finish(g, pooled, count, mode)


def _bag_ids(g, indices, offsets):
    """``bag[i]`` = (number of offsets <= i) - 1, without an [N, bags] comparison."""
    n = indices.shape[0]
    if offsets.is_const and isinstance(n, int):
        off = offsets.value.to(torch.int64).numpy()
        _validate_offsets(g, off, n)
        ids = np.searchsorted(off, np.arange(n), side="right") - 1
        return g.const(torch.from_numpy(ids.astype(np.int64)))
    off = g.cast(offsets, torch.int64)
    # Invalid offsets make PyTorch raise; clamp so that tract never indexes out of range.
    n_t = g.const(torch.tensor([n])) if isinstance(n, int) else \
        g.op("slice", g.shape_of(indices), axes=[0], begin=[0], end=[1], stride=[1],
             out_shape=[1], out_dtype=torch.int64)
    off = g.binary("max", off, g.scalar(0, torch.int64))
    off = g.binary("min", off, n_t)
    marks = g.broadcast_to(g.scalar(0, torch.int64), [n + 1])
    ones = g.broadcast_to(g.scalar(1, torch.int64), list(off.shape))
    marks = g.op("tract_core_scatter_elements", marks, off, ones, axis=0, reduction="add",
                 out_shape=[n + 1], out_dtype=torch.int64)
    marks = g.slice(marks, 0, 0, n)
    starts = g.op("tract_core_cumsum", marks, axis=0, exclusive=False, reverse=False,
                  out_shape=[n], out_dtype=torch.int64)
    return g.binary("sub", starts, g.scalar(1, torch.int64))


def _validate_offsets(g, off: np.ndarray, n: int) -> None:
    if off.size and off[0] != 0:
        raise g.error(f"offsets: offsets[0] must be 0 (got {int(off[0])}), as in PyTorch")
    if off.size and (np.diff(off) < 0).any():
        raise g.error("offsets: must be non-decreasing")
    if off.size and off[-1] > n:
        raise g.error(f"offsets: offsets[-1] = {int(off[-1])} is past the {n} indices")


def _finish(g, pooled, count, mode):
    """mean: divide by the count (at least 1); max: empty bags (count 0) give zeros."""
    if mode == 1:
        return g.binary("div", pooled, g.binary("max", count, g.scalar(1.0, count.dtype)))
    nonempty = g.binary("gt", count, g.scalar(0.0, count.dtype), out_dtype=torch.bool)
    return g.op("select", nonempty, pooled, g.scalar(0.0, pooled.dtype),
                out_shape=pooled.shape, out_dtype=pooled.dtype)
