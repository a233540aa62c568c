"""Cumulative scans beyond cumsum: cumprod, cummax, cummin, logcumsumexp, and the
trapezoid rules.

tract has a cumsum but no other scan, so these reduce over a lower-triangular window:
the axis is expanded to [n (output), n (input)] with a constant mask, and one reduction
runs over the input axis. The op count is constant; memory is n times the input.
"""

from __future__ import annotations

import numpy as np
import torch

from t2n.mappings.helpers.elementwise import is_nan, select
from t2n.walk.registry import aten


def _window(g, x, axis, fill):
    """x expanded to [..., n_out, n_in, ...] with entries past n_out replaced by ``fill``."""
    n = x.shape[axis]
    if not isinstance(n, int):
        raise g.error("a cumulative scan over a dynamic axis is not supported")
    xe = g.unsqueeze(x, [axis])  # [..., 1, n, ...]
    shape = list(xe.shape)
    shape[axis] = n
    xe = g.broadcast_to(xe, shape)
    mask_shape = [1] * xe.rank
    mask_shape[axis], mask_shape[axis + 1] = n, n
    mask = g.const(torch.from_numpy(np.tril(np.ones((n, n), dtype=bool)).reshape(mask_shape)))
    return g.op("select", mask, xe, g.broadcast_to(g.scalar(fill, x.dtype), shape),
                out_shape=shape, out_dtype=x.dtype), n


def _scan(g, x, dim, kind, fill):
    if x.rank == 0:
        return x
    axis = dim % x.rank
    if x.shape[axis] == 0:
        return x
    w, _ = _window(g, x, axis, fill)
    return g.reduce(kind, w, [axis + 1], keepdim=False)


@aten("cumprod")
def cumprod(g, self, dim, dtype=None):
    x = g.cast(self, g.out_dtype())
    return _scan(g, x, dim, "tract_core_product_reduce", 1)


def _cum_extreme(g, self, dim, largest):
    x = self
    if x.rank == 0:
        return x, g.scalar(0, torch.int64)
    axis = dim % x.rank
    n = x.shape[axis]
    if n == 0:
        return x, g.cast(x, torch.int64)
    d = x.dtype
    if d == torch.bool:
        x = g.cast(x, torch.uint8)
    if d.is_floating_point:
        fill = float("-inf") if largest else float("inf")
    else:
        info = torch.iinfo(x.dtype)
        fill = info.min if largest else info.max
    w, _ = _window(g, x, axis, fill)
    kind = "max_reduce" if largest else "min_reduce"
    values = g.reduce(kind, w, [axis + 1], keepdim=True)
    # torch reports the last position holding the running extreme (NaN propagates)
    hit = g.binary("eq", w, values, x.dtype, out_dtype=torch.bool)
    if d.is_floating_point:
        nan_w = is_nan(g, w)
        hit = g.binary("or", hit, nan_w, torch.bool)
        any_nan = g.reduce("any_reduce", nan_w, [axis + 1], keepdim=True)
        values = select(g, any_nan, float("nan"), values, x.dtype)
    pos_shape = [1] * w.rank
    pos_shape[axis + 1] = n
    pos = g.const(torch.arange(n, dtype=torch.int64).reshape(pos_shape))
    # only positions up to the output's own (the fill past it may equal the extreme)
    mask_shape = [1] * w.rank
    mask_shape[axis], mask_shape[axis + 1] = n, n
    seen = g.const(torch.from_numpy(np.tril(np.ones((n, n), dtype=bool)).reshape(mask_shape)))
    hit = g.binary("and", hit, seen, torch.bool)
    cand = select(g, hit, pos, -1, torch.int64)
    if d.is_floating_point:
        # once a NaN is seen the value stays NaN, and each later NaN takes the index (the
        # kernel's test is `isnan(x) || x >= running`): the index is the last NaN so far
        last_nan = select(g, is_nan(g, w), pos, -1, torch.int64)
        last_nan = g.reduce("max_reduce", last_nan, [axis + 1], keepdim=True)
        idx = g.reduce("max_reduce", cand, [axis + 1], keepdim=True)
        idx = select(g, g.binary("ge", last_nan, 0, torch.int64, out_dtype=torch.bool),
                     last_nan, idx)
    else:
        idx = g.reduce("max_reduce", cand, [axis + 1], keepdim=True)
    values = g.squeeze(values, [axis + 1])
    idx = g.squeeze(idx, [axis + 1])
    return g.cast(values, d), idx


@aten("cummax")
def cummax(g, self, dim):
    return _cum_extreme(g, self, dim, True)


@aten("cummin")
def cummin(g, self, dim):
    return _cum_extreme(g, self, dim, False)


