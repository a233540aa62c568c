"""Padding: ``pad`` (``F.pad``, and what ``nn.Conv*d(padding_mode=...)`` traces to),
``constant_pad_nd``, ``reflection_pad*``, ``replication_pad*``, ``_pad_circular``.

tract's ``pad`` knows ``constant``, ``reflect`` and ``replicated`` borders (it refuses the
spelling ``replicate``); circular padding is written as a concat of slices, one per padded
side. PyTorch's pad list runs from the last axis backwards, ``(left, right)`` per axis;
negative amounts crop, which is a slice.
"""

from __future__ import annotations

import torch

from t2n.walk.registry import aten

_BORDER = {"constant": "constant", "reflect": "reflect", "replicate": "replicated"}


def _pairs(g, self, pad) -> list[tuple[int, int]]:
    """(before, after) for every axis of ``self``, from torch's reversed flat list."""
    pad = list(pad)
    if len(pad) % 2 or len(pad) // 2 > self.rank:
        raise g.error(f"pad: {pad} must hold pairs for at most {self.rank} axes")
    pairs = [(0, 0)] * self.rank
    for i in range(len(pad) // 2):
        pairs[self.rank - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    for a, (b, e) in enumerate(pairs):
        if not isinstance(b, int) or not isinstance(e, int):
            raise g.error("pad: symbolic pad amounts are not supported")
    return pairs


def _crop(g, x, pairs):
    """Apply the negative amounts as slices; return the remaining non-negative pairs."""
    rest = []
    for axis, (b, e) in enumerate(pairs):
        if b < 0 or e < 0:
            n = x.shape[axis]
            begin, end = max(-b, 0), n - max(-e, 0)
            if not isinstance(n, int):
                raise g.error("pad: cropping a symbolic axis is not supported")
            if end < begin:
                raise g.error(f"pad: cropping more than the {n} elements of axis {axis}")
            x = g.slice(x, axis, begin, end)
        rest.append((max(b, 0), max(e, 0)))
    return x, rest


def pad_nd(g, self, pairs, mode="constant", value=None):
    x, pairs = _crop(g, self, pairs)
    if all(p == (0, 0) for p in pairs):
        return x
    if mode == "circular":
        return _circular(g, x, pairs)
    if mode not in _BORDER:
        raise g.error(f"mode: unknown padding mode {mode!r}")
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
    attrs = {}
    if mode == "constant":
        v = 0.0 if value is None else value
        if x.dtype.is_floating_point:
            attrs["value"] = float(v)
        elif x.dtype == torch.bool:
            attrs["value"] = float(bool(v))  # (the graph pads bool tensors as u8 0/1)
        elif float(v) != int(v):
            raise g.error(f"value: padding a {x.dtype} tensor with {v!r} is not supported")
        else:
            attrs["value"] = float(v)  # tract casts the scalar to the tensor's dtype
    return g.op("pad", x, padding=[tuple(p) for p in pairs], border=_BORDER[mode],
                out_shape=shape, out_dtype=x.dtype, **attrs)


def _circular(g, x, pairs):
    for axis, (b, e) in enumerate(pairs):
        if not b and not e:
            continue
        n = x.shape[axis]
        if not isinstance(n, int):
            raise g.error("pad: circular padding of a symbolic axis is not supported")
        if b > n or e > n:
            raise g.error(f"pad: circular padding {max(b, e)} is larger than size {n} of "
                          f"axis {axis}")
        parts = []
        if b:
            parts.append(g.slice(x, axis, n - b, n))
        parts.append(x)
        if e:
            parts.append(g.slice(x, axis, 0, e))
        x = g.concat(parts, axis)
    return x


@aten("pad")
def pad(g, self, pad, mode="constant", value=None):
    return pad_nd(g, self, _pairs(g, self, pad), mode, value)


@aten("constant_pad_nd")
def constant_pad_nd(g, self, pad, value=0):
    return pad_nd(g, self, _pairs(g, self, pad), "constant", value)


@aten("reflection_pad1d", "reflection_pad2d", "reflection_pad3d")
def reflection_pad(g, self, padding):
    return pad_nd(g, self, _pairs(g, self, padding), "reflect")


@aten("replication_pad1d", "replication_pad2d", "replication_pad3d")
def replication_pad(g, self, padding):
    return pad_nd(g, self, _pairs(g, self, padding), "replicate")


@aten("_pad_circular")
def pad_circular(g, self, pad):
    return pad_nd(g, self, _pairs(g, self, pad), "circular")
