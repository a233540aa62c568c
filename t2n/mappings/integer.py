"""Integer ops tract has no operator for: bit shifts, ``gcd``/``lcm``, ``one_hot``,
``bincount``. Exact, with PyTorch's wrap-around; the forms are in
:mod:`t2n.mappings.helpers.integer` (op counts fixed by the dtype's width, not the data).
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import select
from t2n.mappings.helpers.integer import int_gcd, int_lcm, shift_left, shift_right
from t2n.walk.builder import DATA_DEPENDENT_PREFIX
from t2n.walk.registry import aten


def _int_dtype(g, what):
    d = g.out_dtype()
    if d.is_floating_point or d == torch.bool:
        raise g.error(f"{what} of {d} tensors is not defined")
    return d


@aten("bitwise_left_shift", "__lshift__")
def lshift(g, self, other):
    return shift_left(g, self, other, _int_dtype(g, "a bit shift"))


@aten("bitwise_right_shift", "__rshift__")
def rshift(g, self, other):
    return shift_right(g, self, other, _int_dtype(g, "a bit shift"))


@aten("gcd")
def gcd(g, self, other):
    return int_gcd(g, self, other, _int_dtype(g, "gcd"))


@aten("lcm")
def lcm(g, self, other):
    return int_lcm(g, self, other, _int_dtype(g, "lcm"))


def _runtime_arange(g, length, hint: str):
    """``[0, 1, ..., length - 1]`` for a rank-0 i64 tensor ``length`` computed from the
    data: its size is a fresh data-dependent symbol."""
    import sympy  # loaded only when needed: a static export does not import sympy

    n = sympy.Symbol(f"{DATA_DEPENDENT_PREFIX}{hint}_{g.count('count symbols')}",
                     integer=True, nonnegative=True)
    return g.op("tract_core_range", g.scalar(0, torch.int64), length,
                g.scalar(1, torch.int64), out_dtype=torch.int64, out_shape=[n])


def _max_plus_one(g, x):
    """``max(x) + 1`` as a rank-0 i64 tensor (0 for an empty ``x``)."""
    flat = g.reshape(g.cast(x, torch.int64), [-1]) if x.rank != 1 else g.cast(x, torch.int64)
    if x.rank == 0:
        flat = g.reshape(flat, [1])
    top = g.reduce("max_reduce", flat, [0], keepdim=False)
    top = g.binary("max", top, g.scalar(-1, torch.int64), torch.int64)
    return g.binary("add", top, g.scalar(1, torch.int64), torch.int64)


@aten("one_hot")
def one_hot(g, self, num_classes=-1):
    """``x[..., None] == arange(C)`` as int64; ``num_classes=-1`` takes ``max(x) + 1``
    classes, a size read from the data."""
    if num_classes == -1:
        classes = _runtime_arange(g, _max_plus_one(g, self), "classes")
    else:
        classes = g.arange(num_classes)
    x = g.unsqueeze(g.cast(self, torch.int64), [self.rank])
    hot = g.binary("eq", x, classes, torch.int64, out_dtype=torch.bool)
    return g.cast(hot, torch.int64)


@aten("bincount")
def bincount(g, self, weights=None, minlength=0):
    """Counts (or summed weights) of each value of a 1-D non-negative tensor, over
    ``max(max(x) + 1, minlength)`` bins: an equality mask ``[bins, n]`` summed over n."""
    if self.rank != 1:
        raise g.error(f"self: bincount takes a 1-D tensor, got rank {self.rank}")
    d = g.out_dtype()
    n = _max_plus_one(g, self)
    n = g.binary("max", n, g.scalar(int(minlength), torch.int64), torch.int64)
    bins = _runtime_arange(g, n, "bins")
    x = g.unsqueeze(g.cast(self, torch.int64), [0])
    hit = g.binary("eq", g.unsqueeze(bins, [1]), x, torch.int64, out_dtype=torch.bool)
    if weights is None:
        terms = g.cast(hit, d)
    else:
        w = g.unsqueeze(g.cast(weights, d), [0])
        terms = select(g, hit, w, g.scalar(0, d))
    return g.reduce("sum_reduce", terms, [1], keepdim=False)
