"""Where a compacted channel goes through ops that are not element-wise (for ``compact``).

A zeroed channel holds one constant in every position. Some ops that move or reduce data
keep that true, per channel, so compaction can follow the channel through them to the
layers that consume it:

* pooling (``max_pool``, and ``avg_pool``; windows only over spatial axes) without padding,
  or with padding that is ignored (``border = 'ignore'``): a window of a constant is that
  constant;
* ``mean_reduce``, ``max_reduce``, ``min_reduce`` over axes other than the channel axis
  (the reduced axes stay as size 1);
* a ``pad`` of the spatial axes: the channel stays where it is (what it holds then is
  ``compact_values``' business: a ``reflect``/``replicated`` pad keeps a constant, a
  constant pad makes it a map unless the value is the same);
* ``squeeze``/``unsqueeze`` of other axes, and a ``reshape`` that either keeps the channel
  axis as it is or flattens it with every axis after it (``Flatten`` before a linear head):
  the channel then becomes a block of consecutive features of the flattened axis.

A tensor on the way is described by its *layout*: ``(axis, block)``, the axis holding the
channels and the number of consecutive entries of that axis per channel (1 until a flatten).
A constant through these ops is unchanged, so their results carry the same per-channel
values. Element-wise ops are only followed where ``block`` is 1 (their constants are
per-channel vectors there); a linear layer reading a flattened tensor loses the input
features of the removed channels' blocks.
"""

from __future__ import annotations

from t2n.walk.builder import Op, Tensor

_REDUCE = ("mean_reduce", "max_reduce", "min_reduce")
POOLING = ("max_pool", "avg_pool")
KINDS = POOLING + _REDUCE + ("squeeze", "unsqueeze", "reshape", "pad")  # what ``through``
#                                                                     follows


def _static(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= int(x)
    return p


def through(op: Op, pos, t: Tensor, layout: tuple, channels: int):
    """The layout of ``op``'s output when ``op`` carries ``t``'s constant channels through
    (see the module docstring), else None."""
    axis, block = layout
    if pos != 0 or len(op.outputs) != 1:
        return None
    o = op.outputs[0]
    if op.kind in ("max_pool", "avg_pool"):
        if block != 1 or axis != 1 or not isinstance(op.args[0], Tensor) or op.args[0] is not t:
            return None
        size = list(op.attrs.get("size", []))
        stride = list(op.attrs.get("stride", []))
        if len(size) != t.rank or any(int(s) != 1 for s in size[:2]) \
                or any(int(s) != 1 for s in stride[:2]):
            return None
        pad = op.attrs.get("padding") or []
        padded = not pad or any(int(a) or int(b) for a, b in pad)
        if padded and op.attrs.get("border") != "ignore":
            return None
        return (1, 1) if o.shape[1] == t.shape[1] else None
    if op.kind == "pad":
        pads = op.attrs.get("padding") or []
        if block != 1 or axis != 1 or len(pads) != t.rank or op.args[0] is not t or \
                any(int(a) or int(b) for a, b in pads[:2]):
            return None
        return (1, 1)
    if op.kind in _REDUCE:
        axes = [int(a) for a in op.attrs.get("axes", [])]
        if axis in axes or o.rank != t.rank:
            return None
        return (axis, block)
    if op.kind == "squeeze":
        axes = sorted(int(a) for a in op.attrs.get("axes", []))
        if axis in axes:
            return None
        return (axis - sum(1 for a in axes if a < axis), block)
    if op.kind == "unsqueeze":
        new = axis
        for a in sorted(int(a) for a in op.attrs.get("axes", [])):
            if a <= new:
                new += 1
        return (new, block)
    if op.kind == "reshape":
        src, dst = list(t.shape), list(o.shape)
        if not _static(src) or not _static(dst):
            return None
        before = _prod(src[:axis])
        for j in range(len(dst)):
            if _prod(dst[:j]) != before:
                continue
            if dst[j] == src[axis] and _prod(dst[j + 1:]) == _prod(src[axis + 1:]):
                return (j, block)
            if _prod(dst[j + 1:]) == 1 and dst[j] == _prod(src[axis:]):
                return (j, block * _prod(src[axis + 1:]))
        return None
    return None


def resize(op: Op) -> None:
    """After the channel axes shrank: a ``reshape`` on the way writes its new target."""
    if op.kind == "reshape":
        op.attrs["shape"] = list(op.outputs[0].shape)


def features(idx, block: int):
    """Channel indices as the indices of their blocks of ``block`` features."""
    import torch

    if block == 1:
        return idx
    return (idx.reshape(-1, 1) * block + torch.arange(block).reshape(1, -1)).reshape(-1)