@aten("logcumsumexp")
def logcumsumexp(g, self, dim):
    x = self
    if x.rank == 0:
        return x
    axis = dim % x.rank
    if x.shape[axis] == 0:
        return x
    d = x.dtype
    w, _ = _window(g, x, axis, float("-inf"))
    m = g.reduce("max_reduce", w, [axis + 1], keepdim=True)
    m_safe = select(g, g.binary("eq", g.unary("abs", m), float("inf"), d, out_dtype=torch.bool),
                    0.0, m, d)
    s = g.reduce("sum_reduce", g.unary("exp", g.binary("sub", w, m_safe, d)), [axis + 1],
                 keepdim=True)
    return g.squeeze(g.binary("add", g.unary("log", s), m_safe, d), [axis + 1])


def _trapz_terms(g, y, x, dx, dim):
    axis = dim % y.rank
    n = y.shape[axis]
    d = g.out_dtype()
    y = g.cast(y, d)
    if n == 0:
        return None, axis, d
    avg = g.binary("mul", g.binary("add", g.slice(y, axis, 1, n), g.slice(y, axis, 0, n - 1),
                                   d), 0.5, d)
    if x is not None:
        x = g.cast(x, d)
        xa = x.rank - 1 if x.rank == 1 else axis
        if x.rank == 1 and y.rank > 1:
            shape = [1] * y.rank
            shape[axis] = n
            x = g.reshape(x, shape)
            xa = axis
        dxs = g.binary("sub", g.slice(x, xa, 1, n), g.slice(x, xa, 0, n - 1), d)
        return g.binary("mul", avg, dxs, d), axis, d
    return g.binary("mul", avg, float(dx), d), axis, d


def _x_or_dx(x_or_dx):
    """The .x overloads pass sample points (a tensor), the .dx ones a spacing (a number)."""
    if hasattr(x_or_dx, "rank"):
        return x_or_dx, None
    return None, 1.0 if x_or_dx is None else x_or_dx


@aten("trapezoid", "trapz")
def trapezoid(g, y, x_or_dx=None, dim=-1):
    x, dx = _x_or_dx(x_or_dx)
    terms, axis, d = _trapz_terms(g, y, x, dx, dim)
    if terms is None:
        shape = [s for i, s in enumerate(y.shape) if i != axis]
        return g.broadcast_to(g.scalar(0.0, d), shape)
    return g.reduce("sum_reduce", terms, [axis], keepdim=False)


@aten("cumulative_trapezoid")
def cumulative_trapezoid(g, y, x_or_dx=None, dim=-1):
    x, dx = _x_or_dx(x_or_dx)
    terms, axis, d = _trapz_terms(g, y, x, dx, dim)
    if terms is None:
        return y
    return g.op("tract_core_cumsum", terms, axis=axis, exclusive=False, reverse=False)


def _gradient_axis(g, x, axis, h, edge_order):
    """Second-order central differences inside, first/second-order one-sided at the edges."""
    n = x.shape[axis]
    d = x.dtype
    if not isinstance(n, int) or n < edge_order + 1:
        raise g.error(f"gradient needs at least {edge_order + 1} points along dim {axis}")
    inner = g.binary("div", g.binary("sub", g.slice(x, axis, 2, n), g.slice(x, axis, 0, n - 2),
                                     d), 2.0 * h, d)

    def at(i):
        return g.slice(x, axis, i, i + 1)

    if edge_order == 1:
        first = g.binary("div", g.binary("sub", at(1), at(0), d), float(h), d)
        last = g.binary("div", g.binary("sub", at(n - 1), at(n - 2), d), float(h), d)
    else:
        first = g.binary("div", g.binary("sub", g.binary("sub", g.binary("mul", at(1), 4.0, d),
                                                         g.binary("mul", at(0), 3.0, d), d),
                                         at(2), d), 2.0 * h, d)
        last = g.binary("div", g.binary("add", g.binary("sub", g.binary(
            "mul", at(n - 1), 3.0, d), g.binary("mul", at(n - 2), 4.0, d), d), at(n - 3), d),
            2.0 * h, d)
    return g.concat([first, inner, last], axis)


@aten("gradient")
def gradient(g, self, *args):
    """Overloads (self, spacing, dim, edge_order) and (self, dim, edge_order); scalar
    spacings only (coordinate tensors are refused)."""
    if len(args) == 2:
        spacing, (dim, edge_order) = None, args
    else:
        spacing, dim, edge_order = args
    d = self.dtype if self.dtype.is_floating_point else torch.float32
    x = g.cast(self, d)
    dims = list(range(x.rank)) if dim is None else ([dim] if isinstance(dim, int) else dim)
    dims = [k % x.rank for k in dims]
    if spacing is None:
        hs = [1.0] * len(dims)
    elif isinstance(spacing, (int, float)):
        hs = [float(spacing)] * len(dims)
    else:
        if any(hasattr(s, "rank") for s in spacing):
            raise g.error("gradient with coordinate tensors as spacing is not supported")
        hs = [float(s) for s in spacing]
    return [_gradient_axis(g, x, a, h, edge_order) for a, h in zip(dims, hs)]
