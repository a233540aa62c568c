"""Index helpers shared by the gather, index, scatter, slicing and selection families: element
counts and dim sizes (symbolic axes too), flattening, index normalisation and constant range
checks, PyTorch's slice-bound clamping, boolean-mask positions, and a safe
``tract_core_scatter_elements``."""

from __future__ import annotations

import numpy as np
import torch

from t2n.walk.builder import DATA_DEPENDENT_PREFIX


def numel(shape) -> object:
    """The element count of ``shape`` (an int, or a sympy expression for symbolic axes)."""
    n = 1
    for d in shape:
        n = n * d
    return n


def flatten_all(g, t):
    """``t.reshape(-1)``, written with ``-1`` so that it follows symbolic axes."""
    if t.rank == 1:
        return t
    if t.is_const:
        return g.const(t.value.reshape(-1))
    return g.op("reshape", t, shape=[-1], out_shape=[numel(t.shape)])


def dim_size(g, t, axis: int, dtype: torch.dtype):
    """The size of ``t`` along ``axis`` as a rank-0 tensor of ``dtype`` (read at run time
    when the axis is symbolic)."""
    n = t.shape[axis]
    if isinstance(n, int):
        return g.scalar(n, dtype)
    size = g.gather(g.shape_of(t), g.scalar(axis, torch.int64), 0)
    return g.cast(size, dtype)


def check_const_indices(g, what: str, index, size) -> None:
    """A constant index out of ``[-size, size)`` would abort tract: refuse it here."""
    if not index.is_const or not isinstance(size, int) or index.value.numel() == 0:
        return
    v = index.value
    if bool((v < -size).any()) or bool((v >= size).any()):
        raise g.error(f"{what}: index {int(v.min())}..{int(v.max())} out of range for an axis "
                      f"of size {size}")


def wrap_negative(g, index, size_of, axis: int):
    """``index`` with negative entries counted from the end of axis ``axis`` of ``size_of``
    (for ops such as ``tract_core_gather_nd`` that abort on negative indices)."""
    if index.is_const:
        n = size_of.shape[axis]
        if isinstance(n, int):
            return g.const(torch.where(index.value < 0, index.value + n, index.value),
                           index.dtype)
        if not bool((index.value < 0).any()):
            return index
    n = dim_size(g, size_of, axis, index.dtype)
    negative = g.binary("lt", index, g.scalar(0, index.dtype), out_dtype=torch.bool)
    shifted = g.binary("add", index, n)
    return g.op("select", negative, shifted, index, out_dtype=index.dtype,
                out_shape=index.shape)


def slice_bounds(n, start, end):
    """PyTorch's clamping of slice bounds on an axis of size ``n`` (int or symbolic)."""
    if start is None:
        start = 0
    if end is None or (isinstance(end, int) and end >= 2 ** 62):
        end = n
    if isinstance(n, int) and isinstance(start, int) and isinstance(end, int):
        if start < 0:
            start += n
        if end < 0:
            end += n
        start = min(max(start, 0), n)
        end = min(max(end, start), n)
    else:
        from_back = _negative(end)
        if _negative(start):  # x[-k:], k an int or a size (x[..., -S:]): from the end
            start = n + start
        if from_back:
            end = n + end
        if not isinstance(n, int):
            # a dynamic axis: clamp as PyTorch does, with tract dim expressions (x[-1:2])
            import sympy

            start = _max(0, _min(n, start))
            if from_back and start == 0:
                # x[..., :-k]: n - k as written. With a max(0, n - k) tract cannot tell
                # that the result has n - k elements (the residual add of wav2vec2's
                # positional convolution then fails to load); an axis shorter than k
                # (empty in PyTorch) is an error at run time in tract
                pass
            else:
                end = _max(start, _min(n, end))
            start, end = _plain(start), _plain(end)
        # a symbolic bound on a static axis (position_ids[:, :S]) is kept as written: the
        # model is only valid where it lies within the axis, and a min() would hide from
        # tract that the result has S elements
    return start, end


def _negative(v) -> bool:
    """A bound counted from the end: a negative int, or a size expression that is negative
    for every value of its symbols (``-S``, a traced ``-x.shape[1]``)."""
    if isinstance(v, int):
        return v < 0
    if v is None or not hasattr(v, "free_symbols"):
        return False
    from t2n.walk.tensors import known_nonnegative

    return known_nonnegative(-v) and v != 0


def _min(a, b):
    """``min(a, b)`` of sizes, without the ``min`` when one is provably the smaller (a
    length padded to whole chunks is never below the length: sympy alone cannot tell)."""
    import sympy

    from t2n.walk.tensors import known_nonnegative

    if known_nonnegative(b - a):
        return a
    if known_nonnegative(a - b):
        return b
    return sympy.Min(a, b)


def _max(a, b):
    import sympy

    from t2n.walk.tensors import known_nonnegative

    if known_nonnegative(a - b):
        return a
    if known_nonnegative(b - a):
        return b
    return sympy.Max(a, b)


def _plain(expr):
    """A sympy value that is a plain integer becomes an int again."""
    return int(expr) if getattr(expr, "is_Integer", False) else expr


