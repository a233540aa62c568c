"""A torch.ao quantized tensor in the graph: its integers, their scale and zero point, and the
float32 copy of the integers a requantization leaves beside them.

A quantized tensor is its integer representation (u8 for ``quint8``, i8 for ``qint8``),
labelled with its torch dtype. Its scale and zero point live in the export session's table
(``session.quantized.params``), keyed by the tensor; ops that keep them (reshapes, max
pooling, concatenation of equal parameters) are followed back to the tensor that has them.
The integers a requantization computes exist first as exact floats (rounded and clamped);
that float, the *twin*, is kept (``session.quantized.as_float``), so a consumer computing
in float reads it instead of casting the integers back, and the cast to 8 bits disappears
when no integer op reads it.
"""

from __future__ import annotations

import torch

from t2n import dtypes
from t2n.mappings.helpers.round_by_adds import rounded_plus

RANGE = {torch.quint8: (0, 255), torch.qint8: (-128, 127), torch.qint32: (-2 ** 31, 2 ** 31 - 1)}
# ops whose output is the input's integers rearranged or selected: same scale and zero point
_KEEPS_QPARAMS = {"reshape", "squeeze", "unsqueeze", "transpose", "slice", "max_pool",
                  "tract_core_gather", "tract_core_broadcast", "copy", "concat", "pad",
                  "tract_core_downsample", "tile", "max", "nearest_upsample"}


def is_quantized(x) -> bool:
    return hasattr(x, "dtype") and x.dtype in dtypes.QUANTIZED


def set_qparams(g, t, scale: float, zero_point: int):
    g.session.quantized.params[id(t)] = (float(scale), int(zero_point))
    return t


def qparams(g, t) -> tuple[float, int]:
    """(scale, zero point) of a quantized tensor, following qparams-keeping ops back."""
    table = g.session.quantized.params
    seen = 0
    while id(t) not in table:
        op = next((o for o in reversed(g.ops) if any(x is t for x in o.outputs)), None)
        seen += 1
        if op is None or op.kind not in _KEEPS_QPARAMS or seen > 1000:
            raise g.error("the scale and zero point of a quantized tensor are unknown here "
                          f"(it comes from {op.kind if op else 'outside the graph'})")
        src = op.args[0]
        t = src[0] if isinstance(src, (list, tuple)) else src
    return table[id(t)]


def integers_as_float(g, q):
    """The integers of quantized ``q`` as float32: its twin (the same numbers, exactly)
    when it has one, else a cast."""
    twin = g.session.quantized.as_float.get(id(q))
    return twin if twin is not None else g.op("tract_core_cast", q, to="f32",
                                              out_dtype=torch.float32)


def dequantize_tensor(g, q, dtype=torch.float32):
    """``(q - zero_point) * scale`` in float32, as ``dtype``."""
    scale, zp = qparams(g, q)
    x = integers_as_float(g, q)
    if zp:
        x = g.binary("sub", x, float(zp), torch.float32)
    x = g.binary("mul", x, float(scale), torch.float32)
    return g.cast(x, dtype)


def quantize(g, x, scale: float, zero_point: int, qdtype, relu=False):
    """``clamp(round_half_even(x * (1 / scale)) + zero_point)`` as ``qdtype``'s integers (the
    inverse scale computed in double, rounded to float32)."""
    y = g.binary("mul", g.cast(x, torch.float32), float(1.0 / scale), torch.float32)
    return rounded_to(g, y, scale, zero_point, qdtype, relu)


def rounded_to(g, y, scale, add_zero_point, qdtype, relu=False, zero_point=None):
    """``clamp(round_half_even(y) + add_zero_point)`` as ``qdtype``'s integers, labelled
    with ``zero_point`` (``add_zero_point`` unless given: 0 when ``y`` holds it already);
    a ReLU raises the lower bound to the zero point (the same as ``max(q, zero_point)``
    after it). The clamped float is the result's twin."""
    zero_point = add_zero_point if zero_point is None else zero_point
    lo, hi = RANGE[qdtype]
    y = rounded_plus(g, y, int(add_zero_point), (lo, hi))
    return _clamped(g, y, max(lo, zero_point) if relu else lo, hi, qdtype, scale, zero_point)


