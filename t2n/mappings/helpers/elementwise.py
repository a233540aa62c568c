"""Typed element-wise building blocks: select with scalars, NaN/Inf tests, NaN-propagating
min/max, log1p/expm1 with Kahan's correction, torch's sign."""

from __future__ import annotations

import math

import torch


def select(g, cond, a, b, dtype=None):
    """where(cond, a, b) with Python scalars allowed for a/b (typed like the other side)."""
    if dtype is None:
        dtype = a.dtype if hasattr(a, "dtype") else b.dtype
    a = g.as_tensor(a, dtype)
    b = g.as_tensor(b, dtype)
    rank = max(cond.rank, a.rank, b.rank)
    return g.op("select", g.unsqueeze_to_rank(cond, rank), g.unsqueeze_to_rank(a, rank),
                g.unsqueeze_to_rank(b, rank), out_dtype=dtype)


def is_inf(g, x):
    """|x| == inf (tract_core_is_inf does not give a bool on f64)."""
    return _bool(g, "eq", g.unary("abs", x), g.scalar(float("inf"), x.dtype))


def is_nan(g, x):
    """x != x (tract_core_is_nan has no f64 kernel)."""
    if x.dtype == torch.float64:
        return _bool(g, "ne", x, x)
    return g.op("tract_core_is_nan", x, out_dtype=torch.bool)


def log1p_of(g, x):
    u = g.binary("add", x, 1.0, x.dtype)
    d = g.binary("sub", u, 1.0, x.dtype)
    ratio = g.binary("div", x, d, x.dtype)
    general = g.binary("mul", g.unary("log", u), ratio, x.dtype)
    # u == inf: log(u) is right, the ratio is nan
    general = select(g, is_inf(g, u), g.unary("log", u), general)
    return select(g, _bool(g, "eq", d, g.scalar(0.0, x.dtype)), x, general)


def expm1_of(g, x):
    u = g.unary("exp", x)
    um1 = g.binary("sub", u, 1.0, x.dtype)
    general = g.binary("div", g.binary("mul", um1, x, x.dtype), g.unary("log", u), x.dtype)
    general = select(g, _bool(g, "eq", um1, g.scalar(-1.0, x.dtype)), um1, general)
    general = select(g, is_inf(g, u), u, general)
    return select(g, _bool(g, "eq", u, g.scalar(1.0, x.dtype)), x, general)


def sign_of(g, x):
    """torch.sign: -1, 0 or 1, and 0 for NaN (tract's sign keeps NaN)."""
    if x.dtype == torch.bool:
        return x
    s = g.unary("sign", x)
    if x.dtype.is_floating_point:
        s = select(g, is_nan(g, x), 0.0, s, x.dtype)
    return s


def where_(g, cond, a, b):
    rank = max(cond.rank, a.rank, b.rank)
    cond = g.unsqueeze_to_rank(cond, rank)
    a = g.unsqueeze_to_rank(a, rank)
    b = g.unsqueeze_to_rank(b, rank)
    return g.op("select", cond, a, b, out_dtype=a.dtype)


def nan_propagating(g, kind, a, b, dtype):
    """``max``/``min`` that return NaN when an operand is NaN, as torch.maximum/minimum
    and clamp do (tract's max/min return the other operand, which is fmax/fmin)."""
    r = g.binary(kind, a, b, dtype)
    if not dtype.is_floating_point:
        return r
    for t in (b, a):
        if not hasattr(t, "rank"):
            if not (isinstance(t, float) and math.isnan(t)):
                continue
            t = g.scalar(t, dtype)
        elif t.is_const and not torch.isnan(t.value.double()).any():
            continue
        t = g.cast(t, dtype)
        r = where_(g, g.op("tract_core_is_nan", t, out_dtype=torch.bool), t, r)
    return r


def _bool(g, kind, a, b):
    return g.binary(kind, a, b, a.dtype, out_dtype=torch.bool)
