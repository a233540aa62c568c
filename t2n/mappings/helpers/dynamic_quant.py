"""PyTorch's dynamic quantization (``quantize_dynamic``) computed in int8 by tract.

A dynamically quantized linear layer (``quantized::linear_dynamic``, and the input and
hidden products of ``quantized_lstm`` / ``quantized_gru``) quantizes its float input at
every call, from the input's own range, to u8; multiplies the integers with its qint8
weight in int32; and scales the sums back to float. This module lowers that one product so
that tract does the same work: ``tract_core_qconv`` (1-wide 1-D convolution, ``a`` = the
weight, ``b`` = the input, exact int32 sums) fed by the quantization PyTorch's kernels do:

- range: ``min(x.min(), 0)`` .. ``max(x.max(), 0)`` over the whole tensor of the call;
- ``scale = (max - min) / qmax`` (``qmax`` 127 with ``reduce_range`` on the x86/fbgemm
  engines, 255 otherwise: qnnpack ignores ``reduce_range``), raised to 6.1e-5 (PyTorch's
  ``SMALL_SCALE_THRESHOLD``), 0.1 when the range is empty (all zeros);
- ``zero_point = clamp(round_half_even(-min / scale), 0, qmax)`` (the unraised scale);
- ``q = clamp(round_half_even(x * (1 / scale) + zero_point), 0, 255)``, the product and
  the sum rounded once (fbgemm's fused multiply-add; computed in f64, exact);
- ``y = acc * x_scale * w_scale[row]`` in float; the caller adds the bias (as PyTorch's
  kernels do, after the scaling).

The scale is computed in f64 and rounded to f32, as PyTorch's ``ChooseQuantizationParams``
does. Measured against PyTorch's own integers (an identity weight recovers them) on 1.6 M
random values per engine (x86, fbgemm, qnnpack): no difference. The remaining source of
difference is upstream: a value that tract computes one unit of the last place away from
PyTorch (tract's tanh and sigmoid are not PyTorch's) moves an integer when it sits on a
rounding boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

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


def dynamic_quantize(g, x, reduce_range: bool):
    """(u8 integers of ``x``, its f32 scale as a scalar tensor, its zero point as an i32
    scalar tensor), chosen from ``x``'s own range at run time as PyTorch does."""
    qmax = 127.0 if reduce_range else 255.0
    f32, f64 = torch.float32, torch.float64
    axes = list(range(x.rank))
    lo = g.op("min", g.reduce("min_reduce", x, axes, keepdim=True), 0.0)
    hi = g.op("max", g.reduce("max_reduce", x, axes, keepdim=True), 0.0)
    lo, hi = g.cast(g.reshape(lo, []), f64), g.cast(g.reshape(hi, []), f64)
    raw = g.binary("div", g.binary("sub", hi, lo, f64), qmax, f64)  # in double, as PyTorch
    empty = g.binary("eq", raw, 0.0, f64, out_dtype=torch.bool)  # all zeros
    raw = g.op("select", empty, g.scalar(0.1, f64), raw, out_dtype=f64)
    zp = g.cast(g.binary("div", g.op("neg", lo), raw, f64), f32)
    zp = g.op("clamp", g.op("tract_core_round_even", zp), 0.0, qmax)
    scale = g.cast(g.op("max", raw, _SMALL_SCALE), f32)
    inv = g.binary("div", 1.0, scale, f32)
    # x * inv + zero point with one rounding (fbgemm's fused multiply-add): exact in f64
    q = g.binary("add", g.binary("mul", g.cast(x, f64), g.cast(inv, f64), f64),
                 g.cast(zp, f64), f64)
    q = g.op("clamp", g.op("tract_core_round_even", g.cast(q, f32)), 0.0, 255.0)
    q = g.op("tract_core_cast", q, to="u8", out_dtype=torch.quint8)
    zp_i = g.op("tract_core_cast", zp, to="i32", out_dtype=torch.int32)
    return q, scale, zp_i


def dynamic_linear(g, x, w: Int8Weight, reduce_range: bool):
    """``x @ W^T`` of float ``x`` ``[M, K]`` the way a dynamic quantized linear layer
    computes it (no bias): ``[M, N]`` float32."""
    return dynamic_linears(g, x, [w], reduce_range)


def dynamic_linears(g, x, ws: list, reduce_range: bool):
    """Several dynamic products of the same ``x`` (``[M, K]``), concatenated along the
    output features: ``x`` is quantized once (PyTorch would compute the same parameters
    for each), and weights sharing a zero point run as one ``tract_core_qconv``."""
    k = x.shape[1]
    for w in ws:
        if not isinstance(k, int) or k != w.shape[1]:
            raise g.error(f"input: {k} features for a weight of {w.shape[1]}")
    q, scale, zp = dynamic_quantize(g, g.cast(x, torch.float32), reduce_range)
    rows = g.unsqueeze(q, [2])  # [M, K, 1]: M rows as the batch of a 1-D convolution
    groups = [ws] if all(w.zero_point == ws[0].zero_point for w in ws) else [[w] for w in ws]
    outs = []
    for group in groups:
        ints = torch.cat([w.ints for w in group]) if len(group) > 1 else group[0].ints
        scales = torch.cat([w.scales for w in group])
        filt = g.variable(ints.unsqueeze(-1).contiguous(), group[0].label)
        n = ints.shape[0]
        acc = g.op("tract_core_qconv", rows, filt, g.const(torch.zeros((), dtype=torch.int32)),
                   group=1, groups=1, dilation=[1], stride=[1], padding=[(0, 0)],
                   border="constant", a0=group[0].zero_point, a_scale=1.0, b0=zp,
                   b_scale=1.0, c0=0, c_scale=1.0, output_dt="i32", out_dtype=torch.int32,
                   out_shape=[x.shape[0], n, 1])
        f = g.cast(g.squeeze(acc, [2]), torch.float32)
        f = g.binary("mul", f, scale, torch.float32)
        outs.append(g.binary("mul", f, g.const(scales.reshape(1, -1)), torch.float32))
    return outs[0] if len(outs) == 1 else g.concat(outs, 1)


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
