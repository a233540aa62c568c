"""``aten::index``: NumPy-style advanced indexing, ``x[i, :, j]``, ``x[:, idx]``, ``x[mask]``.

PyTorch's rule: the index tensors (``None`` entries keep their axis) broadcast together to a
shape ``B``; when the indexed axes are adjacent, ``B`` replaces them in place, otherwise ``B``
comes first, followed by the kept axes.

Lowering, a fixed number of ops per index tensor whatever the number of indices:

* one index tensor: ``tract_core_gather`` on its axis (negative indices are native);
* several: the indexed axes are moved to the front, the index tensors (negatives wrapped,
  since ``tract_core_gather_nd`` aborts on them) are broadcast and stacked on a last axis,
  one ``tract_core_gather_nd``, then ``B`` is moved back in place when the axes were adjacent.

A boolean mask selects a data-dependent number of elements. A constant mask becomes integer
indices at export time. A mask computed at run time becomes the positions of its true
elements in order, found without ``nonzero`` (which NNEF lacks): ``tract_core_topk`` with
``k = sum(mask)`` on the key ``mask * [N, N-1, ..., 1]`` returns exactly the true positions,
ascending; they are unravelled into one index tensor per masked axis. The result's length
is then a new symbol (its size is only known at run time).
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.indexing import (check_const_indices, clamp_indices,
                                          runtime_mask_positions, wrap_negative)
from t2n.walk.builder import broadcast_shapes
from t2n.walk.registry import aten

_MASK_DTYPES = (torch.bool, torch.uint8)


@aten("index")
def index(g, self, indices):
    entries, nonneg = _expand_masks(g, self, list(indices))
    if len(entries) > self.rank:
        raise g.error(f"indices: {len(entries)} indices for a tensor of rank {self.rank}")
    entries += [None] * (self.rank - len(entries))
    axes = [i for i, e in enumerate(entries) if e is not None]
    if not axes:
        return self
    for a in axes:
        e = entries[a]
        if e.dtype not in (torch.int64, torch.int32):
            raise g.error(f"indices[{a}]: index tensors must be int64, int32 or bool, got {e.dtype}")
        check_const_indices(g, f"indices[{a}]", e, self.shape[a])
    if len(axes) == 1:
        return g.gather(self, entries[axes[0]], axes[0])
    return _gather_nd(g, self, entries, axes, nonneg)


def _gather_nd(g, self, entries, axes, nonneg):
    bshape = list(broadcast_shapes(*(entries[a].shape for a in axes)))
    columns = []
    for a in axes:
        e = g.cast(entries[a], torch.int64)
        if id(entries[a]) not in nonneg:
            e = wrap_negative(g, e, self, a)
        columns.append(e)
    columns = [g.unsqueeze(e, [len(bshape)]) for e in _broadcast_all(g, columns, bshape)]
    stacked = g.concat(columns, len(bshape))
    rest = [i for i in range(self.rank) if i not in axes]
    moved = g.transpose(self, axes + rest)
    out_shape = bshape + [self.shape[i] for i in rest]
    out = g.op("tract_core_gather_nd", moved, stacked, batch_dims=0, out_dtype=self.dtype,
               out_shape=out_shape)
    adjacent = axes == list(range(axes[0], axes[0] + len(axes)))
    if not adjacent or axes[0] == 0:
        return out
    nb, first = len(bshape), axes[0]
    perm = [nb + i for i in range(first)] + list(range(nb)) + \
        [nb + i for i in range(first, len(rest))]
    return g.transpose(out, perm)


def _broadcast_all(g, columns, bshape):
    """The index tensors broadcast to ``bshape``. When a size is data-dependent (a runtime
    mask's count) it cannot be written in a shape attribute: broadcast by adding zeros."""
    if all(isinstance(d, int) for d in bshape) or \
            all(list(e.shape) == bshape for e in columns):
        return [g.broadcast_to(e, bshape) for e in columns]
    zero = None
    for e in columns:
        z = g.binary("mul", e, g.scalar(0, torch.int64))
        zero = z if zero is None else g.binary("add", zero, z)
    return [g.binary("add", e, zero) if list(e.shape) != bshape else e for e in columns]


def _expand_masks(g, self, entries):
    """Boolean masks become one integer index tensor per masked axis (non-negative: their
    ids are returned in the second result)."""
    out, nonneg = [], set()
    for k, e in enumerate(entries):
        if e is None or e.dtype not in _MASK_DTYPES:
            out.append(e)
            continue
        at = len(out)
        if e.rank == 0:
            raise g.error(f"indices[{k}]: a 0-dim boolean index (x[True]) is not supported")
        want = list(self.shape[at:at + e.rank])
        if want != list(e.shape):
            raise g.error(f"indices[{k}]: mask shape {list(e.shape)} does not match the "
                          f"indexed axes {want}")
        if e.is_const:
            cols = [g.const(c.contiguous(), torch.int64)
                    for c in torch.nonzero(e.value.bool()).unbind(1)]
        else:
            cols = runtime_mask_positions(g, k, e)
        out += cols
        nonneg.update(id(c) for c in cols)
    return out, nonneg


@aten("_unsafe_masked_index")
def _unsafe_masked_index(g, self, mask, indices, fill):
    """``where(mask, self[clamped indices], fill)`` (the mask broadcasts with the result)."""
    from t2n.mappings.helpers.elementwise import where_

    if mask.dtype != torch.bool:
        raise g.error(f"mask: must be bool, got {mask.dtype}")
    indices = list(indices)
    if any(isinstance(d, int) and d == 0 for d in self.shape) and g.node is not None:
        return g.broadcast_to(g.as_tensor(fill, self.dtype), g.out_shape())  # all `fill`
    picked = index(g, self, clamp_indices(g, self, indices))
    return where_(g, mask, picked, g.as_tensor(fill, picked.dtype))
