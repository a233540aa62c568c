"""Statistics and norms: var/std (with correction), their _mean forms, logsumexp,
count_nonzero, nansum/nanmean, aminmax, vector and matrix norms, distances, cosine
similarity.

Reductions in tract keep the reduced axes; ``g.reduce`` squeezes them for keepdim=False.
"""

from __future__ import annotations

import math

import torch

from t2n.mappings.helpers.elementwise import is_inf, is_nan, select
from t2n.mappings.helpers.vector_norms import matrix_norm_of, vector_norm_of
from t2n.walk.registry import aten


def _axes(x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.rank))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % x.rank for d in dims}) if x.rank else []


def _count(g, x, axes):
    """How many elements the reduction takes: an int, or a size expression of dynamic
    axes (then tract evaluates it at run time)."""
    n = 1
    for a in axes:
        n = n * x.shape[a]
    return n


def _float_in(g, x, dtype=None):
    d = dtype or (x.dtype if x.dtype.is_floating_point else torch.float32)
    return g.cast(x, d)


def var_of(g, x, axes, correction, keepdim):
    d = x.dtype
    n = _count(g, x, axes)
    mean = g.reduce("mean_reduce", x, axes, keepdim=True) if axes else x
    dev = g.binary("sub", x, mean, d)
    ss = g.reduce("sum_reduce", g.binary("mul", dev, dev, d), axes, keepdim=keepdim) \
        if axes else g.binary("mul", dev, dev, d)
    # PyTorch divides by max(0, n - correction): inf (or NaN for 0/0) when it is 0
    if isinstance(n, int):
        denom = g.scalar(float(max(n - correction, 0)), d)
    else:
        import sympy

        denom = g.cast(g.dim_scalar(sympy.Max(n - correction, 0)), d)
    v = g.binary("div", ss, denom, d)
    return v, (mean if keepdim or not axes else g.squeeze(mean, axes))


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    if unbiased is None:
        return 1
    return 1 if unbiased else 0


def _var_args(x, args):
    """var(self, dim, unbiased, keepdim) | var(self, dim, *, correction, keepdim) |
    var(self, unbiased): the traced overload decides the positions."""
    dim, unbiased, correction, keepdim = None, None, None, False
    if len(args) == 1 and isinstance(args[0], bool):
        unbiased = args[0]
    elif len(args) == 3 and (args[1] is None or isinstance(args[1], bool)) and \
            isinstance(args[2], bool):
        dim, unbiased, keepdim = args
    elif len(args) >= 1:
        dim = args[0]
        rest = args[1:]
        if len(rest) == 2:
            correction, keepdim = rest
        elif len(rest) == 1:
            keepdim = rest[0]
    if isinstance(correction, float) and correction.is_integer():
        correction = int(correction)
    return dim, _correction(unbiased, correction), bool(keepdim)


def _var(g, self, args):
    x = _float_in(g, self)
    dim, corr, keepdim = _var_args(x, args)
    axes = _axes(x, dim)
    r = var_of(g, x, axes, corr, keepdim)
    return r if isinstance(r, tuple) else (r, None)


@aten("var")
def var(g, self, *args):
    return _var(g, self, args)[0]


@aten("std")
def std(g, self, *args):
    return g.unary("sqrt", _var(g, self, args)[0])


@aten("var_mean")
def var_mean(g, self, *args):
    v, m = _var(g, self, args)
    if m is None:
        raise g.error("var_mean with a non-positive denominator")
    return v, m


@aten("std_mean")
def std_mean(g, self, *args):
    v, m = _var(g, self, args)
    if m is None:
        raise g.error("std_mean with a non-positive denominator")
    return g.unary("sqrt", v), m


