"""Writes addressed by index tensors: index_add, index_copy, index_fill (whole slabs along
one axis) and index_put (``self[indices] = values``, advanced indexing).

Slab writes become one ``tract_core_scatter_elements`` whose index is the 1-D index
broadcast over the slab; index_put becomes one ``tract_core_scatter_nd`` on the tensor with
the indexed axes moved to the front. Either way the op count does not depend on how many
indices there are. Overwrites with duplicate indices are undefined in PyTorch; tract keeps
the last write.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import where_
from t2n.mappings.helpers.indexing import scatter_elements
from t2n.walk.builder import broadcast_shapes
from t2n.walk.registry import aten


def _replace(shape, axis, value):
    shape = list(shape)
    shape[axis] = value
    return shape


def normalized(g, index, self, axis):
    """``index`` with negative entries counted from the end of ``self``'s ``axis``, as i64
    (tract's scatter_nd refuses negatives). Constant indices are fixed in Python."""
    n = self.shape[axis]
    if index.is_const:
        v = index.value.to(torch.int64)
        if isinstance(n, int):
            return g.const(torch.where(v < 0, v + n, v))
        if not bool((v < 0).any()):
            return g.const(v)
    index = g.cast(index, torch.int64)
    if isinstance(n, int):
        size = g.scalar(n, torch.int64)
    else:
        size = g.slice(g.shape_of(self), 0, axis, axis + 1)
    negative = g.binary("lt", index, g.scalar(0, torch.int64), torch.int64,
                        out_dtype=torch.bool)
    return where_(g, negative, g.binary("add", index, size, torch.int64), index)


def _slab_index(g, index, slab_shape, axis):
    """The 1-D ``index`` laid along ``axis`` and broadcast over a slab of ``slab_shape``."""
    rank = len(slab_shape)
    index = g.cast(index, torch.int64)
    if index.rank == 0:
        index = g.reshape(index, [1])
    shaped = g.reshape(index, _replace([1] * rank, axis, index.shape[0]))
    return g.broadcast_to(shaped, slab_shape)


def _slab_write(g, self, dim, index, source, reduction):
    if self.rank == 0:
        out = _slab_write(g, g.unsqueeze(self, [0]), 0, index,
                          g.reshape(source, [1]), reduction)
        return g.squeeze(out, [0])
    axis = dim % self.rank
    if source.rank == 0:
        source = g.reshape(source, [1] * self.rank)
    return scatter_elements(g, self, axis, _slab_index(g, index, source.shape, axis),
                            source, reduction)


@aten("index_add")
def index_add(g, self, dim, index, source, alpha=1):
    """``self[..., index[k], ...] += alpha * source[..., k, ...]``; duplicates accumulate."""
    if self.dtype == torch.bool:
        raise g.error("index_add on a bool tensor is not supported")
    source = g.cast(source, self.dtype)
    if alpha != 1:
        source = g.binary("mul", source, g.scalar(alpha, self.dtype), self.dtype)
    return _slab_write(g, self, dim, index, source, "add")


@aten("index_copy")
def index_copy(g, self, dim, index, source):
    return _slab_write(g, self, dim, index, g.cast(source, self.dtype), "none")


@aten("index_fill")
def index_fill(g, self, dim, index, value):
    """``value`` (a number or a 0-dim tensor) written into the slabs ``index`` of ``dim``,
    in self's dtype; negative indices count from the end."""
    if self.rank == 0:
        return g.squeeze(index_fill(g, g.unsqueeze(self, [0]), 0, index, value), [0])
    axis = dim % self.rank
    index = normalized(g, g.reshape(index, [1]) if index.rank == 0 else index, self, axis)
    slab = _replace(self.shape, axis, index.shape[0])
    value = g.broadcast_to(g.as_tensor(value, self.dtype), slab)
    return scatter_elements(g, self, axis, _slab_index(g, index, slab, axis), value)


# ---------------------------------------------------------------------------------------
# index_put


@aten("index_put", "_index_put_impl")
def index_put(g, self, indices, values, accumulate=False, unsafe=False):
    """``self[indices] = values`` (``+=`` with accumulate), NumPy advanced indexing.

    Constant bool masks become integer indices at export time. A runtime bool mask works
    when ``values`` does not depend on how many entries are selected (a scalar or a value
    broadcast along the masked entries): it becomes a ``select``.
    """
    indices = list(indices)
    while indices and indices[-1] is None:
        indices.pop()
    if not indices:
        return _write_all(g, self, values, accumulate)
    indices = _expand_const_masks(g, indices)
    masks = [i for i, t in enumerate(indices) if t is not None and t.dtype == torch.bool]
    if masks:
        return _put_runtime_mask(g, self, indices, masks, values, accumulate)
    return _put_nd(g, self, indices, values, accumulate)


def _write_all(g, self, values, accumulate):
    values = g.broadcast_to(g.cast(values, self.dtype), self.shape)
    return g.binary("add", self, values, self.dtype) if accumulate else values


def _expand_const_masks(g, indices):
    """A constant bool mask over k axes = k integer index tensors (its nonzero positions)."""
    out = []
    for t in indices:
        if t is not None and t.dtype in (torch.bool, torch.uint8) and t.is_const:
            out.extend(g.const(c) for c in torch.nonzero(t.value.bool(), as_tuple=True))
        else:
            out.append(t)
    return out


def _put_runtime_mask(g, self, indices, masks, values, accumulate):
    if len(masks) != 1 or any(t is not None for i, t in enumerate(indices) if i != masks[0]):
        raise g.error("indices: a runtime bool mask combined with other index tensors has a "
                      "data-dependent shape; only a single mask (with None entries) is supported")
    p = masks[0]
    mask = indices[p]
    m = mask.rank
    if self.rank < p + m:
        raise g.error("indices: the mask has more axes than the tensor")
    # torch broadcasts values to self.shape[:p] + [count] + self.shape[p+m:]; without the
    # count, values must be size 1 along that axis
    rank = self.rank - m + 1
    if values.rank > rank:
        raise g.error("values: more axes than the indexed result")
    values = g.cast(values, self.dtype)
    if values.rank > 0:
        values = g.unsqueeze_to_rank(values, rank)
        count_axis = values.shape[p]
        if not (isinstance(count_axis, int) and count_axis == 1):
            raise g.error("values: with a runtime bool mask, values must broadcast along the "
                          "selected entries (their number is only known at run time)")
        values = g.reshape(values, list(values.shape[:p]) + [1] * m
                           + list(values.shape[p + 1:]))
    mask = g.reshape(mask, [1] * p + list(mask.shape) + [1] * (self.rank - p - m))
    if accumulate:
        zero = g.scalar(0, self.dtype)
        added = where_(g, mask, g.broadcast_to(values, self.shape), zero)
        return g.binary("add", self, added, self.dtype)
    return where_(g, mask, g.broadcast_to(values, self.shape), self)


def _put_nd(g, self, indices, values, accumulate):
    if any(t.dtype == torch.uint8 for t in indices if t is not None):
        raise g.error("indices: uint8 masks are deprecated in PyTorch; use bool")
    adv = [i for i, t in enumerate(indices) if t is not None]
    rest = [i for i in range(self.rank) if i not in adv]
    idx = [normalized(g, indices[i], self, i) for i in adv]
    batch = broadcast_shapes(*(t.shape for t in idx))
    adjacent = adv == list(range(adv[0], adv[-1] + 1))
    # values broadcast to the indexed shape in torch's order, then advanced axes to the front
    front = adv[0] if adjacent else 0
    before = [self.shape[i] for i in rest if i < front] if adjacent else []
    after = [self.shape[i] for i in rest if not adjacent or i > adv[-1]]
    nb = len(batch)
    indexed = before + list(batch) + after
    values = g.broadcast_to(g.cast(values, self.dtype), indexed)
    if before:
        nbf = len(before)
        values = g.transpose(values, list(range(nbf, nbf + nb)) + list(range(nbf))
                             + list(range(nbf + nb, len(indexed))))
    if any(isinstance(d, int) and d == 0 for d in batch):
        return self
    perm = adv + rest
    data = g.transpose(self, perm)
    stacked = g.concat([g.unsqueeze(g.broadcast_to(t, batch), [nb]) for t in idx], nb)
    out = g.op("tract_core_scatter_nd", data, stacked, values,
               reduction="add" if accumulate else "none", out_shape=data.shape,
               out_dtype=self.dtype)
    inv = [perm.index(i) for i in range(self.rank)]
    return g.transpose(out, inv)


@aten("index_reduce")
def index_reduce(g, self, dim, index, source, reduce, include_self=True):
    """``scatter_reduce`` with the 1-D index laid along ``dim`` over whole slabs."""
    if self.rank == 0:
        out = index_reduce(g, g.unsqueeze(self, [0]), 0, g.reshape(index, [1]) if index.rank
                           == 0 else index, g.reshape(source, [1]), reduce, include_self)
        return g.squeeze(out, [0])
    axis = dim % self.rank
    src = source if source.rank else g.reshape(source, [1] * self.rank)
    idx = _slab_index(g, normalized(g, index, self, axis), src.shape, axis)
    reduce = {"amax": "amax", "amin": "amin", "prod": "prod", "mean": "mean"}[reduce]
    from t2n.walk import registry

    return registry.lookup("scatter_reduce")(g, self, axis, idx, g.cast(src, self.dtype),
                                             reduce, include_self)


@aten("put")
def put(g, self, index, source, accumulate=False):
    """``self.flatten()[index] = source`` (``+=`` with accumulate), reshaped back."""
    from t2n.mappings.helpers.indexing import flatten_all

    flat = flatten_all(g, self)
    idx = normalized(g, flatten_all(g, index) if index.rank != 1 else index, flat, 0)
    src = g.cast(source, self.dtype)
    src = g.reshape(src, list(idx.shape)) if src.rank != 1 else src
    out = index_put(g, flat, [idx], src, accumulate)
    return g.reshape(out, list(self.shape))


@aten("_unsafe_masked_index_put_accumulate")
def _unsafe_masked_index_put_accumulate(g, self, mask, indices, values):
    """``index_put(self, clamped indices, where(mask, values, 0), accumulate=True)``."""
    from t2n.mappings.helpers.indexing import clamp_indices

    if mask.dtype != torch.bool:
        raise g.error(f"mask: must be bool, got {mask.dtype}")
    if any(isinstance(d, int) and d == 0 for d in self.shape):
        return self
    values = g.cast(values, self.dtype)
    masked = where_(g, mask, values, g.scalar(0, self.dtype))
    return index_put(g, self, clamp_indices(g, self, list(indices)), masked, True)
