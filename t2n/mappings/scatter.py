"""Scatter-style writes along one axis: scatter, scatter_add, scatter_reduce, and the view
inverses slice_scatter, select_scatter, diagonal_scatter (the walker calls these three to
write into slice/select/diagonal views, with the aten schemas' signatures).

Everything lowers to ``tract_core_scatter_elements`` (reductions none/add/mul/min/max).
tract's op walks the *updates*: it aborts the process when ``updates`` is larger than
``indices`` and when the tensors are rank 0, so :func:`scatter_elements` slices and reshapes
first. What tract lacks (``mean``, ``include_self=False``) is built from a second scatter that
marks or counts the touched positions.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import is_nan, where_
from t2n.mappings.helpers.indexing import (is_empty_shape, neutral, scatter_elements, slice_bounds,
                                          slice_to)
from t2n.walk.registry import aten

# aten reduce name -> tract reduction
_TRACT_REDUCTION = {"sum": "add", "add": "add", "prod": "mul", "multiply": "mul",
                    "amax": "max", "amin": "min"}


def touched(g, self, axis, index):
    """A bool mask of self's shape: True where some index entry lands."""
    false = g.broadcast_to(g.scalar(False, torch.bool), self.shape)
    true = g.broadcast_to(g.scalar(True, torch.bool), index.shape)
    return scatter_elements(g, false, axis, index, true)


def floor_div_positive(g, a, b):
    """``floor(a / b)`` for integer tensors with ``b > 0`` (tract's int div truncates)."""
    q = g.binary("div", a, b, a.dtype)
    inexact = g.binary("ne", g.binary("mul", q, b, a.dtype), a, a.dtype, out_dtype=torch.bool)
    negative = g.binary("lt", a, g.scalar(0, a.dtype), a.dtype, out_dtype=torch.bool)
    fix = g.binary("and", inexact, negative, torch.bool)
    return where_(g, fix, g.binary("sub", q, g.scalar(1, a.dtype), a.dtype), q)


def _check_dtype(g, self, what):
    """Bool tensors reduce as PyTorch does (sum/add = or, prod/multiply = and, amax = or,
    amin = and: the builder scatters them as u8 with max/min); only a mean is undefined."""
    if self.dtype == torch.bool and "mean" in what:
        raise g.error(f"{what} on a bool tensor is not supported")


@aten("scatter")
def scatter(g, self, dim, index, src=None, reduce=None):
    """Every overload: ``src`` is a tensor or a scalar ``value``; ``reduce`` is the legacy
    'add'/'multiply'. Duplicate indices without reduce: tract keeps the last write."""
    axis = dim % max(self.rank, 1)
    if isinstance(src, (int, float, bool)) or (src is not None and src.rank == 0
                                                  and index.rank > 0):
        src = g.broadcast_to(g.as_tensor(src, self.dtype), index.shape)
    reduction = "none"
    if reduce is not None:
        if reduce not in ("add", "multiply"):
            raise g.error(f"reduce={reduce!r}: expected 'add' or 'multiply'")
        _check_dtype(g, self, f"reduce={reduce!r}")
        reduction = _TRACT_REDUCTION[reduce]
    return scatter_elements(g, self, axis, index, src, reduction)


@aten("scatter_add")
def scatter_add(g, self, dim, index, src):
    _check_dtype(g, self, "scatter_add")
    return scatter_elements(g, self, dim % max(self.rank, 1), index, src, "add")


@aten("scatter_reduce")
def scatter_reduce(g, self, dim, index, src, reduce, include_self=True):
    """``sum/prod/amax/amin`` map to tract reductions; ``include_self=False`` starts the
    touched positions from the reduction's identity; ``mean`` is sum / count, where count
    is a scatter of ones (plus one for self), integer means floor like PyTorch."""
    axis = dim % max(self.rank, 1)
    _check_dtype(g, self, f"scatter_reduce {reduce!r}")
    if reduce == "mean":
        return _scatter_mean(g, self, axis, index, src, include_self)
    if reduce not in ("sum", "prod", "amax", "amin"):
        raise g.error(f"reduce={reduce!r}: expected sum, prod, mean, amax or amin")
    if is_empty_shape(index.shape):
        return self
    base = self
    if not include_self:
        base = where_(g, touched(g, self, axis, index), neutral(g, reduce, self.dtype), self)
    out = scatter_elements(g, base, axis, index, src, _TRACT_REDUCTION[reduce])
    if reduce in ("amax", "amin") and self.dtype.is_floating_point:
        out = _propagate_nan(g, out, axis, index, src)
    return out


