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
The dynamic layers (``quantized::linear_dynamic``) quantize their input in a kernel of their
own, so they are asked on their own (``dynamic_zero_point_rounded_with_product``).

torch 2.14's separate form also adds the zero point to an int32 that wraps: a product at
or below ``-2**31`` (``-inf`` included) plus a negative zero point becomes a large positive
number, so it quantizes to the type's maximum (torch <= 2.13 gives the minimum). That too is
asked (``wraps_below_int32``) and reproduced (``int32_wrapped``).
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


@functools.lru_cache(maxsize=None)
def wraps_below_int32() -> bool:
    """Whether this torch's ``quantize_per_tensor`` turns a product at or below ``-2**31``
    plus a negative zero point into the type's maximum (an int32 that wraps)."""
    x = torch.tensor([-2.0 ** 31, -1e10, float("-inf")], dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch.quantize_per_tensor(x, 1.0, -3, torch.qint8).int_repr().tolist()
    return q == [127, 127, 127]


def int32_wrapped(g, product, zero_point: int):
    """``product`` (float32 ``x * inv``) with the values whose int32 sum with a negative
    ``zero_point`` wraps in this torch moved to ``+2**31``, which clamps to the maximum as
    the wrapped sum does; ``product`` itself elsewhere."""
    if zero_point >= 0 or not wraps_below_int32():
        return product
    f32 = torch.float32
    below = g.binary("le", product, -(2.0 ** 31), f32, out_dtype=torch.bool)
    return g.op("select", below, g.scalar(2.0 ** 31, f32), product, out_dtype=f32)


def dynamic_zero_point_rounded_with_product(qmax: int) -> bool | None:
    """The same question for the input quantization of ``quantized::linear_dynamic`` on the
    selected quantized engine with ``qmax`` levels (127: ``reduce_range``): True when it
    rounds ``fma(x, inv, zero_point)``, False when ``round(x * inv) + zero_point``, None for
    neither. Asked with an input of range -1 .. 2 (its scale and zero point follow from it)
    and 16 values near rounding ties where the two forms differ; an identity weight returns
    the integers: ``(q - zero_point) * c``, with ``c`` read from the range's two ends."""
    return _dynamic_form(torch.backends.quantized.engine, qmax)


@functools.lru_cache(maxsize=None)
def _dynamic_form(engine: str, qmax: int) -> bool | None:
    raw = 3.0 / qmax  # the range -1 .. 2, in double as PyTorch chooses it
    scale = torch.tensor(raw, dtype=torch.float32)
    zero_point = float(min(max(round(1.0 / raw), 0), qmax))
    inv = torch.tensor(1.0, dtype=torch.float32) / scale
    ties = (torch.arange(1, qmax - 1, dtype=torch.float64) - zero_point + 0.5) * float(scale)
    near = torch.cat([ties.to(torch.float32) * (1 + k * 2.0 ** -23) for k in (1, -1, 2, -2)])
    near = near[near.abs() < 1].to(torch.float32)
    fused = torch.round((near.double() * float(inv) + zero_point).float())
    separate = torch.round(near * inv) + zero_point
    probe = near[fused != separate][:16]
    if probe.numel() == 0:
        return None
    x = torch.cat([torch.tensor([-1.0, 2.0]), probe])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = torch.quantize_per_tensor(torch.eye(x.numel()), 1 / 127, 0, torch.qint8)
        packed = torch.ops.quantized.linear_prepack(w, None)
        y = torch.ops.quantized.linear_dynamic(x[None], packed, qmax == 127)[0].double()
    c = (y[1] - y[0]) / qmax
    q = torch.round((y[2:] - y[0]) / c)
    if torch.equal(q, fused[fused != separate][:16].double()):
        return True
    if torch.equal(q, separate[fused != separate][:16].double()):
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