def integers_clamped(g, q, lo: int, hi: int):
    """``clamp(q, lo, hi)`` of quantized ``q``, same scale and zero point: one clamp of its
    twin. When the twin is itself a clamp to a range holding ``lo .. hi`` (a
    requantization's), the new clamp reads what that one clamped: two clamps become one.
    Without a twin, the integers are clamped as they are."""
    x = g.session.quantized.as_float.get(id(q))
    if x is None:
        storage, (low, high) = dtypes.QUANTIZED[q.dtype], RANGE[q.dtype]
        y = q
        if lo > low:
            y = g.op("max", y, g.const(torch.tensor(lo, dtype=storage)), out_dtype=q.dtype)
        if hi < high:
            y = g.op("min", y, g.const(torch.tensor(hi, dtype=storage)), out_dtype=q.dtype)
        return set_qparams(g, y, *qparams(g, q))
    before = g.session.quantized.clamped.get(id(x))
    if before is not None and before[1] <= lo and hi <= before[2]:
        x = before[0]
    scale, zp = qparams(g, q)
    return _clamped(g, x, lo, hi, q.dtype, scale, zp)


def _clamped(g, x, lo: int, hi: int, qdtype, scale, zero_point):
    twin = g.op("clamp", x, float(lo), float(hi))
    g.session.quantized.clamped[id(twin)] = (x, lo, hi)
    q = g.op("tract_core_cast", twin, to=dtypes.tract_name(qdtype), out_dtype=qdtype)
    g.session.quantized.as_float[id(q)] = twin
    return set_qparams(g, q, scale, zero_point)


def integers_mapped(g, q, m):
    """Quantized ``q`` through ``m`` (an :class:`~t2n.mappings.helpers.quantized_maps.
    IntegerMap`): one clamp when it is one, else a lookup of its table, indexed by the
    integers (from the twin when ``q`` has one) and holding them as exact float32, which is
    the result's twin."""
    if m.clamp is not None:
        return integers_clamped(g, q, *m.clamp)
    source = g.session.quantized.as_float.get(id(q))
    index = g.op("tract_core_cast", source if source is not None else q, to="i32",
                 out_dtype=torch.int32)
    if m.lowest:
        index = g.binary("sub", index, g.scalar(m.lowest, torch.int32), torch.int32)
    table = g.const(torch.tensor(m.table, dtype=torch.float32))
    twin = g.gather(table, index, 0)
    out = g.op("tract_core_cast", twin, to=dtypes.tract_name(m.dtype), out_dtype=m.dtype)
    g.session.quantized.as_float[id(out)] = twin
    return set_qparams(g, out, m.scale, m.zero_point)


def dequantized_as_vectors(g, q):
    """``q`` dequantized as PyTorch's vectorized kernels do (``Vectorized::dequantize``):
    ``fma(q, scale, p)`` with ``p = float(scale * -zero_point)``, rounded once, which
    differs from ``(q - zero_point) * scale`` in the last bit now and then.

    Computed exactly in float32, without an fma: with ``d = q - zero_point`` (exact),
    ``q * scale + p = d * scale + e`` where ``e = p + zero_point * scale`` is ``p``'s
    rounding error, a float32 of at most 8 bits. The scale splits into ``hi`` (its 15 high
    bits) and ``lo`` (the 9 low ones): ``d * hi`` (|d| <= 255) is exact, and so is ``d * lo
    + e`` (18 bits at most), so their one float32 sum is the fused multiply-add's rounding.
    (Computing in f64 instead made ResNet-50's int8 run 1.47x slower: tract's f64
    element-wise ops do not fuse.)"""
    scale, zp = qparams(g, q)
    f32 = torch.float32
    x = integers_as_float(g, q)
    if not zp:
        return g.binary("mul", x, float(torch.tensor(scale, dtype=f32)), f32)
    s = torch.tensor(scale, dtype=f32)
    p = s * torch.tensor(-float(zp), dtype=f32)
    e = p.double() + zp * s.double()  # exact in f64
    mantissa, exponent = torch.frexp(s)
    hi = torch.ldexp(torch.trunc(torch.ldexp(mantissa, torch.tensor(15))), exponent - 15)
    lo = s - hi
    if float(e.float()) != float(e):  # cannot happen for an 8-bit zero point (see above)
        return g.binary("mul", g.binary("sub", x, float(zp), f32), float(s), f32)
    d = g.binary("sub", x, float(zp), f32)
    high = g.binary("mul", d, float(hi), f32)
    low = g.binary("add", g.binary("mul", d, float(lo), f32), float(e), f32)
    return g.binary("add", high, low, f32)
