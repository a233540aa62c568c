"""Interpolation (``F.interpolate`` / ``nn.Upsample``): nearest, nearest-exact, linear,
bilinear, trilinear, bicubic, with ``align_corners`` and ``scale_factor``.

Each spatial axis is resampled separately: source indices and weights are computed here,
at export time, with PyTorch's own coordinate formulas, then applied with one
``tract_core_gather`` per tap (1 for nearest, 2 for linear, 4 for cubic) and a weighted sum.
The op count depends on the number of axes and taps only. Along a dynamic axis the same
float32 formulas run in the graph on ``[out]`` index vectors (``_symbolic_taps``), so one
archive resamples every size; a whole nearest ``scale_factor`` stays a repeat (it streams).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from t2n.mappings.helpers.memory_format import channels_last_contiguous
from t2n.walk.registry import aten, own_shapes


def _scale(in_n, out_n, scale_factor, align_corners, linear):
    if linear and align_corners:
        return (in_n - 1) / (out_n - 1) if out_n > 1 else 0.0
    if scale_factor is not None and scale_factor > 0:
        return 1.0 / scale_factor
    return in_n / out_n


def _nearest(mode, in_n, out_n, scale_factor, special_sizes):
    dst = np.arange(out_n, dtype=np.int64)
    special_sizes = special_sizes and mode == "nearest"
    if special_sizes and out_n == in_n:  # PyTorch's nearest_idx: a copy
        return dst
    if special_sizes and out_n == 2 * in_n:  # ... and a shift
        return dst >> 1
    s = np.float32(_scale(in_n, out_n, scale_factor, False, False))
    off = 0.5 if mode == "nearest-exact" else 0.0
    src = np.floor((dst.astype(np.float32) + np.float32(off)) * s).astype(np.int64)
    return np.minimum(src, in_n - 1)


def _cubic_coefficients(t):
    """PyTorch's cubic convolution weights (A = -0.75) of the 4 taps, in float32 as its
    kernel computes them."""
    f = np.float32
    a = f(-0.75)

    def near(x):  # |x| <= 1
        return ((a + f(2)) * x - (a + f(3))) * x * x + f(1)

    def far(x):  # 1 < |x| < 2
        return ((a * x - f(5) * a) * x + f(8) * a) * x - f(4) * a

    return [far(t + f(1)), near(t), near(f(1) - t), far(f(2) - t)]


def _taps(mode, in_n, out_n, scale_factor, align_corners, special_sizes=False,
          weights_dtype=None):
    """[(index array [out_n], weight array [out_n] or None)] for one axis, as PyTorch's
    CPU kernels compute them: float32 coordinates, the index clamped to the input and the
    fraction to [0, 1]. ``special_sizes``: the nearest index of PyTorch's channels-last
    kernel (a copy for equal sizes, a shift for twice the size). ``weights_dtype``
    (float16): each weight rounded as PyTorch's generic kernel stores it, linear's second
    weight ``1 - lambda`` taken of the rounded first; the result is float32 either way."""
    if mode in ("nearest", "nearest-exact"):
        return [(_nearest(mode, in_n, out_n, scale_factor, special_sizes), None)]
    f = np.float32
    d32 = np.arange(out_n, dtype=f)
    if mode == "linear" and in_n == out_n:
        # PyTorch copies (lambda = 0 on the same index: an inf input still gives NaN)
        i0, lam = np.arange(out_n, dtype=np.int64), np.zeros(out_n, f)
        i1 = i0
    else:
        s = f(_scale(in_n, out_n, scale_factor, align_corners, True))
        src = s * d32 if align_corners else s * (d32 + f(0.5)) - f(0.5)
        if mode == "linear":
            src = np.maximum(src, f(0.0))
        i0 = np.minimum(np.floor(src).astype(np.int64), in_n - 1)
        lam = np.clip(src - i0.astype(f), f(0.0), f(1.0)).astype(f)
        i1 = np.minimum(i0 + 1, in_n - 1)
    if mode == "linear":
        if weights_dtype is not None:
            lam1 = _stored(lam, weights_dtype)
            return [(i0, _stored(f(1.0) - lam1, weights_dtype)), (i1, lam1)]
        return [(i0, f(1.0) - lam), (i1, lam)]
    ws = _cubic_coefficients(lam)
    if weights_dtype is not None:
        ws = [_stored(w, weights_dtype) for w in ws]
    return [(np.clip(i0 + k - 1, 0, in_n - 1), w.astype(f)) for k, w in enumerate(ws)]


def _stored(w, dtype):
    """float32 weights rounded to ``dtype`` (as PyTorch stores them), back in float32."""
    return torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32)).to(dtype).float().numpy()


def _symbolic_taps(g, mode, in_n, out_n, scale_factor, align_corners, weights_dtype=None):
    """``_taps`` for sizes known at run time only: the same float32 coordinate formulas of
    PyTorch's generic CPU kernels evaluated by tract on ``[out_n]`` vectors (index tensors
    and weight tensors), a constant number of ops whatever the sizes."""
    f32, i64 = torch.float32, torch.int64

    def b(kind, x, y, dtype=f32, **kw):
        return g.binary(kind, x, y, dtype, **kw)

    def stored(w):  # rounded as PyTorch stores the weights of a float16 tensor
        return w if weights_dtype is None else g.cast(g.cast(w, weights_dtype), f32)

    dst = g.arange(out_n, f32)
    last = g.scalar(in_n - 1, i64)
    linear = mode not in ("nearest", "nearest-exact")
    if linear and align_corners:  # (in - 1) / (out - 1), 0 for a single output
        ratio = b("div", g.scalar(in_n - 1, f32), g.scalar(out_n - 1, f32))
        scale = g.op("select", b("gt", g.scalar(out_n, i64), 1, i64, out_dtype=torch.bool),
                     ratio, g.scalar(0.0, f32), out_shape=(), out_dtype=f32)
    elif scale_factor is not None and scale_factor > 0:
        scale = g.scalar(float(np.float32(1.0 / scale_factor)), f32)
    else:
        scale = b("div", g.scalar(in_n, f32), g.scalar(out_n, f32))
    if not linear:
        pos = b("add", dst, 0.5) if mode == "nearest-exact" else dst
        src = g.cast(g.unary("floor", b("mul", pos, scale)), i64)
        return [(b("min", src, last, i64), None)]
    if align_corners:
        src = b("mul", scale, dst)
    else:
        src = b("sub", b("mul", scale, b("add", dst, 0.5)), 0.5)
    if mode == "linear":
        src = b("max", src, 0.0)
    i0 = b("min", g.cast(g.unary("floor", src), i64), last, i64)
    lam = b("min", b("max", b("sub", src, g.cast(i0, f32)), 0.0), 1.0)
    if mode == "linear":
        i1 = b("min", b("add", i0, 1, i64), last, i64)
        # equal sizes: PyTorch copies, its second tap is the same index
        same = b("eq", g.scalar(in_n, i64), g.scalar(out_n, i64), i64, out_dtype=torch.bool)
        i1 = g.op("select", same, i0, i1, out_shape=list(i0.shape), out_dtype=i64)
        lam1 = stored(lam)
        return [(i0, stored(b("sub", 1.0, lam1))), (i1, lam1)]
    a = -0.75

    def near(x):  # ((a + 2) x - (a + 3)) x x + 1
        return b("add", b("mul", b("mul", b("sub", b("mul", a + 2.0, x), a + 3.0), x), x), 1.0)

    def far(x):  # ((a x - 5a) x + 8a) x - 4a
        inner = b("add", b("mul", b("sub", b("mul", a, x), 5.0 * a), x), 8.0 * a)
        return b("sub", b("mul", inner, x), 4.0 * a)

    ws = [far(b("add", lam, 1.0)), near(lam), near(b("sub", 1.0, lam)),
          far(b("sub", 2.0, lam))]
    taps = []
    for k, w in enumerate(ws):
        idx = b("min", b("max", b("add", i0, k - 1, i64), 0, i64), last, i64)
        taps.append((idx, stored(w)))
    return taps


def channels_last_kernel(g, x, mode, out_sizes) -> bool:
    """Whether PyTorch's CPU upsampling runs its channels-last kernel on this node (float
    weights; nearest's special sizes) rather than its generic one. Nearest and linear 2-D and
    3-D resampling do, for 2-D outputs whose height + width is at most 128 and for a
    channels-last input with more than 3 channels; 1-D and cubic resampling never do.
    PyTorch also takes it for 3-channel 2-D bilinear when it runs on one thread; t2n
    reproduces the multi-threaded choice."""
    if mode == "cubic" or x.rank not in (4, 5) or len(out_sizes) != x.rank - 2:
        return False
    strides = g.node.in_strides[0] if g.node is not None and g.node.in_strides else None
    if isinstance(x.shape[1], int) and x.shape[1] > 3 and all(
            isinstance(n, int) for n in x.shape) and channels_last_contiguous(x.shape, strides):
        return True
    return x.rank == 4 and all(isinstance(n, int) for n in out_sizes) and \
        out_sizes[0] + out_sizes[1] <= 128


def resample(g, x, mode, out_sizes, scale_factors, align_corners):
    n_sp = len(out_sizes)
    y = x
    d = x.dtype
    fast = channels_last_kernel(g, x, mode, out_sizes)
    weights_dtype = None if fast or g.node is None else g.node.weights_dtype
    for k in range(n_sp):
        axis = x.rank - n_sp + k
        in_n = y.shape[axis]
        out_n = out_sizes[k]
        sf = scale_factors[k] if scale_factors else None
        shape = [1] * y.rank
        shape[axis] = out_n
        if not isinstance(in_n, int) or not isinstance(out_n, int):
            r = int(sf) if mode in ("nearest", "nearest-exact") and sf is not None \
                and float(sf) == int(sf) and sf >= 1 else None
            if r is not None:
                y = g.repeat_each(y, axis, r)  # nearest by r: each input r times
                continue
            if g.streams(y, axis):
                raise g.error("interpolation along the streaming axis is supported for "
                              "nearest upsampling by a whole scale_factor only")
            key = ("resample taps", mode, str(in_n), str(out_n), sf, bool(align_corners),
                   weights_dtype, d, tuple(str(v) for v in shape))
            if key not in g.shared:  # computed once per graph, shared by every such op
                g.shared[key] = [
                    (idx, None if w is None else g.reshape(g.cast(w, d), shape))
                    for idx, w in _symbolic_taps(g, mode, in_n, out_n, sf, align_corners,
                                                 weights_dtype)]
            taps = g.shared[key]
        else:
            taps = [(g.const(torch.from_numpy(idx)),
                     None if w is None else g.const(torch.from_numpy(w.reshape(shape)).to(d)))
                    for idx, w in _taps(mode, in_n, out_n, sf, align_corners,
                                        special_sizes=fast, weights_dtype=weights_dtype)]
        acc = None
        for idx, wt in taps:
            part = g.gather(y, idx, axis)
            if wt is not None:
                part = g.binary("mul", part, wt, d)
            acc = part if acc is None else g.binary("add", acc, part, d)
        y = acc
    return y


def _parse(g, x, n_sp, args, has_align):
    """(output sizes, scale factors, align_corners) from the vec or the scalar overloads."""
    args = list(args)
    output_size = args.pop(0) if args else None
    align = False
    if has_align and args:
        align = bool(args.pop(0)) if args[0] is not None else False
    scales = None
    if args:
        if len(args) == 1 and (args[0] is None or isinstance(args[0], (list, tuple))):
            scales = list(args[0]) if args[0] is not None else None
        else:
            scales = [a for a in args][:n_sp]
            if all(s is None for s in scales):
                scales = None
    out = list(g.out_shape()[-n_sp:]) if g.node is not None else list(output_size)
    spatial = list(x.shape[-n_sp:])
    if output_size is not None:
        sizes = list(output_size) if isinstance(output_size, (list, tuple)) \
            else [output_size] * n_sp
        if any(not isinstance(v, int) for v in sizes):
            out = sizes  # sizes read from a dynamic axis (size=y.shape[-2:])
    elif scales and any(not isinstance(v, int) for v in spatial):
        out = [_scaled_size(g, n, sf) for n, sf in zip(spatial, scales)]
    return out, scales, align


def _scaled_size(g, n, scale):
    """PyTorch's ``floor(n * scale)`` (in double) for a dynamic ``n``: exact as a rational
    when the scale has a short binary fraction (0.5, 1.5, 0.25, 2, ...); other scales could
    round differently at some sizes, so they are refused there."""
    if isinstance(n, int):
        return int(math.floor(n * scale))
    import sympy

    r = sympy.Rational(float(scale))
    if r.q > 2 ** 16:
        raise g.error(f"scale_factor: {scale} over a dynamic axis (PyTorch's floor(size * "
                      f"{scale}) in double is not exactly a rational size); pass size= or a "
                      "scale with a short binary fraction such as 0.5 or 1.5")
    return sympy.floor(n * r)


def _upsample(mode, n_sp, has_align):
    def fn(g, self, *args):
        out, scales, align = _parse(g, self, n_sp, args, has_align)
        x = self
        if not x.dtype.is_floating_point and mode not in ("nearest", "nearest-exact"):
            raise g.error(f"{mode} interpolation of {x.dtype} tensors")
        return resample(g, x, mode, out, scales, align)

    fn.__name__ = f"upsample_{mode}_{n_sp}d"
    fn.__qualname__ = fn.__name__
    # sizes from size=, the input or floor(n * scale) (_parse): PyTorch's shape function
    # would pin a dynamic axis where it turns a scaled size into a float
    return own_shapes(fn)


for _n in (1, 2, 3):
    aten(f"upsample_nearest{_n}d")(_upsample("nearest", _n, False))
    aten(f"_upsample_nearest_exact{_n}d")(_upsample("nearest-exact", _n, False))
aten("upsample_linear1d")(_upsample("linear", 1, True))
aten("upsample_bilinear2d")(_upsample("linear", 2, True))
aten("upsample_trilinear3d")(_upsample("linear", 3, True))
aten("upsample_bicubic2d")(_upsample("cubic", 2, True))


def _aa_filter(mode, x):
    """PyTorch's antialias filters: triangle (linear) and Keys cubic with a = -0.5."""
    x = np.abs(x)
    if mode == "linear":
        return np.where(x < 1.0, 1.0 - x, 0.0)
    a = -0.5
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def _aa_matrix(mode, in_n, out_n, scale_factor, align_corners, real):
    """The dense [out_n, in_n] weights of one axis, as PyTorch's ``_compute_weights_aa``
    computes them (in the input's float type ``real``): a window of ``support`` around each
    output centre (truncated bounds), filter stretched by the scale when downsampling,
    weights normalised to sum 1."""
    if align_corners:
        scale = real((in_n - 1) / (out_n - 1)) if out_n > 1 else real(0.0)
    elif scale_factor is not None and scale_factor > 0:
        scale = real(1.0 / scale_factor)
    else:
        scale = real(in_n) / real(out_n)
    taps = 2 if mode == "linear" else 4
    support = real(taps * 0.5) * scale if scale >= 1.0 else real(taps * 0.5)
    invscale = real(1.0) / scale if scale >= 1.0 else real(1.0)
    m = np.zeros((out_n, in_n), dtype=real)
    for i in range(out_n):  # export time only: the graph gets one matrix per axis
        center = scale * real(i + 0.5)
        xmin = max(int(center - support + real(0.5)), 0)
        xmax = min(int(center + support + real(0.5)), in_n)
        j = np.arange(xmin, xmax)
        w = _aa_filter(mode, (j.astype(real) - center + real(0.5)) * invscale).astype(real)
        total = w.sum(dtype=real)
        m[i, xmin:xmax] = w / total if total != 0.0 else w
    return m


