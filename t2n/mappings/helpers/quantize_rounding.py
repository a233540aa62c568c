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


@functools.lru_cache(maxsize=None)
def average_rounded_off_zero_point(op: str, rank: int, channels_last: bool) -> bool:
    # ``op``: the aten name, "adaptive_avg_pool2d global" for an output of size 1
    """Whether this torch's quantized ``op`` (an average of integers that keeps the input's
    scale and zero point) rounds ``average - zero_point`` half to even and adds the zero point
    back, rather than rounding the average itself. The two differ at exact ties when the zero
    point is odd. PyTorch's kernels are not uniform here: measured on x86, torch 2.13 rounds
    the average in its NCHW pools and the offset one in channels-last avg_pool2d and in
    avg_pool3d; torch 2.14's channels-last kernels (a quantized convolution's output is
    channels-last) all round the offset one. So the running torch is asked, once per op,
    rank and layout, on two draws of 4 x 64 x 4... integers with zero point 47 (dozens of ties). A kernel
    matching neither form keeps the plain rounding, which the export check then reports at
    ties: measured so on both versions for channels-last ``mean`` and
    ``adaptive_avg_pool3d``, whose ties go either way (not reproduced yet)."""
    fn = _averages().get(op)
    if fn is None or (channels_last and rank not in (4, 5)):
        return False
    shape = (4, 64) + (4,) * (rank - 2)
    return all(_offset_on(fn, shape, rank, channels_last, seed) for seed in (3, 4))


def _offset_on(fn, shape, rank, channels_last, seed) -> bool:
    ints = torch.randint(0, 256, shape, generator=torch.Generator().manual_seed(seed),
                         dtype=torch.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch._make_per_tensor_quantized_tensor(ints, 0.03, 47)
        if channels_last:
            q = q.contiguous(memory_format=torch.channels_last if rank == 4
                             else torch.channels_last_3d)
        got = fn(q).int_repr().to(torch.float64)
    exact = fn(ints.to(torch.float64))
    offset = torch.round(exact - 47) + 47  # torch.round: half to even
    return bool(torch.equal(got, offset)) and not torch.equal(offset, torch.round(exact))
