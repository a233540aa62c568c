"""Vector and matrix norms as reductions over given axes, shared by ``statistics`` (the norm
ops), ``losses`` (distances) and the spectral family (``cond``). The spectral and nuclear
norms go through the Jacobi singular values of :mod:`.spectral`."""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import is_nan, select
from t2n.mappings.helpers.spectral import spectral_matrix_norm


def vector_norm_of(g, x, ord, axes, keepdim):
    d = x.dtype
    ax = g.unary("abs", x)
    if not axes:
        if ord == 0:
            return g.cast(g.binary("ne", x, g.scalar(0.0, d), d, out_dtype=torch.bool), d)
        return ax
    if ord in (float("inf"), float("-inf")):
        r = g.reduce("max_reduce" if ord > 0 else "min_reduce", ax, axes, keepdim)
        # tract's max/min skip NaN; PyTorch's norm of a slice holding one is NaN
        return select(g, g.reduce("any_reduce", is_nan(g, x), axes, keepdim), float("nan"), r, d)
    if ord == 0:
        nz = g.cast(g.binary("ne", x, g.scalar(0.0, d), d, out_dtype=torch.bool), d)
        return g.reduce("sum_reduce", nz, axes, keepdim)
    if ord == 1:
        return g.reduce("sum_reduce", ax, axes, keepdim)
    if ord == 2:
        return g.unary("sqrt", g.reduce("sum_reduce", g.binary("mul", x, x, d), axes, keepdim))
    p = float(ord)
    s = g.reduce("sum_reduce", g.binary("pow", ax, p, d), axes, keepdim)
    return g.binary("pow", s, 1.0 / p, d)


def matrix_norm_of(g, x, ord, dim, keepdim):
    """``torch.linalg.matrix_norm`` of the float ``x`` over the two axes ``dim``, in
    ``x.dtype``: 'fro', +-1, +-inf from reductions, 'nuc' and +-2 from singular values."""
    if dim is None or len(dim) == 0:  # as statistics' axis rule: every axis
        axes = list(range(x.rank))
    else:
        axes = sorted({d % x.rank for d in dim}) if x.rank else []
    if ord == "fro":
        return vector_norm_of(g, x, 2, axes, keepdim)
    if ord in (1, -1, float("inf"), float("-inf")):
        # max/min over columns (ord=+-1) or rows (ord=+-inf) of the absolute sums
        r, c = (d % x.rank for d in dim)  # in dim's order: dim=(1, 0) is the transpose
        inner, outer = (r, c) if ord in (1, -1) else (c, r)
        s = g.reduce("sum_reduce", g.unary("abs", x), [inner], keepdim=True)
        red = "max_reduce" if ord in (1, float("inf")) else "min_reduce"
        out = g.reduce(red, s, [outer], keepdim=True)
        if red == "max_reduce" and x.shape[outer] == 0:  # PyTorch: 0, not max's -inf
            out = g.broadcast_to(g.scalar(0.0, x.dtype), list(out.shape))
        return out if keepdim else g.squeeze(out, sorted(axes))
    if ord in ("nuc", 2, -2):
        return spectral_matrix_norm(g, x, ord, axes, keepdim)
    raise g.error(f"matrix norm ord={ord!r} is not supported")