def resample_aa(g, x, mode, out_sizes, scale_factors, align_corners):
    """Antialiased resampling: one contraction with a constant weight matrix per axis."""
    from t2n.mappings.helpers.matrix import einsum_op

    n_sp = len(out_sizes)
    real = np.float64 if x.dtype == torch.float64 else np.float32
    letters = "abcdefgh"[:x.rank]
    y = x
    for k in reversed(range(n_sp)):  # the last axis first, as PyTorch's separable passes
        axis = x.rank - n_sp + k
        in_n, out_n = y.shape[axis], out_sizes[k]
        if not isinstance(in_n, int) or not isinstance(out_n, int):
            raise g.error("antialiased interpolation over a dynamic spatial axis is not "
                          "supported")
        sf = scale_factors[k] if scale_factors else None
        w = g.const(torch.from_numpy(_aa_matrix(mode, in_n, out_n, sf, align_corners, real)))
        out = letters[:axis] + "z" + letters[axis + 1:]
        shape = list(y.shape)
        shape[axis] = out_n
        y = einsum_op(g, f"{letters},z{letters[axis]}->{out}", [y, w], shape, x.dtype)
    return y


def _upsample_aa(mode):
    def fn(g, self, *args):
        out, scales, align = _parse(g, self, 2, args, True)
        if self.dtype not in (torch.float32, torch.float64):
            raise g.error(f"antialiased {mode} interpolation of {self.dtype} tensors is not "
                          "supported (float32/float64 only)")
        return resample_aa(g, self, mode, out, scales, align)

    fn.__name__ = f"upsample_{mode}_2d_aa"
    fn.__qualname__ = fn.__name__
    return fn