@aten("logsumexp", "special_logsumexp")
def logsumexp(g, self, dim, keepdim=False):
    x = _float_in(g, self)
    axes = _axes(x, dim)
    if not axes:
        return x
    d = x.dtype
    m = g.reduce("max_reduce", x, axes, keepdim=True)
    m = select(g, is_inf(g, m), 0.0, m, d)  # all -inf (or +inf) slices
    s = g.reduce("sum_reduce", g.unary("exp", g.binary("sub", x, m, d)), axes, keepdim=True)
    r = g.binary("add", g.unary("log", s), m, d)
    return r if keepdim else g.squeeze(r, axes)


@aten("count_nonzero")
def count_nonzero(g, self, dim=None):
    nz = g.cast(g.binary("ne", self, g.scalar(0, self.dtype), self.dtype,
                         out_dtype=torch.bool), torch.int64)
    axes = _axes(self, dim)
    return g.reduce("sum_reduce", nz, axes, keepdim=False) if axes else nz


@aten("nansum")
def nansum(g, self, dim=None, keepdim=False, dtype=None):
    x = self
    if x.dtype.is_floating_point:
        x = select(g, is_nan(g, x), 0.0, x, x.dtype)
    x = g.cast(x, g.out_dtype())
    axes = _axes(x, dim)
    return g.reduce("sum_reduce", x, axes, keepdim=keepdim) if axes else x


@aten("nanmean")
def nanmean(g, self, dim=None, keepdim=False, dtype=None):
    x = g.cast(self, g.out_dtype())
    d = x.dtype
    nan = is_nan(g, x)
    axes = _axes(x, dim)
    zeroed = select(g, nan, 0.0, x, d)
    ones = g.cast(g.unary("not", nan), d)
    if not axes:
        return select(g, nan, x, zeroed)
    s = g.reduce("sum_reduce", zeroed, axes, keepdim=keepdim)
    c = g.reduce("sum_reduce", ones, axes, keepdim=keepdim)
    return g.binary("div", s, c, d)


@aten("aminmax")
def aminmax(g, self, dim=None, keepdim=False):
    axes = _axes(self, dim)
    x = self
    if x.dtype == torch.bool:
        x = g.cast(x, torch.uint8)
    if dim is None and not keepdim:
        lo = g.reduce("min_reduce", x, axes, keepdim=False)
        hi = g.reduce("max_reduce", x, axes, keepdim=False)
    else:
        lo = g.reduce("min_reduce", x, axes, keepdim=keepdim)
        hi = g.reduce("max_reduce", x, axes, keepdim=keepdim)
    if self.dtype.is_floating_point and axes:
        # a NaN anywhere in the slice makes min and max NaN
        has_nan = g.reduce("any_reduce", is_nan(g, self), axes, keepdim=keepdim)
        lo = select(g, has_nan, float("nan"), lo, lo.dtype)
        hi = select(g, has_nan, float("nan"), hi, hi.dtype)
    return g.cast(lo, self.dtype), g.cast(hi, self.dtype)


# ---------------------------------------------------------------------------- norms


@aten("linalg_vector_norm")
def linalg_vector_norm(g, self, ord=2, dim=None, keepdim=False, dtype=None):
    x = g.cast(self, g.out_dtype())
    return vector_norm_of(g, x, ord, _axes(x, dim), keepdim)


@aten("norm")
def norm(g, self, p=2, dim=None, keepdim=False, dtype=None):
    if isinstance(p, str):
        if p != "fro":
            raise g.error(f"norm p={p!r} is not supported")
        p = 2
    if p is None:
        p = 2
    x = g.cast(self, g.out_dtype())
    return vector_norm_of(g, x, p, _axes(x, dim), keepdim)


@aten("linalg_matrix_norm")
def linalg_matrix_norm(g, self, ord="fro", dim=(-2, -1), keepdim=False, dtype=None):
    return matrix_norm_of(g, g.cast(self, g.out_dtype()), ord, dim, keepdim)


