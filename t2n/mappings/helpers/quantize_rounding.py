"""How this PyTorch's ``quantize_per_tensor`` rounds on x86, found by asking it.

Both forms multiply by ``1.f / float(scale)`` in float32 and round half to even; they differ
in where the zero point is added:

- fused (torch <= 2.13, fbgemm's ``Quantize``): ``round(fma(x, inv, zero_point))``, the
  product and the sum rounded once;
- separate (torch 2.14): ``round(x * inv) + zero_point``, the product rounded first.

They disagree on about 1 value in 400 k, which a deep quantized network grows into steps
of its output. Which kernel a torch build runs is not something its version alone tells
(build variants differ in their kernels), so the answer comes from the running torch: five
values where the two forms give different integers (found among 2 M random values), scale
0.0371 and zero point 57. A torch matching neither form is refused rather than guessed.
"""

from __future__ import annotations

import functools
import warnings

import torch

_SCALE, _ZERO_POINT = 0.0371, 57
# x, fused integer, separate integer
_PROBE = ((float.fromhex("0x1.74c7e2p+1"), 136, 135), (float.fromhex("0x1.0c4ea4p+1"), 114, 113),
          (float.fromhex("0x1.48dab8p+2"), 196, 195), (float.fromhex("0x1.4c6a80p-1"), 74, 75),
          (float.fromhex("0x1.c322d0p+0"), 104, 105))


@functools.lru_cache(maxsize=None)
def zero_point_rounded_with_product() -> bool | None:
    """True: fused form; False: separate form; None: neither (unknown kernel)."""
    x = torch.tensor([p[0] for p in _PROBE], dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors' deprecation notice (torch 2.14)
        q = torch.quantize_per_tensor(x, _SCALE, _ZERO_POINT, torch.quint8).int_repr().tolist()
    if q == [p[1] for p in _PROBE]:
        return True
    if q == [p[2] for p in _PROBE]:
        return False
    return None


# ---------------------------------------------------------------------------- averages
def _averages():
    import torch.nn.functional as F

    spatial = lambda t: tuple(range(2, t.dim()))  # noqa: E731
    return {"avg_pool1d": lambda t: F.avg_pool1d(t, 2),
            "avg_pool2d": lambda t: F.avg_pool2d(t, 2),
            "avg_pool3d": lambda t: F.avg_pool3d(t, 2),
            "adaptive_avg_pool1d": lambda t: F.adaptive_avg_pool1d(t, 2),
            "adaptive_avg_pool2d": lambda t: F.adaptive_avg_pool2d(t, 2),
            "adaptive_avg_pool3d": lambda t: F.adaptive_avg_pool3d(t, 2),
            "adaptive_avg_pool1d global": lambda t: F.adaptive_avg_pool1d(t, 1),
            "adaptive_avg_pool2d global": lambda t: F.adaptive_avg_pool2d(t, 1),
            "adaptive_avg_pool3d global": lambda t: F.adaptive_avg_pool3d(t, 1),
            "mean": lambda t: t.mean(spatial(t), keepdim=True)}


def average_rounded_off_zero_point(op: str, rank: int, channels_last: bool,
                                   channels: int | None) -> tuple[bool, ...] | bool:
    # ``op``: the aten name, "adaptive_avg_pool2d global" for an output of size 1
    """Whether this torch's quantized ``op`` (an average of integers that keeps the input's
    scale and zero point) rounds ``average - zero_point`` half to even and adds the zero point
    back, rather than rounding the average itself: one answer per channel (a tuple of
    ``channels``), or one for all (a bool) when the count is not static. The two forms
    differ at exact ties when the zero point is odd.

    PyTorch's kernels are not uniform here. Measured on x86 (torch 2.13, AVX-512): the
    channels-last avg_pool2d and both avg_pool3d kernels run the offset form on whole vectors
    of 16 channels and the plain form on the channels left over (24 channels: 16 offset, 8
    plain; 64: all offset); with AVX2 the vector covers them all, without vectors none; the
    NCHW 2-d pools round the average; qnnpack's kernels differ again; torch 2.14's
    channels-last kernels all round the offset one. So the running torch is asked, once per
    op, rank, layout, channel count and quantized engine, on integers whose every average is
    an exact tie (``a`` and ``a + 1`` alternate along the last axis). A channel matching
    neither form keeps the plain rounding, which the export check then reports at ties:
    measured so for ``mean`` and channels-last ``adaptive_avg_pool3d``, whose ties go either
    way (not reproduced yet)."""
    modes = _offset_channels(op, rank, channels_last, channels if channels else 64,
                             torch.backends.quantized.engine)
    return modes if channels else all(modes)


@functools.lru_cache(maxsize=None)
def _offset_channels(op, rank, channels_last, channels, engine) -> tuple[bool, ...]:
    fn = _averages().get(op)
    if fn is None or (channels_last and rank not in (4, 5)):
        return (False,) * channels
    shape = (2, channels) + (4,) * (rank - 2)
    base = torch.tensor([100, 131], dtype=torch.int32).reshape((2,) + (1,) * (rank - 1))
    ints = (base + torch.arange(4, dtype=torch.int32) % 2).expand(shape).to(torch.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch._make_per_tensor_quantized_tensor(ints.contiguous(), 0.03, 47)
        if channels_last:
            q = q.contiguous(memory_format=torch.channels_last if rank == 4
                             else torch.channels_last_3d)
        got = fn(q).int_repr().to(torch.float64)
    exact = fn(ints.to(torch.float64))
    offset = torch.round(exact - 47) + 47  # torch.round: half to even
    per_channel = (got == offset).transpose(0, 1).reshape(channels, -1).all(1)
    return tuple(bool(b) for b in per_channel)
