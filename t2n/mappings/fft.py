"""Real-output FFTs of real inputs (``fft_irfft``/``irfft2``/``irfftn``,
``fft_hfft``/``hfft2``/``hfftn``) and the real-view STFT (``stft(return_complex=False)``).

A real input is a spectrum with zero imaginary part: these are the complex table's
mappings (``t2n/mappings/complex_fft.py``, tract's ``tract_core_fft``), called through the
registry; ``hfft*`` of a real input is ``irfft*`` of itself (its own conjugate) with the
normalisation direction swapped. The real-view STFT is the (re, im) form of the complex one
(``tract_core_stft``) when its window is a constant; a window computed from the inputs is
applied to frames gathered at constant indices before a DFT contraction with constant
cos/-sin matrices (static signal length; the matrices are ``n_fft`` square, whatever the
length).
"""

from __future__ import annotations

import numpy as np
import torch

from t2n import dtypes
from t2n.walk import registry
from t2n.walk.registry import aten

_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}
# accumulate in f64 when a transform is long enough for f32 sums to drift
_F64_FROM = 64


def _complex_table(name: str):
    """The complex table's mapping of ``name``: a real input is a spectrum with zero
    imaginary part, transformed by tract's FFT op."""
    return registry.lookup_complex(name)


@aten("fft_irfft")
def fft_irfft(g, self, n=None, dim=-1, norm=None):
    return _complex_table("fft_irfft")(g, self, n, dim, norm)


@aten("fft_irfft2", "fft_irfftn")
def fft_irfftn(g, self, s=None, dim=None, norm=None):
    return _complex_table("fft_irfftn")(g, self, s, dim, norm)


@aten("fft_hfft")
def fft_hfft(g, self, n=None, dim=-1, norm=None):
    return _complex_table("fft_hfft")(g, self, n, dim, norm)


@aten("fft_hfft2", "fft_hfftn")
def fft_hfftn(g, self, s=None, dim=None, norm=None):
    """``hfftn`` of a real input is ``irfftn`` of itself (its own conjugate) with the
    normalisation direction swapped."""
    norm = norm or "backward"
    if norm not in _SWAP:
        raise g.error(f"norm: {norm!r} is not 'backward', 'forward' or 'ortho'")
    return _complex_table("fft_irfftn")(g, self, s, dim, _SWAP[norm])


@aten("stft")
def stft(g, self, n_fft, hop_length=None, win_length=None, window=None, normalized=False,
         onesided=None, return_complex=None, align_to_window=None):
    """``return_complex=False``: a real ``[..., freq, frames, 2]`` tensor. ``center``
    padding is done by ``torch.stft`` before this op (a traced ``pad``)."""
    if window is None or window.is_const:
        z = registry.lookup_complex("stft")(g, self, n_fft, hop_length, win_length, window,
                                            normalized, onesided, True, align_to_window)
        return g.op("copy", z)  # the same pairs, as a real tensor
    return _stft_of_runtime_window(g, self, n_fft, hop_length, win_length, window,
                                   normalized, onesided, align_to_window)


def _stft_of_runtime_window(g, self, n_fft, hop_length, win_length, window, normalized,
                            onesided, align_to_window):
    """Frames are a gather of constant indices, the window a product, the DFT two
    contractions with constant cos/-sin matrices (tract's STFT takes constant windows
    only)."""
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
