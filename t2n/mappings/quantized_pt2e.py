"""The quantize/dequantize ops of PyTorch 2 export quantization (``quantized_decomposed::``,
defined in ``torch.ao.quantization.fx._decomposed``), which torchao's ``convert_pt2e`` writes
around the float ops of a model quantized with ``X86InductorQuantizer``,
``XNNPACKQuantizer`` or any other pt2e quantizer.

Such a model is the reference representation of its int8 computation: each activation is
quantized to integers and dequantized again (``dequantize(quantize(x))``), each weight is a
stored int8 tensor dequantized in the graph, and the convolutions and linear layers compute
in float on the dequantized values. PyTorch runs exactly that in eager mode, so t2n writes
exactly that: the integers go through tract as integers (``tract_core_round_even`` then a
cast), the weights are stored as int8 (the walker does not fold their dequantization:
:func:`t2n.walk.registry.stores_integers`) and tract dequantizes them once when it loads the
model. Each op follows the kernel's float32 steps (``x * (1 / scale)`` rounded to float32,
then rounded half to even; ``(q - zero_point) * scale``), so tract's integers equal
PyTorch's except where the float ops before a quantization sum in another order and the
value lies within a rounding of a tie: the check accepts one quantization step on outputs
dequantized from integers, as for torch.ao models (:mod:`t2n.mappings.quantized`).

Dynamic quantization (``is_dynamic=True``) computes the scale and zero point of each input
at run time (``choose_qparams.tensor``): min/max with 0 included, as
``torch.ao.quantization.utils.determine_qparams`` does in float32.
"""

from __future__ import annotations

import torch

from t2n import dtypes
from t2n.mappings.helpers.round_by_adds import rounded_plus
from t2n.walk.registry import aten, stores_integers

_NS = "quantized_decomposed::"
# (int32 is left out: its bounds are not float32 numbers, and the clamp is in float32)
_INTEGERS = (torch.uint8, torch.int8, torch.int16)


def _dtype(dtype):
    """A dtype argument as a torch dtype (the trace passes ScalarType codes)."""
    return dtypes.from_scalar_type(dtype) if isinstance(dtype, int) else dtype


def _qdtype(g, dtype):
    dtype = _dtype(dtype)
    if dtype not in _INTEGERS:
        raise g.error(f"dtype: {dtype} quantized values are not supported "
                      "(uint8, int8, int16)")
    return dtype


def _param(g, v, dtype):
    """A scale or zero point: a Python number as ``dtype``'s literal, a one-element tensor
    (a constant, or computed at run time by ``choose_qparams``) as a ``dtype`` scalar."""
    if not hasattr(v, "shape"):
        return g.const(v, dtype)
    if v.rank and any(d != 1 for d in v.shape):
        raise g.error(f"expected a one-element scale or zero point, got shape {list(v.shape)}")
    return g.cast(g.reshape(v, []) if v.rank else v, dtype)


def _step(v) -> float | None:
    """The quantization step of a per-tensor scale known at export time."""
    if not hasattr(v, "shape"):
        return float(v)
    return float(v.value.reshape(-1)[0]) if getattr(v, "is_const", False) else None


def _rounded(g, y, zero_point, quant_min, quant_max, dtype):
    """``clamp(round_half_even(y) + zero_point, quant_min, quant_max)`` as ``dtype``."""
    ft = y.dtype  # float32, or float64 where PyTorch computes in it (float64 scales)
    if ft == torch.float32:  # zero points lie within [quant_min, quant_max]
        y = rounded_plus(g, y, g.cast(zero_point, ft), (quant_min, quant_max))
    else:
        y = g.binary("add", _round_half_even(g, y), g.cast(zero_point, ft), ft)
    y = g.binary("min", g.binary("max", y, g.const(float(quant_min), ft), ft),
                 g.const(float(quant_max), ft), ft)
    return g.cast(y, _qdtype(g, dtype))


