"""Padding one axis by amounts that are expressions of the dynamic axes (``pad`` by
``(chunk - S % chunk) % chunk``, as Mamba 2 pads its sequence to whole chunks).

tract's ``pad`` op holds its amounts as plain integers, fixed when the archive loads, so a
symbolic amount is written as the padded regions themselves, each a tensor whose length is
the amount (a dim expression tract evaluates at run time, possibly 0), concatenated around
the input:

* ``constant``: the value broadcast to the region's shape;
* ``replicate``: the first (last) slice broadcast to it;
* ``reflect``: a gather of the input at ``b, b-1, ..., 1`` (``n-2, n-3, ...`` after);
* ``circular``: the input's last ``b`` (first ``e``) elements, sliced.

Each is a fixed handful of ops whatever the amounts. The modes are separable, so a pad of
several axes is one such step per axis, in any order.
"""

from __future__ import annotations

import torch

from t2n.walk.builder import _is_sym
from t2n.walk.tensors import known_nonnegative


def positive_part(v):
    """``max(v, 0)`` of an int or a sympy expression (simplified when its sign is known)."""
    if _is_sym(v):
        import sympy

        if known_nonnegative(v):
            return v
        if known_nonnegative(-v):
            return 0
        return sympy.Max(v, 0)
    return max(v, 0)


def pad_axis(g, x, axis: int, before, after, mode: str, value):
    """``x`` padded along ``axis`` by non-negative ``before``/``after`` (ints or symbolic)."""
    n = x.shape[axis]
    parts = []
    for side, amount in (("before", before), ("after", after)):
        if isinstance(amount, int) and amount == 0:
            parts.append(None)
        elif mode == "constant":
            parts.append(_region(g, x, axis, amount, g.scalar(value, x.dtype)))
        elif mode == "replicate":
            edge = g.slice(x, axis, 0, 1) if side == "before" else g.slice(x, axis, n - 1, n)
            parts.append(_region(g, x, axis, amount, edge))
        elif mode == "reflect":
            # before: x[b], ..., x[1]; after: x[n-2], ..., x[n-1-e]
            first = amount if side == "before" else n - 2
            idx = g.binary("sub", g.scalar(first, torch.int64), g.arange(amount), torch.int64)
            parts.append(g.gather(x, idx, axis))
        elif mode == "circular":
            parts.append(g.slice(x, axis, n - amount, n) if side == "before"
                         else g.slice(x, axis, 0, amount))
        else:
            raise g.error(f"mode: unknown padding mode {mode!r}")
    pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
    return g.concat(pieces, axis)


def _region(g, x, axis, amount, fill):
    shape = list(x.shape)
    shape[axis] = amount
    return g.broadcast_to(fill, shape)
