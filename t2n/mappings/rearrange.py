"""Rearranging data: roll, flip, rot90, repeat, tile, repeat_interleave, unfold,
pixel_shuffle, channel_shuffle, diagonal matrices, fftshift, im2col, as_strided, and the
``*_copy`` aliases of view ops. Grids, splits and stacks are in ``stacking.py``.

Index-based rearrangements (flip, repeat_interleave, unfold) gather with a constant index
tensor: one op whatever the size, the index stored as data.
"""

from __future__ import annotations

import numpy as np
import torch

from t2n.mappings.helpers.indexing import gather_const, static_numel, static_size
from t2n.walk import registry
from t2n.walk.registry import aten


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
        flat = g.reshape(self, [static_numel(g, self)])
        return g.reshape(roll_axis(g, flat, shifts[0], 0), list(self.shape))
    x = self
    for s, d in zip(shifts, dims):
        x = roll_axis(g, x, s, d % self.rank)
    return x


def flip_axis(g, x, axis):
    n = x.shape[axis]
    if not isinstance(n, int):
        idx = g.binary("sub", _runtime_size(g, n - 1), g.arange(n), torch.int64)
        return g.gather(x, idx, axis)
    if n <= 1:
        return x
    return gather_const(g, x, axis, np.arange(n - 1, -1, -1))


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
        x = g.reshape(x, [static_numel(g, x)])
        dim = 0
    axis = dim % x.rank
    if isinstance(repeats, int) and not isinstance(x.shape[axis], int):
        return g.repeat_each(x, axis, repeats)  # one count on a dynamic axis
    n = static_size(g, x.shape[axis], "repeat_interleave")
    if hasattr(repeats, "rank"):
        if not repeats.is_const:
            raise g.error("repeats given as a runtime tensor: the output size depends on data")
        reps = repeats.value.reshape(-1).tolist()
    else:
        reps = [repeats]
    if len(reps) == 1:
        reps = reps * n
    return gather_const(g, x, axis, np.repeat(np.arange(n), reps))


@aten("unfold")
def unfold(g, self, dimension, size, step):
    if self.rank == 0:
        return g.reshape(self, [1])
    axis = dimension % self.rank
    n = static_size(g, self.shape[axis], "unfold")
    nw = (n - size) // step + 1
    index = np.arange(nw)[:, None] * step + np.arange(size)[None, :]
    y = gather_const(g, self, axis, index)  # [..., nw, size, ...]
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
        n = static_size(g, self.shape[0], "diag")
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
    return diag(g, g.reshape(self, [static_numel(g, self)]), offset)


@aten("diag_embed")
def diag_embed(g, self, offset=0, dim1=-2, dim2=-1):
    n = static_size(g, self.shape[-1], "diag_embed")
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
    n = min(static_size(g, n0, "trace"), static_size(g, n1, "trace"))
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
    total_cols = sum(static_size(g, b.shape[1], "block_diag") for b in blocks)
    rows, col = [], 0
    for b in blocks:
        w = b.shape[1]
        if static_size(g, b.shape[0], "block_diag") == 0:
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
        n = static_size(g, x.shape[axis], "fftshift")
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
    y = gather_const(g, x, 2, ih)  # [n, c, kh, oh, wp]
    y = gather_const(g, y, 4, iw)  # [n, c, kh, oh, kw, ow]
    y = g.transpose(y, [0, 1, 2, 4, 3, 5])  # [n, c, kh, kw, oh, ow]
    y = g.reshape(y, [n, c * kh * kw, oh * ow])
    return y if self.rank == 4 else g.squeeze(y, [0])


def _storage_order(shape, strides):
    """The axis order in which a dense, non-overlapping tensor lies in memory (outermost
    first), or None when its elements do not tile one block of memory. Size-1 axes carry no
    layout (any stride) and go first. A transposed or permuted view (``x.transpose(1, 2)``,
    a ``reshape`` that merged axes without copying) is dense in this sense: ``as_strided``
    on it reads the memory in this order."""
    live = sorted((a for a, n in enumerate(shape) if n != 1), key=lambda a: -strides[a])
    expected = 1
    for a in reversed(live):
        if strides[a] != expected:
            return None
        expected *= shape[a]
    return [a for a, n in enumerate(shape) if n == 1] + live


def _as_strided_index(g, self, size, stride, storage_offset):
    """(flat positions read by ``as_strided``, numel, axis order of ``self`` in memory):
    the positions index ``self`` permuted to that order and flattened, which is PyTorch's
    storage when ``self`` is dense (contiguous or a permutation of contiguous)."""
    shape = self.static_shape()
    if shape is None:
        raise g.error("as_strided on a dynamic shape is not supported")
    traced = g.node.in_strides[0] if g.node is not None and g.node.in_strides else None
    order = _storage_order(shape, list(traced)) if traced is not None else None
    if order is None:
        raise g.error("as_strided on a tensor whose elements do not tile memory (strides "
                      f"{traced} for shape {shape}: overlapping or with gaps, so what it reads "
                      "depends on PyTorch's storage, which the export does not keep)")
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
    return idx, numel, order


def _in_memory_order(g, self, order):
    """``self`` as the flat run of memory it occupies."""
    if order != list(range(self.rank)):
        self = g.transpose(self, order)
    return self


@aten("as_strided", "as_strided_copy")
def as_strided(g, self, size, stride, storage_offset=None):
    idx, numel, order = _as_strided_index(g, self, list(size), list(stride), storage_offset)
    flat = g.reshape(_in_memory_order(g, self, order), [numel])
    return gather_const(g, flat, 0, idx)


@aten("as_strided_scatter")
def as_strided_scatter(g, self, src, size, stride, storage_offset=None):
    """The result keeps ``self``'s layout (PyTorch clones it preserving strides), so the
    scatter runs on ``self``'s memory order and the result is permuted back."""
    idx, numel, order = _as_strided_index(g, self, list(size), list(stride), storage_offset)
    mem = _in_memory_order(g, self, order)
    flat = g.reshape(mem, [numel])
    positions = g.const(torch.from_numpy(idx.reshape(-1, 1)))
    updates = g.reshape(g.cast(src, self.dtype), [int(idx.size)])
    out = g.op("tract_core_scatter_nd", flat, positions, updates, out_shape=[numel])
    out = g.reshape(out, list(mem.shape))
    if order != list(range(self.rank)):
        out = g.transpose(out, [order.index(a) for a in range(self.rank)])
    return out