@aten("linalg_norm")
def linalg_norm(g, self, ord=None, dim=None, keepdim=False, dtype=None):
    if isinstance(ord, str) or (dim is not None and not isinstance(dim, int) and len(dim) == 2):
        if ord is None:
            ord = "fro"
        return linalg_matrix_norm(g, self, ord, dim if dim is not None else (-2, -1), keepdim)
    x = g.cast(self, g.out_dtype())
    if ord is None:
        return vector_norm_of(g, x, 2, _axes(x, dim), keepdim)
    if dim is None and x.rank == 2:
        return linalg_matrix_norm(g, self, ord, (-2, -1), keepdim)
    return vector_norm_of(g, x, ord, _axes(x, dim), keepdim)


@aten("dist")
def dist(g, self, other, p=2):
    d = g.out_dtype()
    diff = g.binary("sub", self, other, d)
    return vector_norm_of(g, diff, p, list(range(diff.rank)), False)


@aten("pairwise_distance")
def pairwise_distance(g, x1, x2, p=2.0, eps=1e-6, keepdim=False):
    d = g.out_dtype()
    diff = g.binary("add", g.binary("sub", x1, x2, d), float(eps), d)
    if diff.rank == 0:
        return g.unary("abs", diff)
    return vector_norm_of(g, diff, p, [diff.rank - 1], keepdim)


@aten("cdist", "_cdist_forward")
def cdist(g, x1, x2, p=2.0, compute_mode=None):
    d = g.out_dtype()
    a = g.unsqueeze(x1, [x1.rank - 1])  # [..., P, 1, M]
    b = g.unsqueeze(x2, [x2.rank - 2])  # [..., 1, R, M]
    diff = g.binary("sub", a, b, d)
    return vector_norm_of(g, diff, p, [diff.rank - 1], False)


@aten("cosine_similarity")
def cosine_similarity(g, x1, x2, dim=1, eps=1e-8):
    """PyTorch's steps: both inputs broadcast to one shape, each divided by its 2-norm over
    ``dim`` (clamped to ``eps``), the product summed over ``dim``. The norms and the sum
    accumulate in float32 for float16 inputs and round once; the divisions and the product
    round in the dtype (a half model's composite rounds after each step)."""
    from t2n.walk.tensors import broadcast_shapes

    d = g.out_dtype()
    acc = torch.float32 if d == torch.float16 else d
    shape = list(broadcast_shapes(x1.shape, x2.shape))
    a, b = (g.broadcast_to(g.cast(x, d), shape) for x in (x1, x2))
    if not shape:
        a, b, shape = g.reshape(a, [1]), g.reshape(b, [1]), [1]
    axis = dim % len(shape)

    def unit(x):
        w = g.cast(x, acc)
        norm = g.unary("sqrt", g.reduce("sum_reduce", g.binary("mul", w, w, acc), [axis],
                                        keepdim=True))
        return g.binary("div", x, g.binary("max", g.cast(norm, d), float(eps), d), d)

    prod = g.binary("mul", unit(a), unit(b), d)
    return g.cast(g.reduce("sum_reduce", g.cast(prod, acc), [axis], keepdim=False), d)


@aten("pdist", "_pdist_forward")
def pdist(g, self, p=2.0):
    n = self.shape[0]
    if not isinstance(n, int):
        raise g.error("pdist over a dynamic number of rows")
    import numpy as np

    i, j = np.triu_indices(n, k=1)
    if len(i) == 0:
        raise g.error("pdist of fewer than two rows has an empty result")
    a = g.gather(self, g.const(torch.from_numpy(i.astype(np.int64))), 0)
    b = g.gather(self, g.const(torch.from_numpy(j.astype(np.int64))), 0)
    diff = g.binary("sub", a, b, self.dtype)
    return vector_norm_of(g, diff, p, [1], False)