def _round_half_even(g, y):
    """torch.round. tract's ``tract_core_round_even`` takes float32 (and float16) only; a
    float64 value is rounded from its floor: up past one half, and at exactly one half to
    the even neighbour (``y - floor(y)`` and ``floor(y) mod 2`` are exact in float64)."""
    if y.dtype != torch.float64:
        return g.op("tract_core_round_even", y)
    f64 = torch.float64
    f = g.op("floor", y)
    frac = g.binary("sub", y, f, f64)
    odd = g.binary("sub", f, g.binary("mul", g.op("floor", g.binary("mul", f, 0.5, f64)),
                                      2.0, f64), f64)
    up = g.cast(g.binary("gt", frac, 0.5, f64, out_dtype=torch.bool), f64)
    tie = g.cast(g.binary("eq", frac, 0.5, f64, out_dtype=torch.bool), f64)
    return g.binary("add", f, g.binary("add", up, g.binary("mul", tie, odd, f64), f64), f64)


def _inverse(g, scale):
    """``1.0 / scale`` as the kernel multiplies by it: computed in float64 from the scale,
    then rounded to float32 (PyTorch's scalar of a float32 multiplication). A run-time
    scale is a float32 value, and float32's division of 1 by it rounds to the same number
    (a quotient rounded to float64 first, then to float32, is rounded correctly)."""
    known = _step(scale)
    if known is not None:  # a number, or a constant tensor (the ``.tensor`` overloads)
        return g.const(1.0 / known, torch.float32)
    s = _param(g, scale, torch.float32)
    return g.binary("div", g.const(1.0, torch.float32), s, torch.float32)


@aten(_NS + "quantize_per_tensor")
def quantize_per_tensor(g, input, scale, zero_point, quant_min, quant_max, dtype):
    """All three overloads (scale and zero point as numbers, as tensors; ``tensor2``: the
    bounds as tensors too)."""
    quant_min, quant_max = _bound(g, quant_min), _bound(g, quant_max)
    x = g.binary("mul", g.cast(input, torch.float32), _inverse(g, scale), torch.float32)
    return _rounded(g, x, _param(g, zero_point, torch.float32), quant_min, quant_max, dtype)


def _bound(g, v):
    if hasattr(v, "shape"):
        if not getattr(v, "is_const", False):
            raise g.error("quant_min/quant_max computed at run time are not supported")
        return int(v.value.reshape(-1)[0])
    return int(v)


@aten(_NS + "dequantize_per_tensor")
@stores_integers
def dequantize_per_tensor(g, input, scale, zero_point, quant_min, quant_max, dtype,
                          out_dtype=None):
    """``(input.to(out_dtype) - zero_point) * scale``. An output dequantized with a scale
    known at export time may differ from PyTorch's by that one step (see the module)."""
    f32 = torch.float32
    _qdtype(g, dtype)
    x = g.binary("sub", g.cast(input, f32), _param(g, zero_point, f32), f32)
    out = g.cast(g.binary("mul", x, _param(g, scale, f32), f32), _dtype(out_dtype) or f32)
    if input.is_const and _step(scale) is not None:  # a weight (XNNPACK per-tensor): known
        zp = _step(zero_point) or 0.0
        _record_bound(g, out, (input.value.float() - zp) * _step(scale))
        return out
    step = _step(scale)
    if step is not None:
        g.session.quantized.steps[id(out)] = step
    return out