def _propagate_nan(g, out, axis, index, src):
    """tract's scatter max/min skip a NaN update; PyTorch's amax/amin return NaN where one
    lands (a NaN already in self stays NaN in both)."""
    src = slice_to(g, g.cast(src, out.dtype), index.shape)
    nan = g.cast(is_nan(g, src), out.dtype)  # x != x for f64 (tract_core_is_nan lacks it)
    hits = scatter_elements(g, g.broadcast_to(g.scalar(0, out.dtype), out.shape), axis, index,
                            nan, "add")
    hit = g.binary("gt", hits, g.scalar(0, out.dtype), out.dtype, out_dtype=torch.bool)
    return where_(g, hit, g.scalar(float("nan"), out.dtype), out)


def _scatter_mean(g, self, axis, index, src, include_self):
    if is_empty_shape(index.shape):
        return self
    dtype = self.dtype
    zero = g.broadcast_to(g.scalar(0, dtype), self.shape)
    ones = g.broadcast_to(g.scalar(1, dtype), index.shape)
    total = scatter_elements(g, self if include_self else zero, axis, index, src, "add")
    count = scatter_elements(g, g.broadcast_to(g.scalar(1, dtype), self.shape)
                             if include_self else zero, axis, index, ones, "add")
    if not include_self:  # untouched: count 0, keep self (no division by zero)
        count = g.binary("max", count, g.scalar(1, dtype), dtype)
    if dtype.is_floating_point:
        mean = g.binary("div", total, count, dtype)
    else:
        mean = floor_div_positive(g, total, count)
    if include_self:
        return mean
    return where_(g, touched(g, self, axis, index), mean, self)


@aten("slice_scatter")
def slice_scatter(g, self, src, dim=0, start=None, end=None, step=1):
    """``self`` with ``self[..., start:end:step, ...] = src`` along ``dim``."""
    if step is None:
        step = 1
    if step < 1:
        raise g.error(f"step must be >= 1 (got {step})")
    axis = dim % self.rank
    n = self.shape[axis]
    begin, stop = slice_bounds(n, start, end)
    src = g.cast(src, self.dtype)
    if isinstance(begin, int) and isinstance(stop, int) and stop <= begin:
        return self
    if step == 1:
        parts = []
        if not (isinstance(begin, int) and begin == 0):
            parts.append(g.slice(self, axis, 0, begin))
        parts.append(src)
        if not (isinstance(stop, int) and isinstance(n, int) and stop == n):
            parts.append(g.slice(self, axis, stop, n))
        return g.concat(parts, axis)
    if not (isinstance(begin, int) and isinstance(stop, int)):
        raise g.error(f"step={step} with bounds on a dynamic axis ({begin}, {stop}) "
                      "is not supported")
    positions = torch.arange(begin, stop, step, dtype=torch.int64)
    index = g.const(positions.reshape(_replace([1] * self.rank, axis, len(positions))))
    index = g.broadcast_to(index, src.shape)
    return scatter_elements(g, self, axis, index, src)


def _replace(shape, axis, value):
    shape = list(shape)
    shape[axis] = value
    return shape


@aten("select_scatter")
def select_scatter(g, self, src, dim, index):
    axis = dim % self.rank
    n = self.shape[axis]
    if isinstance(index, int) and index < 0:
        index = index + n
    return slice_scatter(g, self, g.unsqueeze(src, [axis]), axis, index, index + 1, 1)


@aten("diagonal_scatter")
def diagonal_scatter(g, self, src, offset=0, dim1=0, dim2=1):
    """``self`` with ``torch.diagonal(self, offset, dim1, dim2)`` replaced by ``src`` (whose
    last axis runs along the diagonal): dim1/dim2 moved to the end, the diagonal's rows
    written with one scatter along the last axis, then moved back."""
    d1, d2 = dim1 % self.rank, dim2 % self.rank
    if d1 == d2:
        raise g.error("dim1 and dim2 must differ")
    s1, s2 = self.shape[d1], self.shape[d2]
    if not (isinstance(s1, int) and isinstance(s2, int)):
        raise g.error("the diagonal's axes must have static sizes")
    b1, b2 = max(0, -offset), max(0, offset)
    length = max(0, min(s1 - b1, s2 - b2))
    if length == 0:
        return self
    perm = [i for i in range(self.rank) if i not in (d1, d2)] + [d1, d2]
    inv = [perm.index(i) for i in range(self.rank)]
    moved = g.transpose(self, perm)
    rows = g.slice(moved, self.rank - 2, b1, b1 + length)
    cols = g.const(torch.arange(b2, b2 + length, dtype=torch.int64)
                   .reshape([1] * (self.rank - 2) + [length, 1]))
    updates = g.unsqueeze(g.cast(src, self.dtype), [self.rank - 1])
    cols = g.broadcast_to(cols, updates.shape)
    rows = scatter_elements(g, rows, self.rank - 1, cols, updates)
    moved = slice_scatter(g, moved, rows, self.rank - 2, b1, b1 + length, 1)
    return g.transpose(moved, inv)