@aten("renorm")
def renorm(g, self, p, dim, maxnorm):
    x = self
    d = x.dtype
    axis = dim % x.rank
    axes = [a for a in range(x.rank) if a != axis]
    nrm = vector_norm_of(g, x, p, axes, True)
    factor = g.binary("div", g.scalar(float(maxnorm), d),
                      g.binary("add", nrm, 1e-7, d), d)
    factor = select(g, g.binary("gt", nrm, float(maxnorm), d, out_dtype=torch.bool), factor,
                    1.0, d)
    return g.binary("mul", x, factor, d)


del math


@aten("cov")
def cov(g, self, correction=1, fweights=None, aweights=None):
    if fweights is not None or aweights is not None:
        raise g.error("cov with fweights/aweights is not supported")
    d = g.out_dtype()
    x = g.cast(self, d)
    if x.rank == 1:
        x = g.unsqueeze(x, [0])
    n = x.shape[1]
    if not isinstance(n, int):
        raise g.error("cov over a dynamic number of observations")
    mean = g.reduce("mean_reduce", x, [1], keepdim=True)
    xm = g.binary("sub", x, mean, d)
    c = g.op("matmul", xm, xm, transposeA=False, transposeB=True,
             out_shape=[x.shape[0], x.shape[0]])
    c = g.binary("div", c, float(max(n - correction, 0)), d)
    scalar = g.node is not None and len(g.out_shape()) == 0
    return g.reshape(c, []) if self.rank == 1 or scalar else c


@aten("corrcoef")
def corrcoef(g, self):
    c = cov(g, self, 1)
    if c.rank == 0 or (c.rank == 2 and c.shape[0] == 1):
        c = g.reshape(c, [])
        return g.binary("div", c, c, c.dtype)
    d = c.dtype
    m = c.shape[0]
    eye = g.const(torch.eye(m, dtype=torch.bool))
    diag = g.reduce("sum_reduce", select(g, eye, c, 0.0, d), [1], keepdim=True)  # [m, 1]
    std = g.unary("sqrt", diag)
    c = g.binary("div", c, std, d)
    c = g.binary("div", c, g.transpose(std, [1, 0]), d)
    return g.binary("min", g.binary("max", c, -1.0, d), 1.0, d)


@aten("histc")
def histc(g, self, bins=100, min=0, max=0):
    """Counts per bin with PyTorch's bin formula ((x - lo) * bins / (hi - lo), truncated;
    x == hi lands in the last bin; values outside [lo, hi] are ignored). With min == max
    the range is the data's own (widened by 1 each side when it is a single value)."""
    d = self.dtype
    x = g.reshape(self, [-1]) if self.rank != 1 else self
    if x.rank == 1 and self.rank == 0:
        x = g.reshape(self, [1])
    if min == max:
        lo = g.reduce("min_reduce", x, [0], keepdim=False)
        hi = g.reduce("max_reduce", x, [0], keepdim=False)
        same = g.binary("eq", lo, hi, d, out_dtype=torch.bool)
        lo = select(g, same, g.binary("sub", lo, 1.0, d), lo)
        hi = select(g, same, g.binary("add", hi, 1.0, d), hi)
    else:
        lo, hi = g.scalar(float(min), d), g.scalar(float(max), d)
    pos = g.binary("div", g.binary("mul", g.binary("sub", x, lo, d), float(bins), d),
                   g.binary("sub", hi, lo, d), d)
    idx = g.cast(pos, torch.int64)  # truncation toward zero, as the C++ cast
    idx = select(g, g.binary("eq", idx, bins, torch.int64, out_dtype=torch.bool),
                 bins - 1, idx, torch.int64)
    inside = g.binary("and", g.binary("ge", x, lo, d, out_dtype=torch.bool),
                      g.binary("le", x, hi, d, out_dtype=torch.bool), torch.bool)
    idx = select(g, inside, idx, -1, torch.int64)
    onehot = g.binary("eq", g.unsqueeze(idx, [1]), g.const(torch.arange(bins).reshape(1, bins)),
                      torch.int64, out_dtype=torch.bool)
    return g.reduce("sum_reduce", g.cast(onehot, d), [0], keepdim=False)