def runtime_mask_positions(g, k, mask):
    """One index tensor per axis of ``mask`` listing its true elements in row-major order;
    their length is a fresh symbol."""
    import sympy


    shape = mask.static_shape()
    if shape is None:
        raise g.error(f"indices[{k}]: a boolean mask over a dynamic axis is not supported")
    n = 1
    for d in shape:
        n *= d
    flat = g.cast(flatten_all(g, g.cast(mask, torch.bool)), torch.int64)  # [N]
    count = g.reduce("sum_reduce", flat, [0], keepdim=False)
    key = g.binary("mul", flat, g.const(torch.arange(n, 0, -1)))
    nnz = sympy.Symbol(f"{DATA_DEPENDENT_PREFIX}mask_count_{g.count('mask symbols')}",
                       integer=True, nonnegative=True)
    _, pos = g.op("tract_core_topk", key, count, axis=0, largest=True, outputs=2,
                  out_dtypes=[torch.int64, torch.int64], out_shapes=[[nnz], [nnz]])
    return flat_positions_to_columns(g, pos, shape)


def flat_positions_to_columns(g, pos, shape):
    """Row-major flat positions into one index tensor per axis of ``shape`` (static)."""
    cols = []
    for j in range(len(shape)):
        stride = 1
        for d in shape[j + 1:]:
            stride *= d
        c = g.binary("div", pos, g.scalar(stride, torch.int64)) if stride > 1 else pos
        if j > 0:
            outer = g.binary("div", pos, g.scalar(stride * shape[j], torch.int64))
            c = g.binary("sub", c, g.binary("mul", outer, g.scalar(shape[j], torch.int64)))
        cols.append(c)
    return cols


def clamp_indices(g, self, indices):
    """Each index tensor clamped to ``[-size, size - 1]`` of its axis, as PyTorch's
    ``_unsafe_masked_index*`` kernels do: an index under a false mask may be out of range,
    and must not reach tract's gather (which aborts on it)."""
    out = []
    for axis, idx in enumerate(indices):
        if idx is None:
            out.append(None)
            continue
        if idx.dtype not in (torch.int64, torch.int32):
            raise g.error(f"indices[{axis}]: must be int64 or int32, got {idx.dtype}")
        n = self.shape[axis]
        lo = g.binary("max", idx, g.binary("sub", g.scalar(0, idx.dtype),
                                           g.scalar(n, idx.dtype), idx.dtype), idx.dtype)
        out.append(g.binary("min", lo, g.binary("sub", g.scalar(n, idx.dtype),
                                                 g.scalar(1, idx.dtype), idx.dtype), idx.dtype))
    return out


def is_empty_shape(shape) -> bool:
    return any(isinstance(d, int) and d == 0 for d in shape)


def slice_to(g, t, shape):
    """``t`` cut down to ``shape`` from the origin (torch uses only the index-shaped corner
    of ``src``; tract requires updates.shape == indices.shape)."""
    for axis, (have, want) in enumerate(zip(t.shape, shape)):
        if have is not want and have != want:
            t = g.slice(t, axis, 0, want)
    return t


def scatter_elements(g, data, axis: int, index, updates, reduction: str = "none"):
    """``tract_core_scatter_elements`` made safe: i64 indices, updates in data's dtype and
    of index's shape, rank 0 lifted to rank 1, empty index = no write."""
    if is_empty_shape(index.shape):
        return data
    updates = slice_to(g, g.cast(updates, data.dtype), index.shape)
    index = g.cast(index, torch.int64)
    if data.rank == 0:
        out = scatter_elements(g, g.unsqueeze(data, [0]), 0, g.reshape(index, [1]),
                               g.reshape(updates, [1]), reduction)
        return g.squeeze(out, [0])
    if index.rank == 0:
        index, updates = g.reshape(index, [1]), g.reshape(updates, [1])
    return g.op("tract_core_scatter_elements", data, index, updates, axis=axis,
                reduction=reduction, out_shape=data.shape, out_dtype=data.dtype)


def neutral(g, reduce: str, dtype: torch.dtype):
    """The identity element of ``reduce`` in ``dtype``, as a rank-0 constant."""
    if reduce in ("sum", "mean"):
        return g.scalar(0, dtype)
    if reduce == "prod":
        return g.scalar(1, dtype)
    if dtype.is_floating_point:
        return g.scalar(float("-inf") if reduce == "amax" else float("inf"), dtype)
    if dtype == torch.bool:
        return g.scalar(reduce == "amin", dtype)
    info = torch.iinfo(dtype)
    return g.scalar(info.min if reduce == "amax" else info.max, dtype)


def static_size(g, n, what):
    """``n`` if it is a static size, else refuse ``what`` on a dynamic axis."""
    if not isinstance(n, int):
        raise g.error(f"{what} on a dynamic axis is not supported")
    return n


def gather_const(g, x, axis, index):
    """``x`` gathered along ``axis`` with a constant (stored) int64 index."""
    return g.gather(x, g.const(torch.as_tensor(np.asarray(index, dtype=np.int64))), axis)


def static_numel(g, x):
    """The element count of ``x``, which must have static axes (for flattening)."""
    n = 1
    for d in x.shape:
        n = n * static_size(g, d, "flattening")
    return n