def _per_axis(g, v, axis: int, rank: int, dtype):
    """A per-channel vector shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    shape = [1] * rank
    shape[axis] = -1
    if not hasattr(v, "shape"):
        raise g.error(f"expected a tensor of per-channel parameters, got {v!r}")
    return g.reshape(g.cast(v, dtype), shape)


@aten(_NS + "quantize_per_channel")
def quantize_per_channel(g, input, scales, zero_points, axis, quant_min, quant_max, dtype):
    """``clamp(round(input * (1.0 / scales)) + zero_points)``: the reciprocal of each scale
    and the product in the scales' dtype (float32, or float64: PyTorch promotes the float32
    input to it)."""
    f32 = torch.float32
    axis = axis % input.rank
    sdtype = scales.dtype if scales.dtype in (f32, torch.float64) else f32
    inv = g.binary("div", g.const(1.0, sdtype), _per_axis(g, scales, axis, input.rank, sdtype),
                   sdtype)
    x = g.binary("mul", g.cast(g.cast(input, f32), sdtype), inv, sdtype)
    return _rounded(g, x, _per_axis(g, zero_points, axis, input.rank, sdtype), quant_min,
                    quant_max, dtype)


@aten(_NS + "dequantize_per_channel")
@stores_integers
def dequantize_per_channel(g, input, scales, zero_points, axis, quant_min, quant_max, dtype,
                           out_dtype=None):
    """``(input - zero_points) * scales`` along ``axis``: the difference of integers is exact,
    the product in the scales' dtype, then ``out_dtype``. On a weight (the usual case) the
    int8 tensor is stored and tract computes this once, when it loads the model."""
    f32 = torch.float32
    _qdtype(g, dtype)
    axis = axis % input.rank
    sdtype = scales.dtype if scales.dtype in (torch.float32, torch.float64) else f32
    x = g.cast(input, sdtype)
    if zero_points is not None and not _all_zero(zero_points):
        x = g.binary("sub", x, _per_axis(g, zero_points, axis, input.rank, sdtype), sdtype)
    x = g.binary("mul", x, _per_axis(g, scales, axis, input.rank, sdtype), sdtype)
    out = g.cast(x, _dtype(out_dtype) or f32)
    if input.is_const and scales.is_const and (zero_points is None or zero_points.is_const):
        shape = [1] * input.rank
        shape[axis] = -1
        w = input.value.double()
        if zero_points is not None:
            w = w - zero_points.value.double().reshape(shape)
        _record_bound(g, out, w * scales.value.double().reshape(shape))
    return out


def _all_zero(t) -> bool:
    return getattr(t, "is_const", False) and not bool(t.value.any())


@aten(_NS + "choose_qparams", _NS + "choose_qparams_symmetric")
def choose_qparams(g, input, quant_min, quant_max, eps, dtype):
    """The scale (float64) and zero point (int64) of a run-time input, as
    ``determine_qparams`` computes them in float32 from ``aminmax(input)`` with 0 included:
    affine ``(max - min) / (qmax - qmin)`` and ``qmin - round(min / scale)`` clamped;
    symmetric ``max(-min, max) / ((qmax - qmin) / 2)`` and 0 (128 for uint8)."""
    f32 = torch.float32
    x = g.cast(input, f32)
    axes = list(range(x.rank))
    lo = g.binary("min", g.reduce("min_reduce", x, axes, False), g.const(0.0, f32), f32)
    hi = g.binary("max", g.reduce("max_reduce", x, axes, False), g.const(0.0, f32), f32)
    lo, hi = g.reshape(lo, [1]), g.reshape(hi, [1])
    eps = g.const(float(torch.tensor(eps, dtype=f32)), f32)
    if g.node.op.endswith("_symmetric"):
        top = g.binary("max", g.op("neg", lo), hi, f32)
        scale = g.binary("div", top, g.const(float(quant_max - quant_min) / 2, f32), f32)
        scale = g.binary("max", scale, eps, f32)
        zp = g.const(torch.full([1], 128 if _dtype(dtype) == torch.uint8 else 0, dtype=torch.int64))
    else:
        scale = g.binary("div", g.binary("sub", hi, lo, f32),
                         g.const(float(quant_max - quant_min), f32), f32)
        scale = g.binary("max", scale, eps, f32)
        r = g.op("tract_core_round_even", g.binary("div", lo, scale, f32))
        zp = g.binary("sub", g.const(float(quant_min), f32), r, f32)
        zp = g.binary("min", g.binary("max", zp, g.const(float(quant_min), f32), f32),
                      g.const(float(quant_max), f32), f32)
        zp = g.cast(zp, torch.int64)
    return g.cast(scale, torch.float64), zp


def _record_bound(g, t, values: torch.Tensor) -> None:
    """The largest magnitude of a dequantized weight, for the check's step carried through
    the products that use it (t2n/walk/quant_steps.py)."""
    g.session.quantized.bounds[id(t)] = float(values.abs().max()) if values.numel() else 0.0
