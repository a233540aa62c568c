"""Real-output FFTs of real inputs: ``fft_irfft``/``irfft2``/``irfftn`` and
``fft_hfft``/``hfft2``/``hfftn``.

A real input is a spectrum with zero imaginary part. Each transformed axis is a DFT written
as a contraction (``tract_core_einsum``) with constant cos/sin matrices built here, in f64:

* the last axis is the complex-to-real step of length ``n`` over the half spectrum
  (``n // 2 + 1`` bins, inner bins counted twice for their Hermitian mirror). It is done
  *first*, on the real input, producing ``Z = sum_j w_j x_j e^{+2 pi i j k / n}`` as a
  (re, im) pair of real tensors;
* every other axis is a complex DFT of length ``s[i]`` applied to that pair (four products);
  the last one needs only the real part (two).

Torch runs the complex axes first and the complex-to-real step last; both orders give the
same numbers because the steps are real-linear maps on different axes and the real part taken
at the end (``Re(sum w_j Y_j e^{i theta})``) is what torch's c2r computes, including ignoring
the imaginary part of the DC and Nyquist bins (their sine is zero). Zero padding or trimming
of the input to ``s`` is folded into the matrices (missing rows / unused rows).

``hfft*`` of a real input is ``irfft*`` of its conjugate, i.e. of itself, with the
normalisation direction swapped. Complex inputs or outputs are out of scope (tract has no
complex dtype). Sizes of transformed axes must be static; the op count is 2 + 4 per extra
axis, whatever the sizes.
"""

from __future__ import annotations

import numpy as np
import torch

from t2n import dtypes
from t2n.registry import aten

_LETTERS = "abcdefghijklmnopqrstuvwxy"
_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}
# accumulate in f64 when a transform is long enough for f32 sums to drift
_F64_FROM = 64


def _scale(norm: str, n: int) -> float:
    """Factor of an inverse transform of length ``n`` under ``norm``."""
    if norm == "backward":
        return 1.0 / n
    if norm == "forward":
        return 1.0
    return 1.0 / np.sqrt(n)


def _along(g, x, axis: int, m: np.ndarray, dtype):
    """``x`` contracted with the constant ``m [in, out]`` along ``axis``."""
    letters = _LETTERS[:x.rank]
    out = letters[:axis] + "z" + letters[axis + 1:]
    shape = list(x.shape)
    shape[axis] = m.shape[1]
    w = g.const(torch.from_numpy(m).to(dtype))
    return g.op("tract_core_einsum", [x, w], expr=f"{letters},{letters[axis]}z->{out}",
                acc=dtypes.tract_name(dtype), output="", out_dtype=dtype, out_shape=shape)


