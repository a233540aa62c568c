"""Padding: ``pad`` (``F.pad``, and what ``nn.Conv*d(padding_mode=...)`` traces to),
``constant_pad_nd``, ``reflection_pad*``, ``replication_pad*``, ``_pad_circular``.

tract's ``pad`` knows ``constant``, ``reflect`` and ``replicated`` borders (it refuses the
spelling ``replicate``); circular padding is written as a concat of slices, one per padded
side. PyTorch's pad list runs from the last axis backwards, ``(left, right)`` per axis;
negative amounts crop, which is a slice. Amounts computed from dynamic axes (symbolic) go
through :mod:`t2n.mappings.helpers.pad_regions`: an amount whose sign is not known crops by
``max(-p, 0)`` and pads by ``max(p, 0)``. The output shapes are the mappings' own (input
plus amounts): PyTorch's circular shape function guards on the example's amounts.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.pad_regions import pad_axis, positive_part
from t2n.walk.builder import _is_sym
from t2n.walk.registry import aten, own_shapes

_BORDER = {"constant": "constant", "reflect": "reflect", "replicate": "replicated"}


def _pairs(g, self, pad) -> list[tuple[int, int]]:
    """(before, after) for every axis of ``self``, from torch's reversed flat list."""
    pad = list(pad)
    if len(pad) % 2 or len(pad) // 2 > self.rank:
        raise g.error(f"pad: {pad} must hold pairs for at most {self.rank} axes")
    pairs = [(0, 0)] * self.rank
    for i in range(len(pad) // 2):
        pairs[self.rank - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    for b, e in pairs:
        for v in (b, e):
            if not isinstance(v, int) and not _is_sym(v):
                raise g.error(f"pad: amount {v!r} is not an integer")
    return pairs


def _crop(g, x, pairs):
    """Apply the negative amounts as slices; return the remaining non-negative pairs."""
    rest = []
    for axis, (b, e) in enumerate(pairs):
        cut_b, cut_e = positive_part(-b), positive_part(-e)
        n = x.shape[axis]
        if isinstance(cut_b, int) and isinstance(cut_e, int) and isinstance(n, int) \
                and n - cut_e < cut_b:
            raise g.error(f"pad: cropping more than the {n} elements of axis {axis}")
        x = g.slice(x, axis, cut_b, n - cut_e)
        rest.append((positive_part(b), positive_part(e)))
    return x, rest


def pad_nd(g, self, pairs, mode="constant", value=None):
    x, pairs = _crop(g, self, pairs)
    if all(p == (0, 0) for p in pairs):
        return x
    if mode not in _BORDER and mode != "circular":
        raise g.error(f"mode: unknown padding mode {mode!r}")
    value = _fill_value(g, x, value) if mode == "constant" else None
    if mode == "circular":
        for axis, (b, e) in enumerate(pairs):
            n = x.shape[axis]
            if isinstance(n, int) and any(isinstance(v, int) and v > n for v in (b, e)):
                raise g.error(f"pad: circular padding {max(b, e)} is larger than size {n} "
                              f"of axis {axis}")
        return _per_axis(g, x, pairs, mode, value)
    if any(_is_sym(v) for p in pairs for v in p):
        # the axes of static amounts in one pad op, then one region per symbolic amount
        static = [(0, 0) if _is_sym(b) or _is_sym(e) else (b, e) for b, e in pairs]
        rest = [(b, e) if _is_sym(b) or _is_sym(e) else (0, 0) for b, e in pairs]
        return _per_axis(g, pad_nd(g, x, static, mode, value), rest, mode, value)
    if mode == "reflect":
        for axis, (b, e) in enumerate(pairs):
            n = x.shape[axis]
            if isinstance(n, int) and (b >= n or e >= n):
                raise g.error(f"pad: reflect padding {max(b, e)} must be < size {n} of axis "
                              f"{axis}")
    if mode == "replicate":
        for axis, (b, e) in enumerate(pairs):
            if (b or e) and isinstance(x.shape[axis], int) and x.shape[axis] == 0:
                raise g.error(f"pad: replicate padding of the empty axis {axis}")
    shape = [d + b + e for d, (b, e) in zip(x.shape, pairs)]
    attrs = {"value": float(value)} if mode == "constant" else {}
    return g.op("pad", x, padding=[tuple(p) for p in pairs], border=_BORDER[mode],
                out_shape=shape, out_dtype=x.dtype, **attrs)


def _fill_value(g, x, value):
    """The constant border as a number of ``x``'s kind (tract casts it to the dtype)."""
    v = 0.0 if value is None else value
    if x.dtype.is_floating_point:
        return float(v)
    if x.dtype == torch.bool:
        return bool(v)  # (the graph pads bool tensors as u8 0/1)
    if float(v) != int(v):
        raise g.error(f"value: padding a {x.dtype} tensor with {v!r} is not supported")
    return int(v)


def _per_axis(g, x, pairs, mode, value):
    for axis, (b, e) in enumerate(pairs):
        if (b, e) != (0, 0):
            x = pad_axis(g, x, axis, b, e, mode, value)
    return x


@aten("pad")
@own_shapes
def pad(g, self, pad, mode="constant", value=None):
    return pad_nd(g, self, _pairs(g, self, pad), mode, value)


@aten("constant_pad_nd")
@own_shapes
def constant_pad_nd(g, self, pad, value=0):
    return pad_nd(g, self, _pairs(g, self, pad), "constant", value)


@aten("reflection_pad1d", "reflection_pad2d", "reflection_pad3d")
@own_shapes
def reflection_pad(g, self, padding):
    return pad_nd(g, self, _pairs(g, self, padding), "reflect")


@aten("replication_pad1d", "replication_pad2d", "replication_pad3d")
@own_shapes
def replication_pad(g, self, padding):
    return pad_nd(g, self, _pairs(g, self, padding), "replicate")


@aten("_pad_circular")
@own_shapes
def pad_circular(g, self, pad):
    return pad_nd(g, self, _pairs(g, self, pad), "circular")
