"""Complex tensors in their real form, shared by the complex op families.

A complex handle (``Tensor.complex``) is a float tensor of PyTorch's shape plus a trailing
axis of 2 holding (re, im), tract's own convention for ``tract_core_fft``/``tract_core_stft``.
This module is the one place that knows that layout: split into parts, build from parts,
turn a real operand complex, map a PyTorch dim to the real-form axis, run a mapping of the
real table on the real form (layout ops), and the FFT/STFT primitives with PyTorch's
normalisations.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from t2n import dtypes
from t2n.walk import registry
from t2n.walk.tensors import Tensor, marked_complex

marked = marked_complex  # a fresh op result of shape [..., 2] as a complex handle


def rank(z: Tensor) -> int:
    """PyTorch's rank of a complex handle."""
    return z.rank - 1


def axis(z_rank: int, dim: int) -> int:
    """A PyTorch dim (negative counts from the end) of a rank-``z_rank`` complex tensor, as
    an axis of its real form (the pair axis stays last)."""
    return dim % max(z_rank, 1)


def part_dtype(g) -> torch.dtype:
    """The parts' dtype of the node's (complex) output."""
    d = dtypes.complex_part(g.out_dtype())
    if d is None:
        raise g.error(f"dtype {g.out_dtype()} is not supported (complex64 and complex128 are)")
    return d


def parts(g, z: Tensor) -> tuple[Tensor, Tensor]:
    """(re, im) of a complex handle, each of PyTorch's shape."""
    last = z.rank - 1
    re = g.squeeze(g.slice(z, last, 0, 1), [last])
    im = g.squeeze(g.slice(z, last, 1, 2), [last])
    return re, im


def real_part(g, z: Tensor) -> Tensor:
    return g.squeeze(g.slice(z, z.rank - 1, 0, 1), [z.rank - 1])


def make(g, re: Tensor, im: Tensor, dtype: torch.dtype) -> Tensor:
    """The complex handle ``re + i im`` (broadcast to a common shape)."""
    re, im = g.cast(re, dtype), g.cast(im, dtype)
    r = max(re.rank, im.rank)
    re, im = g.unsqueeze_to_rank(re, r), g.unsqueeze_to_rank(im, r)
    shape = [a if not (isinstance(a, int) and a == 1) else b for a, b in zip(re.shape, im.shape)]
    re, im = g.broadcast_to(re, shape), g.broadcast_to(im, shape)
    return marked(g.concat([g.unsqueeze(re, [r]), g.unsqueeze(im, [r])], r))


def complex_arg(g, v, dtype: torch.dtype) -> Tensor:
    """A complex handle of parts ``dtype`` from a complex handle, a real tensor or a Python
    number (a real value gets a zero imaginary part)."""
    if isinstance(v, Tensor) and v.complex:
        return v if v.dtype == dtype else marked(g.cast(v, dtype))
    if isinstance(v, complex):
        t = g.const(torch.tensor([v.real, v.imag], dtype=dtype))
        return Tensor(t.name, t.shape, t.dtype, value=t.value, literal=t.literal, complex=True)
    x = g.as_tensor(v, dtype)
    return make(g, x, g.zeros_like(x), dtype)


def real_mapping(g, name: str, *args):
    """Run the real table's mapping ``name`` inside a complex node: it sees the node's
    complex outputs as their real forms (shape + [2], the parts' dtype)."""
    node = g.node
    if node is not None:
        g.node = dataclasses.replace(
            node, out_shapes=[None if s is None else list(s) + [2] for s in node.out_shapes],
            out_dtypes=[dtypes.complex_part(d) if d is not None and d.is_complex else d
                        for d in node.out_dtypes])
    try:
        return registry.lookup(name)(g, *args)
    finally:
        g.node = node


def on_real_form(g, name: str, z: Tensor, *args):
    """Run the real table's layout mapping ``name`` on the real form of ``z`` (dims already
    mapped with ``axis``); the results are complex again."""
    out = real_mapping(g, name, z, *args)
    if isinstance(out, (list, tuple)):
        return type(out)(marked(o) for o in out)
    return marked(out)


def size_scalar(g, n, dtype: torch.dtype, power: float) -> Tensor:
    """``n ** power`` as a rank-0 tensor; ``n`` may be a symbolic size."""
    if isinstance(n, int):
        return g.scalar(float(n) ** power, dtype)
    v = g.dim_scalar(n, dtype)
    if power == -1.0:
        return g.binary("div", g.scalar(1.0, dtype), v, dtype)
    return g.binary("div", g.scalar(1.0, dtype), g.op("sqrt", v), dtype)


