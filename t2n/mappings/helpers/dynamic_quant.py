"""PyTorch's dynamic quantization (``quantize_dynamic``) computed in int8 by tract.

A dynamically quantized linear layer (``quantized::linear_dynamic``, and the input and
hidden products of ``quantized_lstm`` / ``quantized_gru``) quantizes its float input at
every call, from the input's own range, to u8; multiplies the integers with its qint8
weight in int32; and scales the sums back to float. This module lowers that one product so
that tract does the same work: ``tract_core_einsum_q`` (the rows of the input times the
weight, exact int32 sums, run by tract's int8 matrix kernel) fed by the quantization
PyTorch's kernels do:

- range: ``min(x.min(), 0)`` .. ``max(x.max(), 0)`` over the whole tensor of the call;
- ``scale = (max - min) / qmax`` (``qmax`` 127 with ``reduce_range`` on the x86/fbgemm
  engines, 255 otherwise: qnnpack ignores ``reduce_range``), raised to 6.1e-5 (PyTorch's
  ``SMALL_SCALE_THRESHOLD``), 0.1 when the range is empty (all zeros);
- ``zero_point = clamp(round_half_even(-min / scale), 0, qmax)`` (the unraised scale);
- ``q = clamp(round_half_even(x * (1 / scale) + zero_point), 0, 255)``, the product and
  the sum rounded once (fbgemm's fused multiply-add; computed in f64, exact) up to torch
  2.13; torch 2.14 rounds the product first and adds the zero point after (the running
  torch is asked: helpers/quantize_rounding.py);
- ``m = f32(x_scale * w_scale[row])``, then ``y = fma(f32(acc), m, bias)`` (fbgemm: x86
  and fbgemm engines) or ``f32(acc) * m + bias`` (qnnpack).

The scale is computed in f64 and rounded to f32, as PyTorch's ``ChooseQuantizationParams``
does. Measured against PyTorch's own integers (an identity weight recovers them) on 1.6 M
random values per engine (x86, fbgemm, qnnpack): no difference; a whole layer's floats
equal PyTorch's bit for bit (tests/test_quantized.py). The remaining source of
difference is upstream: a value that tract computes one unit of the last place away from
PyTorch (tract's tanh and sigmoid are not PyTorch's) moves an integer when it sits on a
rounding boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from t2n.mappings.helpers.quantize_rounding import dynamic_zero_point_rounded_with_product
from t2n.mappings.helpers.round_by_adds import rounded_plus

_SMALL_SCALE = 6.1e-5  # PyTorch's SMALL_SCALE_THRESHOLD (QuantUtils.h)


@dataclass(frozen=True)
class Int8Weight:
    """A qint8 weight ``[N, K]`` as integers, one zero point and one scale per row (per
    tensor weights repeat theirs), plus the label its ``.dat`` file gets."""

    ints: torch.Tensor  # int8 [N, K]
    zero_point: int
    scales: torch.Tensor  # float32 [N]
    label: str

    @property
    def shape(self):
        return tuple(self.ints.shape)

    def rows(self, order) -> "Int8Weight":
        """The weight with its row blocks (gates) in ``order``."""
        n = self.ints.shape[0] // len(order)
        pick = torch.cat([torch.arange(k * n, (k + 1) * n) for k in order])
        return Int8Weight(self.ints[pick], self.zero_point, self.scales[pick], self.label)


def weight_parts(g, w: torch.Tensor):
    """(integers, zero point, per-tensor scale or None, per-channel scales or None) of a
    qint8 weight, per tensor or per output channel (axis 0, one zero point)."""
    if w.dtype != torch.qint8:
        raise g.error(f"weight: {w.dtype} weights are not supported (qint8)")
    if w.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        return w.int_repr(), int(w.q_zero_point()), float(w.q_scale()), None
    if w.qscheme() not in (torch.per_channel_affine, torch.per_channel_symmetric):
        raise g.error(f"weight: quantization scheme {w.qscheme()} is not supported")
    if w.q_per_channel_axis() != 0:
        raise g.error("weight: per-channel scales on an axis other than the output channels")
    zps = w.q_per_channel_zero_points()
    if bool((zps != zps[0]).any()):
        raise g.error("weight: per-channel zero points that differ between channels")
    return w.int_repr(), int(zps[0]), None, w.q_per_channel_scales().to(torch.float32)


def int8_weight(g, w: torch.Tensor, label: str) -> Int8Weight:
    ints, zp, scale, scales = weight_parts(g, w)
    if ints.dim() != 2:
        raise g.error(f"weight: expected a 2-D linear weight, got {list(ints.shape)}")
    if scales is None:
        scales = torch.full((ints.shape[0],), scale, dtype=torch.float32)
    return Int8Weight(ints.contiguous(), zp, scales, label)


def reduce_range_for_engine(reduce_range: bool) -> bool:
    """qnnpack quantizes to the full 8 bits whatever ``reduce_range`` says (PyTorch warns)."""
    return bool(reduce_range) and torch.backends.quantized.engine != "qnnpack"


def _range_end(g, kind: str, x):
    """``min(x.min(), 0)`` (``kind`` "min_reduce") or ``max(x.max(), 0)`` over the whole
    tensor, every axis kept at size 1. tract's float min/max reductions never return an
    infinity (a tensor of only -inf has the lowest finite float as its max): with the 0 taken
    in, that gives the same range, so the reduction needs none of the builder's guards
    (two comparisons and an ``any`` over the whole input, which cost as much as the
    quantization itself)."""
    axes = list(range(x.rank))
    if any(isinstance(d, int) and d == 0 for d in x.shape):
        r = g.reduce(kind, x, axes, keepdim=True)  # tract aborts on an empty reduction
    else:
        r = g.op(kind, x, axes=axes, out_shape=[1] * x.rank)
    return g.op("min" if kind == "min_reduce" else "max", r, 0.0)


def dynamic_quantize(g, x, reduce_range: bool):
    """(u8 integers of ``x``, its f32 scale and its f32 zero point, both of shape
    ``[1] * x.rank``), chosen from ``x``'s own range at run time as PyTorch does.

    The integers are ``round_half_even(f32(x * (1 / scale) + zero_point))`` saturated to
    0..255: the product and the sum in f64 (exact: fbgemm's fused multiply-add rounds
    once, to f32), then in f32 ``(v + 1.5 * 2^23) - 1.5 * 2^23`` (helpers/round_by_adds.py),
    which rounds half to even for |v| < 2^22 (tract keeps the two adds: checked in its
    optimised graph), and the cast to u8, which saturates (Rust's ``as``: beyond 255 gives
    255, below 0 and NaN give 0, as fbgemm's clamp of its int32 does). Where this torch
    rounds the float32 product first and adds the zero point after (torch 2.14), so do these
    additions. A value beyond 2^22 in magnitude rounds to a
    neighbouring even number there, which saturates all the same. Two elementwise passes
    fewer than ``tract_core_round_even`` and a clamp."""
    qmax = 127.0 if reduce_range else 255.0
    f32, f64 = torch.float32, torch.float64
    lo = g.cast(_range_end(g, "min_reduce", x), f64)
    hi = g.cast(_range_end(g, "max_reduce", x), f64)
    raw = g.binary("div", g.binary("sub", hi, lo, f64), qmax, f64)  # in double, as PyTorch
    empty = g.binary("eq", raw, 0.0, f64, out_dtype=torch.bool)  # all zeros
    raw = g.op("select", empty, g.scalar(0.1, f64), raw, out_dtype=f64)
    zp = g.cast(g.binary("div", g.op("neg", lo), raw, f64), f32)
    zp = g.op("clamp", g.op("tract_core_round_even", zp), 0.0, qmax)
    scale = g.cast(g.op("max", raw, _SMALL_SCALE), f32)
    inv = g.binary("div", 1.0, scale, f32)
    fused = dynamic_zero_point_rounded_with_product(int(qmax))
    if fused is None:
        raise g.error(f"this PyTorch ({torch.__version__}) rounds the input of a dynamic "
                      "quantized layer in a way t2n does not know (neither fbgemm's fused "
                      "multiply-add nor the product rounded first)")
    if fused:
        v = g.binary("add", g.binary("mul", g.cast(x, f64), g.cast(inv, f64), f64),
                     g.cast(zp, f64), f64)
        v = rounded_plus(g, g.cast(v, f32), 0, (0, 255))  # the u8 cast saturates: the clamp
    else:
        v = rounded_plus(g, g.binary("mul", x, inv, f32), zp, (0, 255))
    q = g.op("tract_core_cast", v, to="u8", out_dtype=torch.quint8)
    return q, scale, zp


def _exact_in_f32(w: "Int8Weight") -> bool:
    """Whether every int32 sum of this weight is exactly a float32 (|sum| <= 2^24): at
    most 255 (a u8 minus its zero point) times a row's sum of ``|w - zero_point|``."""
    rows = (w.ints.to(torch.int64) - w.zero_point).abs().sum(1)
    return int(rows.max()) * 255 <= 1 << 24 if rows.numel() else True


def dynamic_linear(g, x, w: Int8Weight, reduce_range: bool, bias=None):
    """``x @ W^T (+ bias)`` of float ``x`` ``[..., K]`` the way a dynamic quantized linear
    layer computes it: ``[..., N]`` float32."""
    return dynamic_linears(g, x, [w], reduce_range, bias)


def dynamic_linears(g, x, ws: list, reduce_range: bool, bias=None):
    """Several dynamic products of the same ``x`` (``[..., K]``), concatenated along the
    output features: ``x`` is quantized once (PyTorch would compute the same parameters
    for each), and weights sharing a zero point run as one ``tract_core_qconv``.

    The sums are scaled back as PyTorch's kernels do, with one multiplier per output
    feature, ``m = f32(x_scale * w_scale)``: fbgemm (x86, fbgemm engines) computes
    ``fma(f32(acc), m, bias)``, here in f64 (the product is exact there) rounded to f32;
    qnnpack ``f32(acc) * m`` then ``+ bias``. Both measured bit for bit against PyTorch.
    ``bias`` (a float32 tensor ``[N]``, all weights together) is added last when None
    of that applies."""
    k = x.shape[-1]
    for w in ws:
        if not isinstance(k, int) or k != w.shape[1]:
            raise g.error(f"input: {k} features for a weight of {w.shape[1]}")
    f32, f64 = torch.float32, torch.float64
    lead = list(x.shape[:-1])
    m = 1
    for d in lead:
        m = m * d
    q, scale, zp = dynamic_quantize(g, g.cast(x, f32), reduce_range)
    zp = g.op("tract_core_cast", g.reshape(zp, []), to="i32", out_dtype=torch.int32)
    scale = g.reshape(scale, [1, 1])
    rows = g.reshape(q, [m, k])
    groups = [ws] if all(w.zero_point == ws[0].zero_point for w in ws) else [[w] for w in ws]
    fused = bias is not None and torch.backends.quantized.engine != "qnnpack"
    outs, start = [], 0
    one, zero = g.scalar(1.0, f32), g.scalar(0, torch.int32)
    for group in groups:
        ints = torch.cat([w.ints for w in group]) if len(group) > 1 else group[0].ints
        scales = torch.cat([w.scales for w in group])
        n = ints.shape[0]
        zp_w = g.scalar(group[0].zero_point, torch.int32)
        filt = g.variable(ints.contiguous(), group[0].label)
        # tract 0.23.9's int8 matmul runs 4-5x slower when the output width is a multiple
        # of 1024 (measured on AVX-512 VNNI: 256 -> 1024 features 316-462 us, 256 -> 1040
        # 87 us, two products of 512 plus their concat 89 us): such a weight runs as products
        # of 512 rows, their sums concatenated
        chunks = [(0, n)] if n % 1024 else [(i, i + 512) for i in range(0, n, 512)]
        accs = []
        for lo, hi in chunks:
            w_part = filt if (lo, hi) == (0, n) else g.slice(filt, 0, lo, hi)
            accs.append(g.op("tract_core_einsum_q", [rows, w_part],
                             expr="mk,nk,,,,,,,->mn", acc="i32", output="i32", bias=zero,
                             a0=zp, a_scale=one, b0=zp_w, b_scale=one, c0=zero, c_scale=one,
                             out_dtype=torch.int32, out_shape=[m, hi - lo]))
        acc = accs[0] if len(accs) == 1 else g.concat(accs, 1)
        mult = g.binary("mul", scale, g.const(scales.reshape(1, -1)), f32)
        if fused:
            exact = all(_exact_in_f32(w) for w in group)
            a = g.cast(acc if exact else g.cast(acc, f32), f64)
            b = g.cast(g.const(bias.detach().to(f32)[start:start + n].reshape(1, -1)), f64)
            y = g.binary("add", g.binary("mul", a, g.cast(mult, f64), f64), b, f64)
            outs.append(g.cast(y, f32))
        else:
            outs.append(g.binary("mul", g.cast(acc, f32), mult, f32))
        start += n
    y = outs[0] if len(outs) == 1 else g.concat(outs, 1)
    if bias is not None and not fused:
        y = g.binary("add", y, g.const(bias.detach().to(f32).reshape(1, -1)), f32)
    return g.reshape(y, lead + [start])


class DynamicInt8Products:
    """The products of a dynamically quantized recurrent layer (``quantized_lstm`` /
    ``quantized_gru``), for t2n/mappings/recurrent.py's layers: the input projection of
    the whole sequence is one dynamic product for all directions (one quantization of the
    input, as PyTorch's ``linear_ih`` of the whole input); inside the loop, each
    direction's state is quantized on its own at every step (PyTorch's ``linear_hh``)."""

    def __init__(self, reduce_range: bool):
        self.reduce_range = reduce_range_for_engine(reduce_range)

    def rows(self, g, w: Int8Weight, order):
        return w.rows(order)

    def project(self, g, flat, ws: list):
        """``[N, I]`` float -> ``[N, D*G]``: every direction's ``x @ W_ih^T``."""
        return dynamic_linears(g, flat, ws, self.reduce_range)

    def hidden(self, loop, h, ws: list):
        """``[D, B, H]`` state -> ``[D, B, G]``: each direction's ``h @ W_hh^T``."""
        b = loop.body
        ys = []
        for d, w in enumerate(ws):
            h_d = b.squeeze(b.slice(h, 0, d, d + 1) if len(ws) > 1 else h, [0])
            ys.append(b.unsqueeze(dynamic_linear(b, h_d, w, self.reduce_range), [0]))
        return ys[0] if len(ys) == 1 else b.concat(ys, 0)