aten("_upsample_bilinear2d_aa")(_upsample_aa("linear"))
aten("_upsample_bicubic2d_aa")(_upsample_aa("cubic"))


def _bicubic_border(g, x, grid, align_corners):
    """PyTorch's bicubic ``border`` sampling clamps each of the 16 taps into the image;
    tract's clamps the sampling point instead. The same taps are read from the image
    edge-padded by ``P = 4`` with zeros padding, the point clamped to ``[-2, size + 1]``
    (beyond it every tap is an edge value and the weights sum to 1) and moved by ``P``:
    returns ``(padded image, grid in its coordinates, zeros padding)``."""
    pad = 4
    h, w = x.shape[2], x.shape[3]
    if not (isinstance(h, int) and isinstance(w, int)):
        raise g.error("grid_sample: bicubic sampling with padding_mode='border' needs a "
                      "static image size")
    d = x.dtype
    xp = g.op("pad", x, padding=[(0, 0), (0, 0), (pad, pad), (pad, pad)], border="replicated",
              out_shape=[x.shape[0], x.shape[1], h + 2 * pad, w + 2 * pad], out_dtype=d)
    size = torch.tensor([w, h], dtype=d)  # grid[..., 0] is x (width), [..., 1] is y
    one = g.binary("add", grid, 1.0, d)
    if align_corners:  # unnormalize: (g + 1) / 2 * (S - 1), else ((g + 1) * S - 1) / 2
        src = g.binary("mul", one, g.const((size - 1) / 2), d)
    else:
        src = g.binary("mul", g.binary("sub", g.binary("mul", one, g.const(size), d), 1.0, d),
                       0.5, d)
    src = g.binary("min", g.binary("max", src, -2.0, d), g.const(size + 1), d)
    src = g.binary("add", src, float(pad), d)
    padded = size + 2 * pad
    if align_corners:
        norm = g.binary("sub", g.binary("mul", src, g.const(2 / (padded - 1)), d), 1.0, d)
    else:
        norm = g.binary("sub", g.binary("mul", g.binary("add", g.binary("mul", src, 2.0, d),
                                                        1.0, d), g.const(1 / padded), d), 1.0, d)
    return xp, norm, 0


@aten("grid_sampler", "grid_sampler_2d", "grid_sampler_3d")
def grid_sampler(g, input, grid, interpolation_mode=0, padding_mode=0, align_corners=False):
    """tract's grid_sample takes 4-D (bilinear/nearest/bicubic) and 5-D inputs (trilinear,
    nearest: PyTorch has no 3-D bicubic)."""
    if input.rank not in (4, 5):
        raise g.error("grid_sample is supported for 4-D and 5-D inputs only")
    modes = {0: "bilinear", 1: "nearest", 2: "bicubic"}
    pads = {0: "zeros", 1: "border", 2: "reflection"}
    out = list(g.out_shape()) if g.node is not None else None
    if interpolation_mode == 2 and padding_mode == 1:
        input, grid, padding_mode = _bicubic_border(g, input, g.cast(grid, input.dtype),
                                                    bool(align_corners))
    return g.op("tract_core_grid_sample", input, g.cast(grid, input.dtype),
                mode=modes[interpolation_mode], padding_mode=pads[padding_mode],
                align_corners=bool(align_corners), out_shape=out)

