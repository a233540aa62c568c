"""``aten::index``: NumPy-style advanced indexing, ``x[i, :, j]``, ``x[:, idx]``, ``x[mask]``.

PyTorch's rule: the index tensors (``None`` entries keep their axis) broadcast together to a
shape ``B``; when the indexed axes are adjacent, ``B`` replaces them in place, otherwise ``B``
comes first, followed by the kept axes.

Lowering, a fixed number of ops per index tensor whatever the number of indices:

* one index tensor: ``tract_core_gather`` on its axis (negative indices are native);
* several: the indexed axes are moved to the front, the index tensors (negatives wrapped,
  since ``tract_core_gather_nd`` aborts on them) are broadcast and stacked on a last axis,
  one ``tract_core_gather_nd``, then ``B`` is moved back in place when the axes were adjacent.

A boolean mask selects a data-dependent number of elements: a constant mask becomes integer
indices at export time; a mask computed at run time is refused (tract needs static ranks and
has no ``nonzero`` in NNEF).
"""

from __future__ import annotations

import torch

from t2n.builder import broadcast_shapes
from t2n.registry import aten
from op_mappings.gather import check_const_indices, wrap_negative

_MASK_DTYPES = (torch.bool, torch.uint8)


@aten("index")
def index(g, self, indices):
    entries = _expand_masks(g, self, list(indices))
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
    return _gather_nd(g, self, entries, axes)


def _gather_nd(g, self, entries, axes):
    bshape = list(broadcast_shapes(*(entries[a].shape for a in axes)))
    columns = []
    for a in axes:
        e = g.cast(entries[a], torch.int64)
        e = wrap_negative(g, e, self, a)
        e = g.broadcast_to(e, bshape)
        columns.append(g.unsqueeze(e, [len(bshape)]))
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


def _expand_masks(g, self, entries):
    """Constant boolean masks become one integer index tensor per masked axis."""
    out = []
    for k, e in enumerate(entries):
        if e is None or e.dtype not in _MASK_DTYPES:
            out.append(e)
            continue
        at = len(out)
        if not e.is_const:
            raise g.error(f"indices[{k}]: a boolean mask computed at run time selects a "
                          "data-dependent number of elements, which tract cannot represent; "
                          "use torch.where/masked_fill, or make the mask a constant")
        mask = e.value.bool()
        if mask.dim() == 0:
            raise g.error(f"indices[{k}]: a 0-dim boolean index (x[True]) is not supported")
        want = list(self.shape[at:at + mask.dim()])
        if [int(d) if isinstance(d, int) else d for d in want] != list(mask.shape):
            raise g.error(f"indices[{k}]: mask shape {list(mask.shape)} does not match the "
                          f"indexed axes {want}")
        for col in torch.nonzero(mask).unbind(1):
            out.append(g.const(col.contiguous(), torch.int64))
    return out
