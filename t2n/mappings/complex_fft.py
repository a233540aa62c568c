"""FFTs and the STFT with complex results or complex inputs, on tract's FFT op.

Every transform is ``tract_core_fft`` (one op per transformed axis, O(n log n) in tract,
nothing in the archive grows with the length) on the (re, im) real form of
``t2n/mappings/helpers/complex.py``, then PyTorch's ``norm`` as one product:

* ``fft``/``ifft``/``fftn``/``ifftn`` (and ``2``): each input axis trimmed or zero padded to
  ``n``/``s``, a real input given a zero imaginary part;
* ``rfft``/``rfftn``: the full transform of the real input, the last axis cut to its
  ``n // 2 + 1`` non-negative frequencies; ``ihfft``/``ihfftn`` are its conjugate with the
  inverse scale;
* ``irfft``/``irfftn``: the other axes by the inverse complex transform, then the last: the
  half spectrum trimmed or padded to ``n // 2 + 1`` bins, weighted 1 for the DC (and even
  ``n``'s Nyquist) bin and 2 for the others (each stands for its Hermitian mirror), zero
  padded to ``n``, inverse-transformed, real part. That is PyTorch's c2r step, which also
  ignores the imaginary parts of the DC and Nyquist bins; ``hfft``/``hfftn`` are ``irfft``/
  ``irfftn`` of the conjugate with the forward scale;
* ``stft(return_complex=True)``: ``tract_core_stft`` (frames, window, DFT; the frame count
  stays symbolic for a dynamic length), bins on axis -2 as PyTorch lays them out, cut to the
  one-sided half for a real signal.

Lengths of transformed axes may be dynamic except where ``n``/``s`` pads or trims them and
for the output length of the c2r step (its weights and padding need ``n``).
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers import complex as C
from t2n.walk.registry import complex_variant
from t2n.walk.tensors import Tensor

_NORMS = ("backward", "forward", "ortho")
_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def _norm(g, norm):
    norm = norm or "backward"
    if norm not in _NORMS:
        raise g.error(f"norm: {norm!r} is not 'backward', 'forward' or 'ortho'")
    return norm


def _parts_dtype(g, x: Tensor) -> torch.dtype:
    """The float dtype the transform runs in: the complex output's parts, else (a real
    result) the input's."""
    out = g.out_dtype()
    if out.is_complex:
        return C.part_dtype(g)
    if out not in (torch.float32, torch.float64):
        raise g.error(f"dtype {out} is not supported for FFTs (float32/float64 are)")
    return out


def _as_complex(g, x: Tensor, d: torch.dtype) -> Tensor:
    return C.complex_arg(g, x, d)


def _plan(g, rank: int, s, dim):
    """(axes, lengths or None) with PyTorch's defaults: dims from ``s`` (its last len(s)
    axes) or all axes; a length of -1 in ``s`` means the input's."""
    s = [s] if isinstance(s, int) else (None if s is None else list(s))
    dim = [dim] if isinstance(dim, int) else (None if dim is None else list(dim))
    if dim is None:
        dim = list(range(rank - len(s), rank)) if s is not None else list(range(rank))
    axes = [C.axis(rank, d) for d in dim]
    if len(set(axes)) != len(axes):
        raise g.error(f"dim: repeated axes in {dim}")
    if s is not None and len(s) != len(axes):
        raise g.error(f"s: {s} and dim {dim} differ in length")
    lengths = [None if s is None or s[i] == -1 else s[i] for i in range(len(axes))]
    for n in lengths:
        if n is not None and (not isinstance(n, int) or n < 1):
            raise g.error(f"n/s: invalid transform length {n}")
    return axes, lengths


def _c2c(g, z: Tensor, axes, lengths, inverse: bool, norm: str) -> Tensor:
    """Complex transform of ``z`` over ``axes`` (real-form axes), each fitted to its
    length; normalised over the product of the lengths."""
    total = 1
    for a, n in zip(axes, lengths):
        z = C.fit_length(g, z, a, n)
        z = C.fft(g, z, a, inverse)
        total = total * z.shape[a]
    return C.scale_by(g, z, total, norm, inverse)