def _c2r_matrices(in_n: int, n: int, scale: float):
    """(cos, sin) [in_n, n] of the half-spectrum step; rows past ``n // 2`` are unused."""
    half = n // 2 + 1
    j = np.arange(in_n, dtype=np.float64)[:, None]
    k = np.arange(n, dtype=np.float64)[None, :]
    w = np.where(j == 0, 1.0, 2.0)
    if n % 2 == 0:
        w = np.where(j == n // 2, 1.0, w)
    w = np.where(j < half, w * scale, 0.0)
    theta = 2 * np.pi * ((j * k) % n) / n
    return w * np.cos(theta), w * np.sin(theta)


def _c2c_matrices(in_n: int, n: int, scale: float):
    """(cos, sin) [in_n, n] of an inverse complex DFT of length ``n``; rows past ``n`` (a
    trimmed input) are zero, a shorter input is zero padded."""
    j = np.arange(in_n, dtype=np.float64)[:, None]
    k = np.arange(n, dtype=np.float64)[None, :]
    theta = 2 * np.pi * ((j * k) % n) / n
    live = np.where(j < n, scale, 0.0)
    return live * np.cos(theta), live * np.sin(theta)


def _as_list(v):
    if v is None:
        return None
    return [v] if isinstance(v, int) else list(v)


def _plan(g, x, s, dim):
    """(axes, lengths) with torch's defaults: dims from ``s`` or all axes; lengths from the
    input, the last one ``2 * (in - 1)``; -1 in ``s`` means the default."""
    s, dim = _as_list(s), _as_list(dim)
    if dim is None:
        dim = list(range(x.rank - len(s), x.rank)) if s is not None else list(range(x.rank))
    axes = [d % max(x.rank, 1) for d in dim]
    if len(set(axes)) != len(axes):
        raise g.error(f"dim: repeated axes in {dim}")
    if s is not None and len(s) != len(axes):
        raise g.error(f"s: {s} and dim {dim} differ in length")
    for a in axes:
        if not isinstance(x.shape[a], int):
            raise g.error(f"dim: axis {a} has a dynamic size; the DFT matrices need static "
                          "sizes")
    lengths = []
    for i, a in enumerate(axes):
        n = s[i] if s is not None else -1
        if n == -1:
            n = 2 * (x.shape[a] - 1) if i == len(axes) - 1 else x.shape[a]
        if not isinstance(n, int) or n < 1:
            raise g.error(f"s: invalid transform length {n} for axis {a}")
        lengths.append(n)
    return axes, lengths


def irfftn_of_real(g, x, s, dim, norm):
    if x.dtype.is_complex:
        raise g.error("self: complex inputs are not supported")
    axes, lengths = _plan(g, x, s, dim)
    if not axes:
        raise g.error("dim: at least one axis must be transformed")
    out_dtype = g.out_dtype() if g.node is not None else torch.float32
    big = max(lengths + [x.shape[a] for a in axes]) > _F64_FROM
    cd = torch.float64 if (out_dtype == torch.float64 or big) else torch.float32
    y = g.cast(x, cd)
    last, n = axes[-1], lengths[-1]
    c, si = _c2r_matrices(x.shape[last], n, _scale(norm, n))
    re, im = _along(g, y, last, c, cd), _along(g, y, last, si, cd)
    rest = list(zip(axes[:-1], lengths[:-1]))
    for i, (a, n) in enumerate(rest):
        c, si = _c2c_matrices(re.shape[a], n, _scale(norm, n))
        re_c, im_s = _along(g, re, a, c, cd), _along(g, im, a, si, cd)
        new_re = g.binary("sub", re_c, im_s, cd)
        if i < len(rest) - 1:
            new_im = g.binary("add", _along(g, re, a, si, cd), _along(g, im, a, c, cd), cd)
            im = new_im
        re = new_re
    return g.cast(re, out_dtype)


def _norm(g, norm):
    norm = norm or "backward"
    if norm not in _SWAP:
        raise g.error(f"norm: {norm!r} is not 'backward', 'forward' or 'ortho'")
    return norm


@aten("fft_irfft")
def fft_irfft(g, self, n=None, dim=-1, norm=None):
    return irfftn_of_real(g, self, None if n is None else [n], [dim], _norm(g, norm))


@aten("fft_irfft2", "fft_irfftn")
def fft_irfftn(g, self, s=None, dim=None, norm=None):
    return irfftn_of_real(g, self, s, dim, _norm(g, norm))


@aten("fft_hfft")
def fft_hfft(g, self, n=None, dim=-1, norm=None):
    return irfftn_of_real(g, self, None if n is None else [n], [dim], _SWAP[_norm(g, norm)])


@aten("fft_hfft2", "fft_hfftn")
def fft_hfftn(g, self, s=None, dim=None, norm=None):
    return irfftn_of_real(g, self, s, dim, _SWAP[_norm(g, norm)])


@aten("stft")
def stft(g, self, n_fft, hop_length=None, win_length=None, window=None, normalized=False,
         onesided=None, return_complex=None, align_to_window=None):
    """``return_complex=False`` only (a real ``[..., freq, frames, 2]`` tensor): frames are a
    gather of constant indices, the window a product, the DFT two contractions with constant
    cos/-sin matrices. ``center`` padding is done by ``torch.stft`` before this op (a traced
    ``pad``)."""
    if return_complex is not False:
        raise g.error("return_complex: complex outputs are not supported (tract has no complex "
                      "dtype); use return_complex=False")
    if align_to_window:
        raise g.error("align_to_window=True is not supported")
    if self.dtype not in (torch.float32, torch.float64) or self.rank not in (1, 2):
        raise g.error("self: a 1-D or 2-D float32/float64 signal is required")
    length = self.shape[-1]
    if not isinstance(length, int):
        raise g.error("self: the signal length must be static (it fixes the frame count)")
    hop = hop_length if hop_length is not None else n_fft // 4
    win = win_length if win_length is not None else n_fft
    if not (0 < n_fft <= length and hop > 0 and 0 < win <= n_fft):
        raise g.error(f"n_fft={n_fft}, hop_length={hop}, win_length={win} are invalid for a "
                      f"signal of length {length}")
    d = self.dtype
    x = self if self.rank == 2 else g.unsqueeze(self, [0])
    n_frames = 1 + (length - n_fft) // hop
    starts = torch.arange(n_frames).reshape(-1, 1) * hop + torch.arange(n_fft).reshape(1, -1)
    frames = g.gather(x, g.const(starts), 1)  # [B, frames, n_fft]
    left = (n_fft - win) // 2
    if window is not None:
        w = g.cast(window, d)
        if win < n_fft:
            w = g.concat([g.broadcast_to(g.scalar(0.0, d), [left]), w,
                          g.broadcast_to(g.scalar(0.0, d), [n_fft - win - left])], 0)
        frames = g.binary("mul", frames, w, d)
    elif win < n_fft:
        ones = torch.zeros(n_fft, dtype=d)
        ones[left:left + win] = 1
        frames = g.binary("mul", frames, g.const(ones), d)
    bins = n_fft // 2 + 1 if onesided is not False else n_fft
    j = np.arange(n_fft, dtype=np.float64)[:, None]
    k = np.arange(bins, dtype=np.float64)[None, :]
    theta = 2 * np.pi * ((j * k) % n_fft) / n_fft
    scale = 1.0 / np.sqrt(n_fft) if normalized else 1.0
    cd = torch.float64 if (d == torch.float64 or n_fft > _F64_FROM) else torch.float32
    frames = g.cast(frames, cd)
    parts = []
    for m in (np.cos(theta) * scale, -np.sin(theta) * scale):
        wm = g.const(torch.from_numpy(m).to(cd))
        part = g.op("tract_core_einsum", [frames, wm], expr="bfn,nk->bkf",
                    acc=dtypes.tract_name(cd), output="", out_dtype=cd,
                    out_shape=[x.shape[0], bins, n_frames])
        parts.append(g.unsqueeze(part, [3]))
    out = g.cast(g.concat(parts, 3), d)
    return out if self.rank == 2 else g.squeeze(out, [0])
