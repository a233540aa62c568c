"""Rearranging data: roll, flip, rot90, repeat, tile, repeat_interleave,
unfold, pixel_shuffle, channel_shuffle, meshgrid, broadcast_tensors, the split family,
the stack family, diagonal matrices, and the ``*_copy`` aliases of view ops.

Index-based rearrangements (flip, repeat_interleave, unfold) gather with a constant index
tensor: one op whatever the size, the index stored as data.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from t2n import registry
from t2n.registry import aten


def _static(g, n, what):
    if not isinstance(n, int):
        raise g.error(f"{what} on a dynamic axis is not supported")
    return n


def _gather_const(g, x, axis, index):
    return g.gather(x, g.const(torch.as_tensor(np.asarray(index, dtype=np.int64))), axis)


# ---------------------------------------------------------------------------- reorder
def _runtime_size(g, n):
    return g.dim_scalar(n)


def _wrap(g, v, n_t):
    """``v`` (i64, in (-n, 2n)) brought into [0, n) with selects."""
    i64 = torch.int64
    v = g.op("select", g.binary("lt", v, g.scalar(0, i64), i64, out_dtype=torch.bool),
             g.binary("add", v, n_t, i64), v, out_dtype=i64)
    return g.op("select", g.binary("ge", v, n_t, i64, out_dtype=torch.bool),
                g.binary("sub", v, n_t, i64), v, out_dtype=i64)


def roll_axis(g, x, shift, axis):
    n = x.shape[axis]
    if not isinstance(n, int):
        # dynamic axis: out[i] = x[(i - shift) mod n], with the modulo computed by tract
        i64 = torch.int64
        n_t = _runtime_size(g, n)
        s = g.scalar(shift, i64)
        k = g.binary("sub", s, g.binary("mul", g.binary("div", s, n_t, i64), n_t, i64), i64)
        k = _wrap(g, k, n_t)
        idx = _wrap(g, g.binary("sub", g.arange(n), k, i64), n_t)
        return g.gather(x, idx, axis)
    if n == 0:
        return x
    s = shift % n
    if s == 0:
        return x
    return g.concat([g.slice(x, axis, n - s, n), g.slice(x, axis, 0, n - s)], axis)


@aten("roll")
def roll(g, self, shifts, dims=()):
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not dims:
        flat = g.reshape(self, [_numel(g, self)])
        return g.reshape(roll_axis(g, flat, shifts[0], 0), list(self.shape))
    x = self
    for s, d in zip(shifts, dims):
        x = roll_axis(g, x, s, d % self.rank)
    return x


def _numel(g, x):
    n = 1
    for d in x.shape:
        n = n * _static(g, d, "flattening")
    return n


def flip_axis(g, x, axis):
    n = x.shape[axis]
    if not isinstance(n, int):
        idx = g.binary("sub", _runtime_size(g, n - 1), g.arange(n), torch.int64)
        return g.gather(x, idx, axis)
    if n <= 1:
        return x
    return _gather_const(g, x, axis, np.arange(n - 1, -1, -1))


@aten("flip")
def flip(g, self, dims):
    x = self
    for d in dims:
        x = flip_axis(g, x, d % self.rank)
    return x


@aten("fliplr")
def fliplr(g, self):
    return flip_axis(g, self, 1)


@aten("flipud")
def flipud(g, self):
    return flip_axis(g, self, 0)


@aten("rot90")
def rot90(g, self, k=1, dims=(0, 1)):
    d0, d1 = dims[0] % self.rank, dims[1] % self.rank
    k = k % 4
    perm = list(range(self.rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    if k == 0:
        return self
    if k == 1:
        return g.transpose(flip_axis(g, self, d1), perm)
    if k == 2:
        return flip_axis(g, flip_axis(g, self, d0), d1)
    return g.transpose(flip_axis(g, self, d0), perm)


# ---------------------------------------------------------------------------- repeat
@aten("repeat")
def repeat(g, self, repeats):
    repeats = list(repeats)
    x = g.unsqueeze_to_rank(self, len(repeats))
    if all(r == 1 for r in repeats):
        return x
    shape = [d * r for d, r in zip(x.shape, repeats)]
    return g.op("tile", x, repeats=repeats, out_shape=shape)


@aten("tile")
def tile(g, self, dims):
    dims = list(dims)
    if len(dims) < self.rank:
        dims = [1] * (self.rank - len(dims)) + dims
    return repeat(g, self, dims)


@aten("repeat_interleave")
def repeat_interleave(g, self, repeats=None, dim=None, output_size=None):
    if repeats is None or not hasattr(self, "rank"):
        raise g.error("repeat_interleave(repeats) alone has a data-dependent size")
    x = self
    if dim is None:
        x = g.reshape(x, [_numel(g, x)])
        dim = 0
    axis = dim % x.rank
    if isinstance(repeats, int) and not isinstance(x.shape[axis], int):
        return g.repeat_each(x, axis, repeats)  # one count on a dynamic axis
    n = _static(g, x.shape[axis], "repeat_interleave")
    if hasattr(repeats, "rank"):
        if not repeats.is_const:
            raise g.error("repeats given as a runtime tensor: the output size depends on data")
        reps = repeats.value.reshape(-1).tolist()
    else:
        reps = [repeats]
    if len(reps) == 1:
        reps = reps * n
    return _gather_const(g, x, axis, np.repeat(np.arange(n), reps))


@aten("unfold")
def unfold(g, self, dimension, size, step):
    if self.rank == 0:
        return g.reshape(self, [1])
    axis = dimension % self.rank
    n = _static(g, self.shape[axis], "unfold")
    nw = (n - size) // step + 1
    index = np.arange(nw)[:, None] * step + np.arange(size)[None, :]
    y = _gather_const(g, self, axis, index)  # [..., nw, size, ...]
    perm = list(range(y.rank))
    perm.pop(axis + 1)
    perm.append(axis + 1)
    return g.transpose(y, perm)


@aten("pixel_shuffle")
def pixel_shuffle(g, self, upscale_factor):
    r = upscale_factor
    lead = list(self.shape[:-3])
    c, h, w = self.shape[-3:]
    oc = c // (r * r)
    x = g.reshape(self, lead + [oc, r, r, h, w])
    b = len(lead)
    perm = list(range(b)) + [b, b + 3, b + 1, b + 4, b + 2]
    x = g.transpose(x, perm)
    return g.reshape(x, lead + [oc, h * r, w * r])


@aten("pixel_unshuffle")
def pixel_unshuffle(g, self, downscale_factor):
    r = downscale_factor
    lead = list(self.shape[:-3])
    c, h, w = self.shape[-3:]
    x = g.reshape(self, lead + [c, h // r, r, w // r, r])
    b = len(lead)
    perm = list(range(b)) + [b, b + 2, b + 4, b + 1, b + 3]
    x = g.transpose(x, perm)
    return g.reshape(x, lead + [c * r * r, h // r, w // r])


@aten("channel_shuffle", "native_channel_shuffle")
def channel_shuffle(g, self, groups):
    n, c = self.shape[0], self.shape[1]
    rest = list(self.shape[2:])
    x = g.reshape(self, [n, groups, c // groups] + rest)
    x = g.transpose(x, [0, 2, 1] + list(range(3, x.rank)))
    return g.reshape(x, [n, c] + rest)


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
    from t2n.builder import broadcast_shapes

    shape = list(broadcast_shapes(*(t.shape for t in tensors)))
    return [g.broadcast_to(t, shape) for t in tensors]


@aten("cartesian_prod")
def cartesian_prod(g, tensors):
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(g, tensors, "ij")
    n = 1
    for t in tensors:
        n *= _static(g, t.shape[0], "cartesian_prod")
    cols = [g.reshape(x, [n, 1]) for x in grids]
    return g.concat(cols, 1)


@aten("combinations")
def combinations(g, self, r=2, with_replacement=False):
    n = _static(g, self.shape[0], "combinations")
    fn = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    idx = np.array(list(fn(range(n), r)), dtype=np.int64).reshape(-1, r)
    if idx.shape[0] == 0:
        raise g.error("combinations with an empty result")
    return _gather_const(g, self, 0, idx)


# ---------------------------------------------------------------------------- splits
def _split_at(g, x, axis, bounds):
    outs = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        outs.append(g.slice(x, axis, a, b))
    return outs


@aten("tensor_split")
def tensor_split(g, self, indices_or_sections, dim=0):
    axis = dim % self.rank
    n = _static(g, self.shape[axis], "tensor_split")
    ios = indices_or_sections
    if hasattr(ios, "rank"):
        if not ios.is_const:
            raise g.error("split points given as a runtime tensor")
        ios = ios.value.tolist()
    if isinstance(ios, int):
        q, r = divmod(n, ios)
        sizes = [q + 1] * r + [q] * (ios - r)
        bounds = [0] + list(itertools.accumulate(sizes))
    else:
        pts = [min(max(p if p >= 0 else p + n, 0), n) for p in ios]
        bounds = [0] + pts + [n]
        bounds = [bounds[0]] + [max(b, a) for a, b in zip(bounds[:-1], bounds[1:])]
    return _split_at(g, self, axis, bounds)


def _dsplit(g, self, sections, axis):
    if isinstance(sections, int):
        n = _static(g, self.shape[axis], "split")
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
    return g.reshape(self, [_numel(g, self)])


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
    r = g.reduce("sum_reduce", self, axes, keepdim=True)
    return g.reshape(r, size)


@aten("diff")
def diff(g, self, n=1, dim=-1, prepend=None, append=None):
    axis = dim % self.rank
    x = self
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


# ---------------------------------------------------------------------------- diagonals
def _eye_mask(n_rows, n_cols, offset):
    return torch.from_numpy(np.eye(n_rows, n_cols, k=offset, dtype=bool))


def _diag_values(g, v, offset, lead, m):
    """Values for a diagonal at ``offset``: row-indexed (offset >= 0) or column-indexed
    (offset < 0), padded at the end to ``m`` and broadcast to [..., m, m]."""
    n = v.shape[-1]
    padded = g.op("pad", v, padding=[(0, 0)] * (v.rank - 1) + [(0, m - n)],
                  border="constant", value=0.0, out_shape=lead + [m])
    shape = lead + ([m, 1] if offset >= 0 else [1, m])
    return g.broadcast_to(g.reshape(padded, shape), lead + [m, m])


@aten("diag")
def diag(g, self, diagonal=0):
    if self.rank == 1:
        n = _static(g, self.shape[0], "diag")
        m = n + abs(diagonal)
        vals = _diag_values(g, self, diagonal, [], m)
        mask = g.const(_eye_mask(m, m, diagonal))
        zero = g.broadcast_to(g.scalar(0, self.dtype), [m, m])
        return g.op("select", mask, vals, zero, out_shape=[m, m])
    fn = registry.lookup("diagonal")
    if fn is None:
        raise g.error("diag of a matrix needs aten::diagonal")
    return fn(g, self, diagonal, 0, 1)


@aten("diagflat")
def diagflat(g, self, offset=0):
    return diag(g, g.reshape(self, [_numel(g, self)]), offset)


@aten("diag_embed")
def diag_embed(g, self, offset=0, dim1=-2, dim2=-1):
    n = _static(g, self.shape[-1], "diag_embed")
    m = n + abs(offset)
    out_rank = self.rank + 1
    d1, d2 = dim1 % out_rank, dim2 % out_rank
    lead = list(self.shape[:-1])
    vals = _diag_values(g, self, offset, lead, m)
    mask = g.unsqueeze_to_rank(g.const(_eye_mask(m, m, offset)), len(lead) + 2)
    zero = g.broadcast_to(g.scalar(0, self.dtype), lead + [m, m])
    full = g.op("select", mask, vals, zero, out_shape=lead + [m, m])
    # the two new axes are last: move them to dim1 and dim2
    perm = [None] * out_rank
    perm[d1], perm[d2] = out_rank - 2, out_rank - 1
    rest = iter(range(out_rank - 2))
    perm = [p if p is not None else next(rest) for p in perm]
    return g.transpose(full, perm)


@aten("trace")
def trace(g, self):
    n0, n1 = self.shape
    n = min(_static(g, n0, "trace"), _static(g, n1, "trace"))
    mask = g.const(_eye_mask(n0, n1, 0))
    zero = g.broadcast_to(g.scalar(0, self.dtype), [n0, n1])
    picked = g.op("select", mask, self, zero, out_shape=[n0, n1])
    del n
    dtype = g.out_dtype()
    return g.reduce("sum_reduce", g.cast(picked, dtype), [0, 1], keepdim=False)


@aten("block_diag")
def block_diag(g, tensors):
    dtype = g.out_dtype()
    blocks = []
    for t in tensors:
        t = g.cast(t, dtype)
        if t.rank == 0:
            t = g.reshape(t, [1, 1])
        elif t.rank == 1:
            t = g.reshape(t, [1, t.shape[0]])
        blocks.append(t)
    total_cols = sum(_static(g, b.shape[1], "block_diag") for b in blocks)
    rows, col = [], 0
    for b in blocks:
        w = b.shape[1]
        if _static(g, b.shape[0], "block_diag") == 0:
            col += w
            continue
        rows.append(g.op("pad", b, padding=[(0, 0), (col, total_cols - col - w)],
                         border="constant", value=0.0, out_shape=[b.shape[0], total_cols]))
        col += w
    if not rows:
        raise g.error("block_diag of empty blocks only")
    return g.concat(rows, 0)


# ---------------------------------------------------------------------------- *_copy aliases
def _alias(target):
    def fn(g, *args):
        mapping = registry.lookup(target)
        if mapping is None:
            raise g.error(f"needs aten::{target}")
        return mapping(g, *args)

    fn.__name__ = f"{target}_copy"
    fn.__qualname__ = f"_alias.{target}"
    return fn


for _copy, _target in {"view_copy": "view", "permute_copy": "permute",
                       "expand_copy": "expand", "t_copy": "t", "transpose_copy": "transpose",
                       "squeeze_copy": "squeeze", "unsqueeze_copy": "unsqueeze",
                       "alias_copy": "alias", "diagonal_copy": "diagonal",
                       "unbind_copy": "unbind", "split_with_sizes_copy": "split_with_sizes",
                       "narrow_copy": "narrow", "unsafe_split": "split",
                       "unsafe_chunk": "chunk", "unsafe_split_with_sizes": "split_with_sizes",
                       "linalg_diagonal": "diagonal", "unfold_copy": "unfold",
                       "detach_copy": "detach", "slice_copy": "slice", "select_copy": "select",
                       "indices_copy": "alias", "values_copy": "alias"}.items():
    aten(_copy)(_alias(_target))


def _shift_all(g, x, dim, sign):
    dims = range(x.rank) if dim is None else ([dim] if isinstance(dim, int) else dim)
    for d in dims:
        axis = d % x.rank
        n = _static(g, x.shape[axis], "fftshift")
        x = roll_axis(g, x, sign * (n // 2), axis)
    return x


@aten("fft_fftshift")
def fft_fftshift(g, self, dim=None):
    return _shift_all(g, self, dim, 1)


@aten("fft_ifftshift")
def fft_ifftshift(g, self, dim=None):
    return _shift_all(g, self, dim, -1)


@aten("im2col")
def im2col(g, self, kernel_size, dilation, padding, stride):
    """``F.unfold``: sliding blocks as columns [N, C*kh*kw, L], with constant-index gathers
    per spatial axis (one per axis, whatever the size)."""
    x = self if self.rank == 4 else g.unsqueeze(self, [0])
    n, c, h, w = x.shape
    kh, kw = kernel_size
    dh, dw = dilation
    ph, pw = padding
    sh, sw = stride
    if not all(isinstance(v, int) for v in (c, h, w)):
        raise g.error("im2col over dynamic channel or spatial axes is not supported")
    if ph or pw:
        x = g.op("pad", x, padding=[(0, 0), (0, 0), (ph, ph), (pw, pw)], border="constant",
                 value=0.0, out_shape=[n, c, h + 2 * ph, w + 2 * pw])
    hp, wp = h + 2 * ph, w + 2 * pw
    oh = (hp - dh * (kh - 1) - 1) // sh + 1
    ow = (wp - dw * (kw - 1) - 1) // sw + 1
    ih = np.arange(kh)[:, None] * dh + np.arange(oh)[None, :] * sh  # [kh, oh]
    iw = np.arange(kw)[:, None] * dw + np.arange(ow)[None, :] * sw  # [kw, ow]
    y = _gather_const(g, x, 2, ih)  # [n, c, kh, oh, wp]
    y = _gather_const(g, y, 4, iw)  # [n, c, kh, oh, kw, ow]
    y = g.transpose(y, [0, 1, 2, 4, 3, 5])  # [n, c, kh, kw, oh, ow]
    y = g.reshape(y, [n, c * kh * kw, oh * ow])
    return y if self.rank == 4 else g.squeeze(y, [0])


def _contiguous_strides(shape):
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return list(reversed(strides))


def _as_strided_index(g, self, size, stride, storage_offset):
    """Flat positions read by ``as_strided`` when ``self`` is laid out contiguously."""
    shape = self.static_shape()
    if shape is None:
        raise g.error("as_strided on a dynamic shape is not supported")
    traced = g.node.in_strides[0] if g.node is not None and g.node.in_strides else None
    if traced is None or list(traced) != _contiguous_strides(shape):
        raise g.error("as_strided on a tensor that is not contiguous in memory (its strides "
                      "depend on PyTorch's storage, which the export does not keep)")
    if storage_offset not in (None, 0):
        raise g.error("as_strided with a storage offset (relative to a storage the export "
                      "does not keep)")
    idx = np.zeros(list(size), dtype=np.int64)
    for axis, (n, st) in enumerate(zip(size, stride)):
        view = [1] * len(size)
        view[axis] = n
        idx = idx + (np.arange(n) * st).reshape(view)
    numel = int(np.prod(shape)) if shape else 1
    if idx.size and (idx.max() >= numel or idx.min() < 0):
        raise g.error("as_strided reads outside the tensor")
    return idx, numel


@aten("as_strided", "as_strided_copy")
def as_strided(g, self, size, stride, storage_offset=None):
    idx, numel = _as_strided_index(g, self, list(size), list(stride), storage_offset)
    flat = g.reshape(self, [numel])
    return _gather_const(g, flat, 0, idx)


@aten("as_strided_scatter")
def as_strided_scatter(g, self, src, size, stride, storage_offset=None):
    idx, numel = _as_strided_index(g, self, list(size), list(stride), storage_offset)
    flat = g.reshape(self, [numel])
    positions = g.const(torch.from_numpy(idx.reshape(-1, 1)))
    updates = g.reshape(g.cast(src, self.dtype), [int(idx.size)])
    out = g.op("tract_core_scatter_nd", flat, positions, updates, out_shape=[numel])
    return g.reshape(out, list(self.shape))


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