def scale_by(g, z: Tensor, n, norm: str, inverse: bool) -> Tensor:
    """Apply PyTorch's ``norm`` for a transform over ``n`` points (``n`` the product of the
    transformed lengths): 'backward' divides the inverse, 'forward' the forward transform,
    'ortho' both by sqrt(n)."""
    if norm == "ortho":
        f = size_scalar(g, n, z.dtype, -0.5)
    elif (norm == "backward") == inverse:
        f = size_scalar(g, n, z.dtype, -1.0)
    else:
        return z
    return marked(g.binary("mul", z, f, z.dtype)) if z.complex else g.binary("mul", z, f, z.dtype)


def fft(g, z: Tensor, ax: int, inverse: bool) -> Tensor:
    """tract's unnormalised DFT along real-form axis ``ax`` (``e^{-2 pi i jk/n}``; the
    inverse uses ``e^{+...}`` and does not divide)."""
    return marked(g.op("tract_core_fft", z, axis=ax, inverse=bool(inverse),
                       out_shape=list(z.shape), out_dtype=z.dtype))


def fit_length(g, z: Tensor, ax: int, n: int | None) -> Tensor:
    """``z`` trimmed or zero padded at the end of axis ``ax`` to ``n`` (PyTorch's FFT ``n``
    / ``s``)."""
    have = z.shape[ax]
    if n is None or (isinstance(have, int) and have == n):
        return z
    if not isinstance(have, int):
        raise g.error(f"n/s: axis {ax} has a dynamic size; trimming or padding it to {n} "
                      "needs its size (leave n/s at None for dynamic axes)")
    if have > n:
        return marked(g.slice(z, ax, 0, n)) if z.complex else g.slice(z, ax, 0, n)
    shape = list(z.shape)
    shape[ax] = n
    pairs = [(0, 0)] * z.rank
    pairs[ax] = (0, n - have)
    out = g.op("pad", z, padding=pairs, border="constant", value=0.0, out_shape=shape,
               out_dtype=z.dtype)
    return marked(out) if z.complex else out


def floor_size(n, k: int, plus: int = 0):
    """``n // k + plus`` for a static or symbolic size."""
    if isinstance(n, int):
        return n // k + plus
    import sympy

    return sympy.floor(sympy.sympify(n) / k) + plus


def stft(g, z: Tensor, n_fft: int, hop: int, window: torch.Tensor) -> Tensor:
    """Frames of ``z`` ([B, L] complex) every ``hop`` samples, times ``window`` (n_fft
    values), DFT of each: ``[B, frames, n_fft]`` complex (tract_core_stft; its frame count
    ``(L - n_fft) // hop + 1`` stays symbolic for a dynamic length)."""
    frames = floor_size(z.shape[1] - n_fft, hop, 1)
    w = g.const(window.to(z.dtype).contiguous())
    shape = [z.shape[0], frames, n_fft, 2]
    return marked(g.op("tract_core_stft", z, axis=1, frame=n_fft, stride=hop, window=w,
                       out_shape=shape, out_dtype=z.dtype))


__all__ = ["marked", "rank", "axis", "part_dtype", "parts", "real_part", "make",
           "complex_arg", "real_mapping", "on_real_form", "size_scalar", "scale_by", "fft", "fit_length",
           "floor_size", "stft", "overlap_add"]


def overlap_add(g, frames: Tensor, hop: int) -> Tensor:
    """``[B, T, n]`` real frames added at offsets ``t * hop``: ``[B, n + hop * (T - 1)]``
    (the inverse of framing; ``T`` may be symbolic). With ``q = gcd(n, hop)`` a frame is
    ``n / q`` blocks of ``q`` samples and frames start every ``hop / q`` blocks: block ``j``
    of every frame is spread out by ``hop / q`` (zeros between), shifted by ``j`` blocks and
    summed, ``n / q`` products whatever ``T``."""
    b, t, n = frames.shape
    q = math.gcd(n, hop)
    a, h = n // q, hop // q
    blocks = g.reshape(frames, [b, t, a, q])
    total = t * h + a - h  # output length in blocks
    out = None
    for j in range(a):
        x = g.squeeze(g.slice(blocks, 2, j, j + 1), [2])  # [B, T, q]
        if h > 1:
            zeros = g.broadcast_to(g.scalar(0.0, x.dtype), [b, t, h - 1, q])
            x = g.reshape(g.concat([g.unsqueeze(x, [2]), zeros], 2), [b, t * h, q])
        back = a - h - j
        x = g.op("pad", x, padding=[(0, 0), (j, max(back, 0)), (0, 0)], border="constant",
                 value=0.0, out_shape=[b, t * h + j + max(back, 0), q], out_dtype=x.dtype)
        if back < 0:
            x = g.slice(x, 1, 0, total)
        out = x if out is None else g.binary("add", out, x, x.dtype)
    return g.reshape(out, [b, total * q])
