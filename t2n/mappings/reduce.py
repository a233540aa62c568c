"""Reductions: sum, mean, prod, amax, amin, max/min (all, or with indices along a dim),
argmax, argmin, all, any.

NNEF reductions keep the reduced axes (size 1); ``g.reduce`` squeezes them for
``keepdim=False``. The accumulation dtype is the node's traced result dtype (``sum`` of ints
or bools gives i64, ``dtype=`` arguments), so the input is cast to it first. tract's
``argmax_reduce``/``argmin_reduce`` return the first occurrence on ties, as torch does.
Float max/min/argmax/argmin follow torch on NaN (NaN wins; its first index) and on slices of
only -inf/+inf, where tract's reductions differ (see ``float_extremum_fixup``).
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import is_nan, select
from t2n.walk import registry
from t2n.walk.registry import aten


def _axes(g, self, dim) -> list[int]:
    """Reduced axes, normalised; ``None`` or ``[]`` means every axis (torch's convention)."""
    if dim is None:
        return list(range(self.rank))
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return list(range(self.rank))
    if self.rank == 0:
        for d in dims:
            if d not in (0, -1):
                raise g.error(f"dim: {d} is out of range for a rank-0 tensor")
        return []
    axes = sorted({d % self.rank for d in dims})
    if len(axes) != len(dims):
        raise g.error(f"dim: {dims} names an axis twice")
    return axes


def _reduce(g, kind, self, dim, keepdim, dtype):
    x = g.cast(self, dtype)
    axes = _axes(g, x, dim)
    if not axes:
        return x
    return g.reduce(kind, x, axes, keepdim)


def _dim_keepdim(args):
    """``(dim, keepdim)`` of ``sum/mean/prod``: the ``(self, *, dtype)`` overloads pass a
    single argument (the dtype), the ``.dim`` overloads pass ``dim, keepdim, dtype``."""
    if len(args) <= 1:
        return None, False
    return args[0], args[1]


@aten("sum")
def sum_(g, self, *args):
    dim, keepdim = _dim_keepdim(args)
    return _reduce(g, "sum_reduce", self, dim, keepdim, g.out_dtype())


@aten("mean")
def mean(g, self, *args):
    dim, keepdim = _dim_keepdim(args)
    out = g.out_dtype()
    if not out.is_floating_point:
        raise g.error(f"self: mean of a {out} tensor is not defined in PyTorch")
    return _reduce(g, "mean_reduce", self, dim, keepdim, out)


@aten("prod")
def prod(g, self, *args):
    dim, keepdim = _dim_keepdim(args)
    out = g.out_dtype()
    # a product of bools (dtype=torch.bool) is their AND; tract multiplies numbers only
    kind = "all_reduce" if out == torch.bool else "tract_core_product_reduce"
    return _reduce(g, kind, self, dim, keepdim, out)


def _extremum(g, kind_num, kind_bool, self, dim, keepdim):
    kind = kind_bool if self.dtype == torch.bool else kind_num
    axes = _axes(g, self, dim)
    for a in axes:
        if isinstance(self.shape[a], int) and self.shape[a] == 0:
            raise g.error(f"dim: reducing the empty axis {a} has no identity for max/min")
    if not axes:
        return self
    r = g.reduce(kind, self, axes, keepdim)
    if self.dtype.is_floating_point:
        r = float_extremum_fixup(g, kind, self, axes, keepdim, r)
    return r


def float_extremum_fixup(g, kind, x, axes, keepdim, r):
    """PyTorch's amax/amin of a float slice from tract's ``max_reduce``/``min_reduce``
    result ``r``: tract skips NaN, torch gives NaN when the slice holds one (one flag
    reduction and a select; these reductions are not in hot CNN paths, max pooling keeps
    tract's behaviour)."""
    dtype = x.dtype
    # the infinities are restored by g.reduce itself; NaN propagation is torch's amax rule
    has_nan = g.reduce("any_reduce", is_nan(g, x), axes, keepdim)
    return select(g, has_nan, float("nan"), r, dtype)


@aten("amax")
def amax(g, self, dim=(), keepdim=False):
    return _extremum(g, "max_reduce", "any_reduce", self, dim, keepdim)


@aten("amin")
def amin(g, self, dim=(), keepdim=False):
    return _extremum(g, "min_reduce", "all_reduce", self, dim, keepdim)


@aten("all")
def all_(g, self, dim=None, keepdim=False):
    return _reduce(g, "all_reduce", self, dim, keepdim, torch.bool)


@aten("any")
def any_(g, self, dim=None, keepdim=False):
    return _reduce(g, "any_reduce", self, dim, keepdim, torch.bool)


def _arg(g, kind, self, dim, keepdim):
    """Index of the first max/min along ``dim``; ``dim=None`` indexes the flattened tensor."""
    if self.dtype == torch.bool:  # max(bool, dim) also returns indices
        self = g.cast(self, torch.uint8)
    if dim is None:
        n = 1
        for d in self.shape:
            n = n * d
        flat = g.reshape(self, [n])
        idx = _arg(g, kind, flat, 0, True)
        if keepdim and self.rank > 0:
            return g.reshape(idx, [1] * self.rank)
        return g.squeeze(idx, [0])
    if self.rank == 0:
        return _arg(g, kind, self, None, keepdim)
    axis = dim % self.rank
    if isinstance(self.shape[axis], int) and self.shape[axis] == 0:
        raise g.error(f"dim: argmax/argmin over the empty axis {axis} is an error in PyTorch")
    shape = [1 if i == axis else d for i, d in enumerate(self.shape)]
    idx = g.op(kind, self, axes=[axis], out_shape=shape, out_dtype=torch.int64)
    if self.dtype.is_floating_point:
        # torch treats NaN as the extreme value: the first NaN's index wins
        nan = is_nan(g, self)
        has_nan = g.reduce("any_reduce", nan, [axis], keepdim=True)
        first_nan = g.op("argmax_reduce", g.cast(nan, self.dtype), axes=[axis],
                         out_shape=shape, out_dtype=torch.int64)
        idx = select(g, has_nan, first_nan, idx, torch.int64)
    return idx if keepdim else g.squeeze(idx, [axis])


@aten("argmax")
def argmax(g, self, dim=None, keepdim=False):
    return _arg(g, "argmax_reduce", self, dim, keepdim)


@aten("argmin")
def argmin(g, self, dim=None, keepdim=False):
    return _arg(g, "argmin_reduce", self, dim, keepdim)


def _max_min(g, which, self, dim_or_other, keepdim):
    """The three overloads: ``max(x)`` (all), ``max(x, dim, keepdim)`` (values and first
    indices) and ``max(x, other)`` (element-wise)."""
    if hasattr(dim_or_other, "rank"):
        return registry.lookup("maximum" if which == "max" else "minimum")(g, self, dim_or_other)
    if dim_or_other is None:
        return amax(g, self, None) if which == "max" else amin(g, self, None)
    values = (amax if which == "max" else amin)(g, self, [dim_or_other], keepdim)
    indices = _arg(g, f"arg{which}_reduce", self, dim_or_other, keepdim)
    return values, indices


@aten("max")
def max_(g, self, dim=None, keepdim=False):
    return _max_min(g, "max", self, dim, keepdim)


@aten("min")
def min_(g, self, dim=None, keepdim=False):
    return _max_min(g, "min", self, dim, keepdim)
