"""Gather-style reads: index_select, take, take_along_dim, gather, embedding, masked_fill.

Lowered to ``tract_core_gather`` (numpy ``take``: negative indices allowed) and
``tract_core_gather_elements`` (``torch.gather``: negative indices allowed, an index smaller
than the input on the other axes allowed). Indices are usually runtime tensors, so their
values cannot be checked here; PyTorch itself rejects out-of-range indices, so a model that
runs in PyTorch never feeds tract one (which would abort it). Constant indices are checked at
export time. Every lowering is a fixed handful of ops, whatever the number of indices.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.indexing import check_const_indices, flatten_all
from t2n.walk.builder import broadcast_shapes
from t2n.walk.registry import aten

INDEX_DTYPES = (torch.int64, torch.int32)
_INTEGER_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _check_index_dtype(g, what: str, index, allowed=INDEX_DTYPES):
    if index.dtype not in allowed:
        names = " or ".join(str(d).replace("torch.", "") for d in allowed)
        raise g.error(f"{what}: indices must be {names}, got {index.dtype}")


@aten("index_select")
def index_select(g, self, dim, index):
    _check_index_dtype(g, "index", index)
    if self.rank == 0:
        # a scalar accepts index 0 only: the result is the scalar itself
        check_const_indices(g, "index", index, 1)
        return g.reshape(g.gather(g.reshape(self, [1]), flatten_all(g, index), 0), [])
    axis = dim % self.rank
    check_const_indices(g, "index", index, self.shape[axis])
    if index.rank == 0:
        index = g.reshape(index, [1])
    return g.gather(self, index, axis)


@aten("take")
def take(g, self, index):
    _check_index_dtype(g, "index", index, _INTEGER_DTYPES)
    flat = flatten_all(g, self) if self.rank else g.reshape(self, [1])
    check_const_indices(g, "index", index, flat.shape[0])
    return g.gather(flat, index, 0)


@aten("take_along_dim")
def take_along_dim(g, self, indices, dim=None):
    _check_index_dtype(g, "indices", indices, _INTEGER_DTYPES)
    indices = g.cast(indices, torch.int64)
    if dim is None:
        return take(g, self, flatten_all(g, indices) if indices.rank else
                    g.reshape(indices, [1]))
    if self.rank != indices.rank:
        raise g.error(f"indices: rank {indices.rank} differs from input rank {self.rank}")
    if self.rank == 0:
        return gather(g, self, 0, indices)
    axis = dim % self.rank
    others = [d for i, d in enumerate(self.shape) if i != axis]
    idx_others = [d for i, d in enumerate(indices.shape) if i != axis]
    common = list(_broadcast(g, others, idx_others))
    self_shape = common[:axis] + [self.shape[axis]] + common[axis:]
    idx_shape = common[:axis] + [indices.shape[axis]] + common[axis:]
    return gather(g, g.broadcast_to(self, self_shape), axis,
                  g.broadcast_to(indices, idx_shape))


def _broadcast(g, a, b):
    out = []
    for x, y in zip(a, b):
        if isinstance(x, int) and x == 1:
            out.append(y)
        elif isinstance(y, int) and y == 1 or x == y:
            out.append(x)
        else:
            raise g.error(f"indices: shape {list(b)} does not broadcast with {list(a)}")
    return out


@aten("gather")
def gather(g, self, dim, index, sparse_grad=False):
    # torch takes int64 and int32 (and any integer dtype for an empty index)
    _check_index_dtype(g, "index", index, _INTEGER_DTYPES)
    index = g.cast(index, torch.int64)
    if any(isinstance(d, int) and d == 0 for d in index.shape):
        # an empty index may even differ in rank from self (torch allows it): empty result
        return g.op("tract_core_broadcast", g.scalar(0, self.dtype), shape=list(index.shape),
                    out_shape=list(index.shape), out_dtype=self.dtype)
    if self.rank == 0 or index.rank == 0:
        # torch allows a rank-0 input or index (of matching rank): go through rank 1
        one = gather(g, g.reshape(self, [1]) if self.rank == 0 else self, dim,
                     g.reshape(index, [1]) if index.rank == 0 else index)
        return g.reshape(one, list(index.shape))
    axis = dim % self.rank
    check_const_indices(g, "index", index, self.shape[axis])
    return g.op("tract_core_gather_elements", self, index, axis=axis, out_dtype=self.dtype,
                out_shape=list(index.shape))


@aten("embedding")
def embedding(g, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """``weight[indices]``; ``padding_idx`` only affects gradients."""
    _check_index_dtype(g, "indices", indices)
    check_const_indices(g, "indices", indices, weight.shape[0])
    return g.gather(weight, indices, 0)


@aten("embedding_renorm")
def embedding_renorm(g, self, indices, max_norm, norm_type):
    """``embedding(..., max_norm=)`` first rescales, in place, every row of the table that
    ``indices`` reference and whose ``norm_type``-norm exceeds ``max_norm`` (by
    ``max_norm / (norm + 1e-7)``). Returned as the whole new table (the walker writes it back
    into the weight): rows referenced are found by comparing all row numbers with all indices
    (one ``any_reduce``), so the op count does not depend on the number of indices."""
    if self.rank != 2:
        raise g.error(f"self: the embedding table must be 2-D, got rank {self.rank}")
    if not self.dtype.is_floating_point:
        raise g.error(f"self: max_norm needs a floating-point table, got {self.dtype}")
    ids = flatten_all(g, g.cast(indices, torch.int64)) if indices.rank else \
        g.reshape(g.cast(indices, torch.int64), [1])
    rows = self.shape[0]
    if isinstance(rows, int):
        numbers = g.const(torch.arange(rows).reshape(rows, 1))
    else:
        numbers = g.unsqueeze(g.op("tract_core_range", 0, rows, 1, out_dtype=torch.int64,
                                   out_shape=[rows]), [1])
    hit = g.binary("eq", numbers, g.unsqueeze(ids, [0]), out_dtype=torch.bool)
    used = g.reduce("any_reduce", hit, [1], keepdim=True)
    norm = _row_norm(g, self, float(norm_type))
    big = g.binary("gt", norm, g.scalar(float(max_norm), self.dtype), out_dtype=torch.bool)
    scale = g.binary("div", g.scalar(float(max_norm), self.dtype),
                     g.binary("add", norm, g.scalar(1e-7, self.dtype)))
    scaled = g.binary("mul", self, scale)
    cond = g.binary("and", used, big, dtype=torch.bool)
    return g.op("select", cond, scaled, self, out_dtype=self.dtype, out_shape=self.shape)


def _row_norm(g, t, p: float):
    """The ``p``-norm of each row of a 2-D tensor, shape ``[rows, 1]``."""
    a = g.unary("abs", t)
    if p == float("inf"):
        return g.reduce("max_reduce", a, [1], keepdim=True)
    if p == 1.0:
        return g.reduce("sum_reduce", a, [1], keepdim=True)
    if p == 2.0:
        return g.unary("sqrt", g.reduce("sum_reduce", g.unary("sqr", t), [1], keepdim=True))
    if p <= 0:
        raise g.error(f"norm_type: {p} is not supported (use a positive p or inf)")
    powered = g.binary("pow", a, g.scalar(p, t.dtype))
    return g.binary("pow", g.reduce("sum_reduce", powered, [1], keepdim=True),
                    g.scalar(1.0 / p, t.dtype))


@aten("masked_fill")
def masked_fill(g, self, mask, value):
    """``where(mask, value, self)``: the value takes self's dtype (a float into an int tensor
    truncates, as in PyTorch); the mask broadcasts."""
    if mask.dtype != torch.bool:
        raise g.error(f"mask: must be bool, got {mask.dtype}")
    if hasattr(value, "rank") and value.rank != 0:
        raise g.error(f"value: must be a number or a 0-dim tensor, got rank {value.rank}")
    value = g.as_tensor(value, self.dtype)
    rank = max(self.rank, mask.rank)
    shape = broadcast_shapes(self.shape, mask.shape)
    mask, self_ = g.unsqueeze_to_rank(mask, rank), g.unsqueeze_to_rank(self, rank)
    value = g.unsqueeze_to_rank(value, rank)
    return g.op("select", mask, value, self_, out_dtype=self.dtype, out_shape=shape)

