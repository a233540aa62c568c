"""Order statistics on top of the sort/topk mappings: msort, kthvalue, median, quantile.

Values come from ``topk`` in PyTorch's stable order (NaN above every number, equal values
by position; :mod:`t2n.mappings.helpers.ordering`); median/quantile propagate NaN.
"""

from __future__ import annotations

import numpy as np
import torch

from t2n.mappings.helpers.elementwise import is_nan, select
from t2n.walk import registry
from t2n.walk.registry import aten


def _topk(g, x, k, axis, largest):
    return registry.lookup("topk")(g, x, k, axis, largest, True)


def _static_axis(g, x, axis, what):
    n = x.shape[axis]
    if not isinstance(n, int):
        raise g.error(f"{what} over a dynamic axis is not supported")
    return n


@aten("msort")
def msort(g, self):
    if self.rank == 0:
        return self
    return registry.lookup("sort")(g, self, 0, False)[0]


def _kth(g, x, k, axis, keepdim):
    """k-th smallest (1-based) values and indices along ``axis``."""
    vals, idx = _topk(g, x, k, axis, False)
    v = g.slice(vals, axis, k - 1, k)
    i = g.slice(idx, axis, k - 1, k)
    if not keepdim:
        v, i = g.squeeze(v, [axis]), g.squeeze(i, [axis])
    return v, i


def _nan_first(g, x, values, axis, keepdim):
    """Where a slice holds NaN, the result is NaN (and its index the first NaN)."""
    if not x.dtype.is_floating_point:
        return values, None
    has = g.reduce("any_reduce", is_nan(g, x), [axis], keepdim=keepdim)
    return select(g, has, float("nan"), values, values.dtype), has


@aten("kthvalue")
def kthvalue(g, self, k, dim=-1, keepdim=False):
    """The k-th smallest in the stable order (NaN above every number, so a k past the
    slice's numbers gives NaN, as PyTorch's quickselect does)."""
    if self.rank == 0:
        return self, g.scalar(0, torch.int64)
    axis = dim % self.rank
    _static_axis(g, self, axis, "kthvalue")
    return _kth(g, self, k, axis, keepdim)


