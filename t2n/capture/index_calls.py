"""Advanced-indexing calls rewritten while ``torch.export`` captures, where torch's fake
kernel of ``aten::index`` (``meta_index_Tensor``, torch 2.13) would record a wrong shape
or fail; each rewrite computes what eager computes (:class:`t2n.capture.leaf_ops.Leaves`
applies them).

* A 0-d index last, beside an index of rank >= 1 (``aten::index(x, [i, j])`` with ``j`` a
  0-d tensor): the kernel keeps a CPU scalar index unbroadcast and takes the last index's
  shape for the result's, ``()`` where eager gives ``i``'s, and every shape derived from it
  would be wrong. The 0-d index gets the shape ``[1]``, which broadcasts like ``()``.
* A boolean mask beside another index tensor (``x[mask, :, i]``): the kernel expands the
  mask into its true positions itself, under a size ``u0`` that it then has to equate with
  ``i``'s length, so no output of the node holds ``u0`` (``PendingUnbackedSymbolNotFound``).
  The mask is given as its positions (``mask.nonzero(as_tuple=True)``, what the kernel
  expands it into): ``nonzero`` is then a node of its own whose output holds ``u0``.
"""

from __future__ import annotations

import torch

_MASKS = (torch.bool, torch.uint8)


def _is_mask(i) -> bool:
    return isinstance(i, torch.Tensor) and i.dtype in _MASKS and i.dim() > 0


def _is_index_tensor(i) -> bool:
    return isinstance(i, torch.Tensor) and (i.dim() > 0 or i.dtype not in _MASKS)


def _masks_as_positions(indices: list) -> list:
    """``indices`` with each boolean mask replaced by its true positions, one index tensor
    per masked axis, when a mask is used beside another index tensor (else unchanged)."""
    if not any(_is_mask(i) for i in indices) or \
            sum(1 for i in indices if _is_index_tensor(i)) < 2:
        return indices
    out = []
    for i in indices:
        out.extend(i.nonzero(as_tuple=True) if _is_mask(i) else (i,))
    return out


def _broadcast_last_scalar(indices: list) -> list:
    """``indices`` with each 0-d integer index as shape ``[1]`` when the last index tensor
    is one and another has a rank (else unchanged)."""
    given = [i for i in indices if i is not None]
    if not given or not all(isinstance(i, torch.Tensor) for i in given) \
            or given[-1].dim() != 0 or given[-1].dtype in _MASKS \
            or all(i.dim() == 0 for i in given):
        return indices
    return [i.reshape(1) if isinstance(i, torch.Tensor) and i.dim() == 0
            and i.dtype not in _MASKS else i for i in indices]


def index_args(self, indices=None, *rest) -> tuple:
    """``aten::index``'s arguments as torch.export captures them right."""
    if not isinstance(indices, (list, tuple)):
        return (self, indices, *rest)
    return (self, _broadcast_last_scalar(_masks_as_positions(list(indices))), *rest)


def getitem_args(self, key) -> tuple:
    """``Tensor.__getitem__``'s arguments with the masks of a tuple key given as positions
    (a 0-d integer tensor in a key is a Python index to torch, not an index tensor, and is
    left as it is)."""
    if isinstance(key, tuple):
        key = tuple(_masks_as_positions(list(key)))
    return (self, key)
