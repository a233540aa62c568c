"""Grids, splits and stacks: meshgrid, broadcast_tensors, cartesian_prod, combinations,
tensor_split and hsplit/vsplit/dsplit, atleast_Nd, hstack/vstack/dstack/column_stack,
_chunk_cat, and the small shape utilities ravel, mT, sum_to_size and diff.

Every lowering is a fixed handful of slices, concats and reshapes; constant index tensors
(combinations) are stored as data.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from t2n.mappings.helpers.indexing import gather_const, slice_bounds, static_numel, static_size
from t2n.walk.registry import aten


# ---------------------------------------------------------------------------- grids
@aten("meshgrid")
def meshgrid(g, tensors, indexing="ij"):
    ts = [g.reshape(t, [1]) if t.rank == 0 else t for t in tensors]
    sizes = [t.shape[0] for t in ts]
    order = list(range(len(ts)))
    if indexing == "xy" and len(ts) >= 2:
        order[0], order[1] = 1, 0
    shape = [sizes[order[k]] for k in range(len(ts))]
    outs = []
    for i, t in enumerate(ts):
        pos = order.index(i)
        view = [1] * len(ts)
        view[pos] = sizes[i]
        outs.append(g.broadcast_to(g.reshape(t, view), shape))
    return outs


@aten("broadcast_tensors")
def broadcast_tensors(g, tensors):
    from t2n.walk.builder import broadcast_shapes

    shape = list(broadcast_shapes(*(t.shape for t in tensors)))
    return [g.broadcast_to(t, shape) for t in tensors]


@aten("cartesian_prod")
def cartesian_prod(g, tensors):
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(g, tensors, "ij")
    n = 1
    for t in tensors:
        n *= static_size(g, t.shape[0], "cartesian_prod")
    cols = [g.reshape(x, [n, 1]) for x in grids]
    return g.concat(cols, 1)


@aten("combinations")
def combinations(g, self, r=2, with_replacement=False):
    n = static_size(g, self.shape[0], "combinations")
    fn = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    idx = np.array(list(fn(range(n), r)), dtype=np.int64).reshape(-1, r)
    if idx.shape[0] == 0:
        raise g.error("combinations with an empty result")
    return gather_const(g, self, 0, idx)


# ---------------------------------------------------------------------------- splits
@aten("tensor_split")
def tensor_split(g, self, indices_or_sections, dim=0):
    """``k`` sections (the first ``n % k`` one longer) or pieces between split points.
    Each piece is PyTorch's ``self[p[i-1]:p[i]]`` along ``dim``: a point counts from the
    end when negative and is clamped to the axis, and a point before its predecessor gives
    an empty piece (the next piece still starts at that point). Sizes and points may be
    symbolic: a dynamic axis split at ``S - 1`` (hybrid LLMs keep the last positions
    apart), or ``k`` sections of ``S`` (bounds ``i*floor(S/k) + min(i, S mod k)``)."""
    axis = dim % self.rank
    n = self.shape[axis]
    ios = indices_or_sections
    if hasattr(ios, "rank"):
        if not ios.is_const:
            raise g.error("indices_or_sections: split points given as a runtime tensor")
        ios = ios.value.tolist()
        ios = ios if isinstance(ios, list) else int(ios)
    if isinstance(ios, int):
        if ios < 1:
            raise g.error(f"sections: must be at least 1 (got {ios})")
        return [g.slice(self, axis, a, b) for a, b in _section_bounds(n, ios)]
    starts = [0] + list(ios)
    ends = list(ios) + [None]
    # slice_bounds clamps as PyTorch's slice does: a start after the end gives [start, start)
    return [g.slice(self, axis, *slice_bounds(n, a, b)) for a, b in zip(starts, ends)]


def _section_bounds(n, k):
    """``(begin, end)`` of ``k`` sections of an axis of size ``n`` (int or symbolic)."""
    if isinstance(n, int):
        q, r = divmod(n, k)
        sizes = [q + 1] * r + [q] * (k - r)
        bounds = [0] + list(itertools.accumulate(sizes))
    else:
        import sympy

        q = sympy.floor(n / k)
        r = n - k * q
        bounds = [0] + [i * q + sympy.Min(i, r) for i in range(1, k)] + [n]
    return list(zip(bounds[:-1], bounds[1:]))


def _dsplit(g, self, sections, axis):
    if isinstance(sections, int):
        n = static_size(g, self.shape[axis], "split")
        if n % sections:
            raise g.error("the axis is not divisible by the number of sections")
    return tensor_split(g, self, sections, axis)


@aten("hsplit")
def hsplit(g, self, sections):
    return _dsplit(g, self, sections, 0 if self.rank == 1 else 1)


@aten("vsplit")
def vsplit(g, self, sections):
    return _dsplit(g, self, sections, 0)


@aten("dsplit")
def dsplit(g, self, sections):
    return _dsplit(g, self, sections, 2)


# ---------------------------------------------------------------------------- stacks
def _atleast(g, t, n):
    if t.rank >= n:
        return t
    if n == 1:
        return g.reshape(t, [1])
    if n == 2:
        return g.reshape(t, [1] + list(t.shape) if t.rank == 1 else [1, 1])
    if t.rank == 0:
        return g.reshape(t, [1, 1, 1])
    if t.rank == 1:
        return g.reshape(t, [1, t.shape[0], 1])
    return g.reshape(t, list(t.shape) + [1])


def _atleast_fn(n):
    def fn(g, self):
        if isinstance(self, (list, tuple)):
            return [_atleast(g, t, n) for t in self]
        return _atleast(g, self, n)

    return fn


aten("atleast_1d")(_atleast_fn(1))
aten("atleast_2d")(_atleast_fn(2))
aten("atleast_3d")(_atleast_fn(3))


def _cat(g, ts, axis):
    dtype = g.out_dtype()
    return g.concat([g.cast(t, dtype) for t in ts], axis)


@aten("hstack")
def hstack(g, tensors):
    ts = [_atleast(g, t, 1) for t in tensors]
    return _cat(g, ts, 0 if ts[0].rank == 1 else 1)


@aten("vstack", "row_stack")
def vstack(g, tensors):
    return _cat(g, [_atleast(g, t, 2) for t in tensors], 0)


@aten("dstack")
def dstack(g, tensors):
    return _cat(g, [_atleast(g, t, 3) for t in tensors], 2)


@aten("column_stack")
def column_stack(g, tensors):
    cols = []
    for t in tensors:
        if t.rank <= 1:
            t = g.reshape(t, [t.shape[0] if t.rank else 1, 1])
        cols.append(t)
    return _cat(g, cols, 1)


@aten("ravel")
def ravel(g, self):
    return g.reshape(self, [static_numel(g, self)])


@aten("mT", "mH", "adjoint")
def mT(g, self):
    perm = list(range(self.rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return g.transpose(self, perm)


@aten("sum_to_size")
def sum_to_size(g, self, size):
    size = list(size)
    lead = self.rank - len(size)
    axes = list(range(lead)) + [lead + i for i, s in enumerate(size)
                                if s == 1 and self.shape[lead + i] != 1]
    if not axes:
        return self
    r = g.reduce("sum_reduce", g.cast(self, g.out_dtype()), axes, keepdim=True)
    return g.reshape(r, size)


@aten("diff")
def diff(g, self, n=1, dim=-1, prepend=None, append=None):
    axis = dim % self.rank
    x = self
    if n == 0:  # PyTorch returns the input itself, without prepend/append
        return x
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = g.concat([g.cast(p, self.dtype) for p in parts], axis)
    for _ in range(n):
        m = x.shape[axis]
        if isinstance(m, int) and m == 0:
            break
        if isinstance(m, int):
            hi, lo = g.slice(x, axis, 1, m), g.slice(x, axis, 0, m - 1)
        else:  # a dynamic axis may be shorter than n: keep the bounds in range
            import sympy

            hi = g.slice(x, axis, sympy.Min(1, m), m)
            lo = g.slice(x, axis, 0, sympy.Max(m - 1, 0))
        if x.dtype == torch.bool:
            x = g.binary("tract_core_xor", hi, lo, torch.bool)
        else:
            x = g.binary("sub", hi, lo, x.dtype)
    return x


@aten("_chunk_cat")
def _chunk_cat(g, tensors, dim, num_chunks):
    """Each tensor zero-padded along ``dim`` to a multiple of ``num_chunks``, viewed as
    ``[*lead, num_chunks, -1]`` (chunk k holds rows ``k*c .. (k+1)*c`` with what follows them
    flattened), then all concatenated on the last axis (PyTorch's decomposition)."""
    tensors = list(tensors)
    if num_chunks < 1 or not tensors:
        raise g.error("num_chunks must be positive and tensors non-empty")
    if len({t.rank for t in tensors}) == 1:
        dim = dim % tensors[0].rank
    elif dim < 0:
        raise g.error("dim: must be non-negative when the tensors differ in rank")
    parts = []
    for t in tensors:
        sizes = t.shape[dim:]
        if not all(isinstance(n, int) for n in sizes):
            raise g.error(f"tensors: the axes from dim {dim} on must be static, got {sizes}")
        n = sizes[0]
        padded = (n + num_chunks - 1) // num_chunks * num_chunks
        if padded != n:
            zshape = list(t.shape)
            zshape[dim] = padded - n
            t = g.concat([t, g.broadcast_to(g.scalar(0, t.dtype), zshape)], dim)
        rest = padded * int(np.prod(sizes[1:], dtype=np.int64)) // num_chunks
        parts.append(g.reshape(t, list(t.shape[:dim]) + [num_chunks, rest]))
    return g.concat(parts, dim + 1)