@aten("median")
def median(g, self, dim=None, keepdim=False):
    if dim is None:
        flat = g.reshape(self, [int(np.prod([_static_axis(g, self, a, "median")
                                             for a in range(self.rank)]))])
        n = flat.shape[0]
        if n == 0:
            return g.scalar(float("nan"), self.dtype)
        v, _ = _kth(g, flat, (n - 1) // 2 + 1, 0, False)
        if self.dtype.is_floating_point:
            v, _ = _nan_first(g, flat, v, 0, False)
        return v
    if self.rank == 0:
        return self, g.scalar(0, torch.int64)
    axis = dim % self.rank
    n = _static_axis(g, self, axis, "median")
    v, i = _kth(g, self, (n - 1) // 2 + 1, axis, keepdim)
    if self.dtype.is_floating_point:
        nan = is_nan(g, self)
        if True:
            # PyTorch returns NaN and the index of the first NaN in such slices
            pos_shape = [1] * self.rank
            pos_shape[axis] = n
            pos = g.const(torch.arange(n, dtype=torch.int64).reshape(pos_shape))
            first = g.reduce("min_reduce", select(g, nan, pos, n, torch.int64), [axis], keepdim)
            has = g.binary("lt", first, n, torch.int64, out_dtype=torch.bool)
            v = select(g, has, float("nan"), v, v.dtype)
            i = select(g, has, first, i, torch.int64)
    return v, i


@aten("quantile")
def quantile(g, self, q, dim=None, keepdim=False, interpolation="linear"):
    out = _quantile(g, self, q, dim, keepdim, interpolation)
    traced = g.out_shape() if g.node is not None else None
    if traced is not None and all(isinstance(d, int) for d in traced):
        out = g.reshape(out, list(traced))
    return out


def _quantile(g, self, q, dim, keepdim, interpolation):
    x = self
    if x.rank == 0:
        x = g.reshape(x, [1])
        dim = 0 if dim is not None else None
    if dim is None:
        n = int(np.prod([_static_axis(g, x, a, "quantile") for a in range(x.rank)]))
        x = g.reshape(x, [n])
        axis = 0
    else:
        axis = dim % x.rank
        n = _static_axis(g, x, axis, "quantile")
    if hasattr(q, "rank"):
        if not q.is_const:
            raise g.error("q given as a runtime tensor")
        qs = q.value.reshape(-1).tolist()
        q_scalar = q.rank == 0
    else:
        qs, q_scalar = [float(q)], True
    if n == 0:
        raise g.error("quantile of an empty axis")
    sorted_v, _ = _topk(g, x, n, axis, False)
    d = x.dtype
    outs = []
    for qq in qs:
        pos = qq * (n - 1)
        lo, hi = int(np.floor(pos)), int(np.ceil(pos))
        frac = pos - lo
        if interpolation == "lower":
            hi, frac = lo, 0.0
        elif interpolation == "higher":
            lo, frac = hi, 0.0
        elif interpolation == "nearest":
            k = int(np.round(pos))  # round half to even, as torch
            lo = hi = k
            frac = 0.0
        elif interpolation == "midpoint":
            frac = 0.5 if hi != lo else 0.0
        a = g.slice(sorted_v, axis, lo, lo + 1)
        if hi != lo and frac:
            b = g.slice(sorted_v, axis, hi, hi + 1)
            r = g.binary("add", a, g.binary("mul", g.binary("sub", b, a, d), float(frac), d), d)
        else:
            r = a
        if x.dtype.is_floating_point:
            has = g.reduce("any_reduce", is_nan(g, x), [axis], keepdim=True)
            r = select(g, has, float("nan"), r, d)
        outs.append(r)
    # each r keeps ``axis`` with size 1; q values stack on a new leading axis
    if q_scalar:
        out = outs[0]
    else:
        out = g.concat([g.unsqueeze(r, [0]) for r in outs], 0)
    lead = 0 if q_scalar else 1
    if dim is None:
        shape = ([] if q_scalar else [len(qs)]) + ([1] * self.rank if keepdim else [])
        return g.reshape(out, shape)
    return out if keepdim else g.squeeze(out, [axis + lead])


@aten("nanmedian")
def nanmedian(g, self, dim=None, keepdim=False):
    """Median of the non-NaN values: NaNs sort last, the lower median is picked per slice at
    the runtime position (count - 1) // 2 of the stable order (PyTorch's nth_element
    breaks ties by position: the same index)."""
    if not self.dtype.is_floating_point:
        return median(g, self, dim, keepdim)
    x = self
    if dim is None:
        n = int(np.prod([_static_axis(g, x, a, "nanmedian") for a in range(x.rank)]))
        x = g.reshape(x, [max(n, 1)] if n else [0])
        axis = 0
    else:
        if x.rank == 0:
            return x, g.scalar(0, torch.int64)
        axis = dim % x.rank
    n = _static_axis(g, x, axis, "nanmedian")
    if n == 0:
        raise g.error("nanmedian of an empty axis")
    nan = is_nan(g, x)
    sorted_v, sorted_i = _topk(g, x, n, axis, False)  # NaNs last, numbers by position
    count = g.reduce("sum_reduce", g.cast(g.unary("not", nan), torch.int64), [axis], True)
    pos = g.binary("div", g.binary("max", g.binary("sub", count, 1, torch.int64), 0,
                                   torch.int64), 2, torch.int64)
    shape = list(sorted_v.shape)
    shape[axis] = 1
    v = g.op("tract_core_gather_elements", sorted_v, pos, axis=axis, out_shape=shape)
    i = g.op("tract_core_gather_elements", sorted_i, pos, axis=axis, out_shape=shape,
             out_dtype=torch.int64)
    v = select(g, g.binary("eq", count, 0, torch.int64, out_dtype=torch.bool), float("nan"),
               v, x.dtype)
    if dim is None:
        return g.reshape(v, [])
    if not keepdim:
        v, i = g.squeeze(v, [axis]), g.squeeze(i, [axis])
    return v, i


@aten("nanquantile")
def nanquantile(g, self, q, dim=None, keepdim=False, interpolation="linear"):
    """quantile of the non-NaN values: NaNs sort last (as +inf) and each slice's rank is
    q * (count - 1), computed at run time and read with a gather (PyTorch's formula)."""
    out = _nanquantile(g, self, q, dim, keepdim, interpolation)
    traced = g.out_shape() if g.node is not None else None
    if traced is not None and all(isinstance(d, int) for d in traced):
        out = g.reshape(out, list(traced))
    return out


def _nanquantile(g, self, q, dim, keepdim, interpolation):
    x = self
    if not x.dtype.is_floating_point:
        return _quantile(g, self, q, dim, keepdim, interpolation)
    if x.rank == 0:
        x = g.reshape(x, [1])
        dim = 0 if dim is not None else None
    if dim is None:
        n = int(np.prod([_static_axis(g, x, a, "nanquantile") for a in range(x.rank)]))
        x = g.reshape(x, [n])
        axis = 0
    else:
        axis = dim % x.rank
        n = _static_axis(g, x, axis, "nanquantile")
    if n == 0:
        raise g.error("nanquantile of an empty axis")
    if hasattr(q, "rank"):
        if not q.is_const:
            raise g.error("q given as a runtime tensor")
        qs, q_scalar = q.value.reshape(-1).tolist(), q.rank == 0
    else:
        qs, q_scalar = [float(q)], True
    d = x.dtype
    nan = is_nan(g, x)
    sorted_v, _ = _topk(g, select(g, nan, float("inf"), x, d), n, axis, False)
    count = g.reduce("sum_reduce", g.cast(g.unary("not", nan), d), [axis], keepdim=True)
    shape = list(sorted_v.shape)
    shape[axis] = 1

    def take(ranks):
        idx = g.cast(ranks, torch.int64)
        return g.op("tract_core_gather_elements", sorted_v, idx, axis=axis, out_shape=shape,
                    out_dtype=d)

    outs = []
    for qq in qs:
        ranks = g.binary("mul", g.binary("sub", count, 1.0, d), float(qq), d)
        ranks = g.binary("max", ranks, 0.0, d)
        if interpolation == "lower":
            ranks = g.unary("floor", ranks)
        elif interpolation == "higher":
            ranks = g.unary("ceil", ranks)
        elif interpolation == "nearest":
            ranks = g.unary("tract_core_round_even", ranks)
        below = take(ranks)
        if interpolation in ("linear", "midpoint"):
            w = g.binary("sub", ranks, g.unary("floor", ranks), d) if interpolation == \
                "linear" else g.scalar(0.5, d)
            above = take(g.unary("ceil", ranks))
            below = g.binary("add", below, g.binary("mul", g.binary("sub", above, below, d), w,
                                                    d), d)
        empty = g.binary("eq", count, 0.0, d, out_dtype=torch.bool)
        outs.append(select(g, empty, float("nan"), below, d))
    out = outs[0] if q_scalar else g.concat([g.unsqueeze(r, [0]) for r in outs], 0)
    lead = 0 if q_scalar else 1
    if dim is None:
        shape = ([] if q_scalar else [len(qs)]) + ([1] * self.rank if keepdim else [])
        return g.reshape(out, shape)
    return out if keepdim else g.squeeze(out, [axis + lead])


@aten("mode")
def mode(g, self, dim=-1, keepdim=False):
    """Most frequent value along ``dim`` (the smallest on ties) and its last position: counts
    from an [n, n] equality table (memory n^2 per slice, op count constant)."""
    if self.rank == 0:
        return self, g.scalar(0, torch.int64)
    axis = dim % self.rank
    n = _static_axis(g, self, axis, "mode")
    if n == 0:
        raise g.error("mode of an empty axis")
    d = self.dtype
    x = g.cast(self, torch.uint8) if d == torch.bool else self
    a = g.unsqueeze(x, [axis + 1])  # [.., n, 1, ..]
    b = g.unsqueeze(x, [axis])  # [.., 1, n, ..]
    eq = g.binary("eq", a, b, x.dtype, out_dtype=torch.bool)
    count = g.reduce("sum_reduce", g.cast(eq, torch.int64), [axis + 1], keepdim=False)
    best = g.reduce("max_reduce", count, [axis], keepdim=True)
    is_best = g.binary("eq", count, best, torch.int64, out_dtype=torch.bool)
    if x.dtype.is_floating_point:
        big = float("inf")
    else:
        big = torch.iinfo(x.dtype).max
    value = g.reduce("min_reduce", select(g, is_best, x, big, x.dtype), [axis], keepdim=True)
    pos_shape = [1] * x.rank
    pos_shape[axis] = n
    pos = g.const(torch.arange(n, dtype=torch.int64).reshape(pos_shape))
    hit = g.binary("eq", x, value, x.dtype, out_dtype=torch.bool)
    index = g.reduce("max_reduce", select(g, hit, pos, -1, torch.int64), [axis], keepdim=True)
    value = g.cast(value, d)
    if not keepdim:
        value, index = g.squeeze(value, [axis]), g.squeeze(index, [axis])
    return value, index