@complex_variant("fft_fft", "fft_ifft")
def fft_fft(g, self, n=None, dim=-1, norm=None):
    inverse = g.node.op.endswith("ifft")
    d = _parts_dtype(g, self)
    z = _as_complex(g, self, d)
    axes, lengths = _plan(g, C.rank(z), None if n is None else [n], [dim])
    return _c2c(g, z, axes, lengths, inverse, _norm(g, norm))


@complex_variant("fft_fft2", "fft_fftn", "fft_ifft2", "fft_ifftn")
def fft_fftn(g, self, s=None, dim=None, norm=None):
    name = g.node.op.split("::")[-1]
    if name.endswith("2") and dim is None:
        dim = [-2, -1]
    d = _parts_dtype(g, self)
    z = _as_complex(g, self, d)
    axes, lengths = _plan(g, C.rank(z), s, dim)
    return _c2c(g, z, axes, lengths, name.startswith("fft_i"), _norm(g, norm))


def _rfftn(g, x: Tensor, s, dim, norm: str, inverse_scale: bool) -> Tensor:
    if x.complex:
        raise g.error("self: rfft takes a real tensor")
    d = _parts_dtype(g, x)
    z = _as_complex(g, x, d)
    axes, lengths = _plan(g, C.rank(z), s, dim)
    if not axes:
        raise g.error("dim: at least one axis must be transformed")
    total = 1
    for a, n in zip(axes, lengths):
        z = C.fit_length(g, z, a, n)
        z = C.fft(g, z, a, False)
        total = total * z.shape[a]
    last = axes[-1]
    z = C.marked(g.slice(z, last, 0, C.floor_size(z.shape[last], 2, 1)))
    return C.scale_by(g, z, total, norm, inverse_scale)


@complex_variant("fft_rfft")
def fft_rfft(g, self, n=None, dim=-1, norm=None):
    return _rfftn(g, self, None if n is None else [n], [dim], _norm(g, norm), False)


@complex_variant("fft_rfft2", "fft_rfftn")
def fft_rfftn(g, self, s=None, dim=None, norm=None):
    if g.node.op.endswith("2") and dim is None:
        dim = [-2, -1]
    return _rfftn(g, self, s, dim, _norm(g, norm), False)


def _conj(g, z: Tensor) -> Tensor:
    re, im = C.parts(g, z)
    return C.make(g, re, g.op("neg", im), z.dtype)


@complex_variant("fft_ihfft")
def fft_ihfft(g, self, n=None, dim=-1, norm=None):
    """``conj(rfft(x)) / n`` (the inverse's scale)."""
    z = _rfftn(g, self, None if n is None else [n], [dim], _SWAP[_norm(g, norm)], False)
    return _conj(g, z)


@complex_variant("fft_ihfft2", "fft_ihfftn")
def fft_ihfftn(g, self, s=None, dim=None, norm=None):
    """``conj(rfftn(x))`` with the inverse's scale (PyTorch's inverse c2c of the conjugate
    over the other axes is the conjugate of the forward one)."""
    if g.node.op.endswith("2") and dim is None:
        dim = [-2, -1]
    return _conj(g, _rfftn(g, self, s, dim, _SWAP[_norm(g, norm)], False))


def _c2r(g, z: Tensor, ax: int, n: int | None, d) -> Tensor:
    """The real signal of length ``n`` whose one-sided spectrum is ``z`` along ``ax``
    (unnormalised, PyTorch's c2r)."""
    have = z.shape[ax]
    if n is None:
        if not isinstance(have, int):
            raise g.error("n: the output length of irfft/hfft must be static (give n)")
        n = 2 * (have - 1)
    if n < 1:
        raise g.error(f"n: invalid output length {n}")
    half = n // 2 + 1
    z = C.fit_length(g, z, ax, half)
    w = torch.full((half,), 2.0, dtype=d)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    w = w.reshape([half] + [1] * (z.rank - 1 - ax))
    z = C.marked(g.binary("mul", z, g.const(w), d))
    z = C.fit_length(g, z, ax, n)
    return C.real_part(g, C.fft(g, z, ax, True))


def _irfftn(g, self, s, dim, norm: str, conj: bool) -> Tensor:
    d = _parts_dtype(g, self)
    z = _as_complex(g, self, d)
    if conj:
        z = _conj(g, z)
    axes, lengths = _plan(g, C.rank(z), s, dim)
    if not axes:
        raise g.error("dim: at least one axis must be transformed")
    total = 1
    for a, n in zip(axes[:-1], lengths[:-1]):
        z = C.fit_length(g, z, a, n)
        z = C.fft(g, z, a, True)
        total = total * z.shape[a]
    x = _c2r(g, z, axes[-1], lengths[-1], d)
    total = total * x.shape[axes[-1]]
    return C.scale_by(g, x, total, norm, True)


@complex_variant("fft_irfft")
def fft_irfft(g, self, n=None, dim=-1, norm=None):
    return _irfftn(g, self, None if n is None else [n], [dim], _norm(g, norm), False)


@complex_variant("fft_irfft2", "fft_irfftn")
def fft_irfftn(g, self, s=None, dim=None, norm=None):
    if g.node.op.endswith("2") and dim is None:
        dim = [-2, -1]
    return _irfftn(g, self, s, dim, _norm(g, norm), False)


@complex_variant("fft_hfft")
def fft_hfft(g, self, n=None, dim=-1, norm=None):
    return _irfftn(g, self, None if n is None else [n], [dim], _SWAP[_norm(g, norm)], True)


@complex_variant("fft_hfft2", "fft_hfftn")
def fft_hfftn(g, self, s=None, dim=None, norm=None):
    """``irfftn`` of the conjugate with the forward scale (PyTorch's forward c2c over the
    other axes then conjugate is the inverse c2c of the conjugate)."""
    if g.node.op.endswith("2") and dim is None:
        dim = [-2, -1]
    return _irfftn(g, self, s, dim, _SWAP[_norm(g, norm)], True)


@complex_variant("stft")
def stft(g, self, n_fft, hop_length=None, win_length=None, window=None, normalized=False,
         onesided=None, return_complex=None, align_to_window=None):
    """``torch.stft`` of a 1-D or 2-D signal (real or complex) to ``[..., freq, frames]``
    complex. ``center`` padding is traced before this op (a ``pad``); the window must be a
    constant real tensor (tract's STFT takes it as one)."""
    if align_to_window:
        raise g.error("align_to_window=True is not supported")
    r = C.rank(self) if self.complex else self.rank
    if r not in (1, 2):
        raise g.error("self: a 1-D or 2-D signal is required")
    d = _parts_dtype(g, self)
    z = _as_complex(g, self, d)
    if C.rank(z) == 1:
        z = C.marked(g.unsqueeze(z, [0]))
    hop = hop_length if hop_length is not None else n_fft // 4
    win = win_length if win_length is not None else n_fft
    length = z.shape[1]
    if not (0 < win <= n_fft and hop > 0) or isinstance(length, int) and n_fft > length:
        raise g.error(f"n_fft={n_fft}, hop_length={hop}, win_length={win} are invalid for a "
                      f"signal of length {length}")
    if window is not None and (window.complex or not window.is_const):
        raise g.error("window: a window computed from the inputs is not supported (tract's "
                      "STFT takes a constant window)")
    left = (n_fft - win) // 2
    full = torch.zeros(n_fft, dtype=torch.float64)
    full[left:left + win] = 1.0 if window is None else window.value.to(torch.float64)
    frames = C.stft(g, z, n_fft, hop, full)  # [B, frames, n_fft, 2]
    out = C.marked(g.transpose(frames, [0, 2, 1, 3]))
    if onesided is None:
        onesided = not self.complex
    if onesided:
        out = C.marked(g.slice(out, 1, 0, n_fft // 2 + 1))
    if normalized:
        out = C.marked(g.binary("mul", out, g.scalar(n_fft ** -0.5, d), d))
    return out if r == 2 else C.marked(g.squeeze(out, [0]))


# torch.export's decomposition: the three primitive FFT ops, with ``normalization`` an int
# (0: none, 1: 1/sqrt(n), 2: 1/n over the transformed sizes)
def _normalise(g, z: Tensor, total, normalization: int) -> Tensor:
    if normalization not in (0, 1, 2):
        raise g.error(f"normalization: unknown mode {normalization}")
    if normalization == 0:
        return z
    f = C.size_scalar(g, total, z.dtype, -0.5 if normalization == 1 else -1.0)
    out = g.binary("mul", z, f, z.dtype)
    return C.marked(out) if z.complex else out


@complex_variant("_fft_r2c")
def _fft_r2c(g, self, dim, normalization, onesided):
    d = _parts_dtype(g, self)
    z = _as_complex(g, self, d)
    axes, _ = _plan(g, C.rank(z), None, dim)
    total = 1
    for a in axes:
        z = C.fft(g, z, a, False)
        total = total * z.shape[a]
    if onesided:
        z = C.marked(g.slice(z, axes[-1], 0, C.floor_size(z.shape[axes[-1]], 2, 1)))
    return _normalise(g, z, total, normalization)


@complex_variant("_fft_c2c")
def _fft_c2c(g, self, dim, normalization, forward):
    z = _as_complex(g, self, _parts_dtype(g, self))
    axes, _ = _plan(g, C.rank(z), None, dim)
    total = 1
    for a in axes:
        z = C.fft(g, z, a, not forward)
        total = total * z.shape[a]
    return _normalise(g, z, total, normalization)


@complex_variant("_fft_c2r")
def _fft_c2r(g, self, dim, normalization, last_dim_size):
    d = _parts_dtype(g, self)
    z = _as_complex(g, self, d)
    axes, _ = _plan(g, C.rank(z), None, dim)
    total = 1
    for a in axes[:-1]:
        z = C.fft(g, z, a, True)
        total = total * z.shape[a]
    if not isinstance(last_dim_size, int):
        raise g.error("last_dim_size: the output length of irfft/hfft must be static")
    x = _c2r(g, z, axes[-1], last_dim_size, d)
    return _normalise(g, x, total * last_dim_size, normalization)


@complex_variant("istft")
def istft(g, self, n_fft, hop_length=None, win_length=None, window=None, center=True,
          normalized=False, onesided=None, length=None, return_complex=False):
    """``torch.istft`` to a real signal, as PyTorch computes it: each frame the inverse
    real FFT of its (first ``n_fft // 2 + 1``) bins, times the window; frames overlap-added
    (``overlap_add``) and divided by the overlap-added squared window, trimmed by
    ``n_fft // 2`` at each end when ``center``, to ``length`` when given."""
    if return_complex:
        raise g.error("return_complex=True is not supported (a complex output)")
    if not self.complex or C.rank(self) not in (2, 3):
        raise g.error("self: a 2-D or 3-D complex spectrogram is required")
    d = _parts_dtype(g, self)
    z = C.complex_arg(g, self, d)
    if C.rank(z) == 2:
        z = C.marked(g.unsqueeze(z, [0]))
    hop = hop_length if hop_length is not None else n_fft // 4
    win = win_length if win_length is not None else n_fft
    if not (0 < win <= n_fft and 0 < hop <= win):
        raise g.error(f"n_fft={n_fft}, hop_length={hop}, win_length={win} are invalid")
    if window is not None and (window.complex or not window.is_const):
        raise g.error("window: a constant real window is required")
    left = (n_fft - win) // 2
    full = torch.zeros(n_fft, dtype=d)
    full[left:left + win] = 1.0 if window is None else window.value.to(d)
    if normalized:
        z = C.marked(g.binary("mul", z, g.scalar(n_fft ** 0.5, d), d))
    z = C.marked(g.transpose(z, [0, 2, 1, 3]))  # [B, T, F, 2]
    frames = _c2r(g, z, 2, n_fft, d)  # [B, T, n_fft]: bins past n_fft // 2 are dropped
    frames = g.binary("mul", frames, g.const(full / n_fft), d)
    b, t = frames.shape[0], frames.shape[1]
    y = C.overlap_add(g, frames, hop)
    env = C.overlap_add(g, g.broadcast_to(g.const(full * full), [1, t, n_fft]), hop)
    expected = n_fft + hop * (t - 1)
    start = n_fft // 2 if center else 0
    if length is not None:
        if not isinstance(t, int):
            raise g.error("length: with a dynamic frame count, leave length at None")
        end = start + length
    else:
        end = expected - n_fft // 2 if center else expected
    keep = end if not isinstance(end, int) or not isinstance(expected, int) \
        else min(end, expected)
    y = g.binary("div", g.slice(y, 1, start, keep), g.slice(env, 1, start, keep), d)
    if isinstance(end, int) and isinstance(expected, int) and end > expected:
        y = g.op("pad", y, padding=[(0, 0), (0, end - expected)], border="constant",
                 value=0.0, out_shape=[b, end - start], out_dtype=d)
    return y if C.rank(self) == 3 else g.squeeze(y, [0])
