"""How the running torch's quantized convolution and linear kernels requantize their int32
sums, found by asking it.

Every kernel scales the exact int32 sums ``acc`` in float32 and rounds half to even, but
not with the same float steps, and the steps decide which integer a value within a few
units of the last place of a tie gets:

- ``fbgemm`` (x86 and fbgemm engines, fbgemm's kernels):
  ``round((float(acc) + bias / (w_scale * x_scale)) * (w_scale * x_scale / out_scale)) + zp``;
  ``fbgemm fma``, its per-tensor kernels on AVX-512: the bias times ``1 / (w_scale *
  x_scale)`` added to ``float(acc)`` in one fused multiply-add;
- ``qnnpack``: the bias quantized to int32 (``round(bias / (w_scale * x_scale))``) and
  added to the sums, then ``round(float(acc) * (w_scale * x_scale / out_scale)) + zp``;
- ``onednn ...`` (the x86 engine running oneDNN):
  ``round((float(acc) * x_scale' * w_scale + bias) * out_inverse + zp)``, the zero point
  added in float32 before the rounding, where oneDNN's kernels differ in the order of the
  two scale products (``combined``: ``acc * (x_scale' * w_scale)``, the brgemm convolution;
  ``two_step``: ``(acc * x_scale') * w_scale``, the 1x1 and depthwise kernels) and PyTorch
  hands oneDNN reciprocal scales, which come back rounded: ``x_scale'`` is
  ``float(x_scale)`` or ``1.f / float(1 / x_scale)``, ``out_inverse`` ``1.f /
  float(out_scale)`` or ``1.f / (1.f / float(1 / out_scale))``.

PyTorch's x86 engine runs a convolution through oneDNN when the CPU has AVX-512 VNNI, the
weight is symmetric (zero points 0) and it has at most 100 groups; which oneDNN kernel runs
(and so which form) depends on the shape and the ISA (AMX, VNNI) too. Rather than repeat
those heuristics, t2n asks the running torch, once per layer structure and engine: it runs a
layer of the same structure (shapes, groups, stride, padding, dilation, weight zero points,
bias or not, fused ReLU) on random integers with each channel's bias (or, without a bias,
its weight scale) chosen so that one output lies on a rounding tie in exact arithmetic,
where the forms round differently, and keeps the forms that give PyTorch's integers.
The inputs stay below 128 (x86's 7-bit activations): fbgemm's AVX2 kernels saturate larger
pairs of products to int16. A kernel matching none is refused by the caller rather than
guessed.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

F32 = torch.float32
FORMS = ("fbgemm", "fbgemm fma", "qnnpack") + tuple(
    f"onednn {order} x_scale:{xs} out_inverse:{inv}" for order in ("combined", "two_step")
    for xs in ("float", "reciprocal") for inv in ("float", "reciprocal"))
_PREFERRED = {"qnnpack": "qnnpack"}  # the form tried first per engine (else fbgemm's)
_ROUNDS = 12  # probe rounds at most; each puts one tie in every output channel


@dataclass(frozen=True)
class Requantization:
    """The float32 steps from the int32 sums to the integers before the clamp:
    ``int_bias`` (int32, added to the sums first, or None), then ``steps`` (``("mul" |
    "add", float32 tensor per output channel or of one element)``, or ``("add_exact", f64
    tensor)``: the sum rounded once to float32, a fused multiply-add whose product the f64
    constant holds exactly) on ``float(acc)``, then
    the zero point ``zero_point`` added in float32 and the rounding half to even
    (``zero_point_inside``), or the rounding and then the zero point."""

    int_bias: torch.Tensor | None
    steps: tuple
    zero_point: int
    zero_point_inside: bool


def requantization(form: str, w_scales, x_scale: float, bias, out_scale: float,
                   out_zero_point: int) -> Requantization:
    """``form``'s steps (see the module's docstring) for per-channel (or one) weight scales
    ``w_scales``, the float bias (or None) and the output's scale and zero point."""
    ws = torch.as_tensor(w_scales).reshape(-1).to(F32)
    xs = torch.tensor([float(x_scale)], dtype=F32)
    out = torch.tensor([float(out_scale)], dtype=F32)
    combined = ws * xs
    b = None if bias is None else bias.detach().reshape(-1).to(F32)
    zp = int(out_zero_point)
    if form == "qnnpack":
        bq = None if b is None else torch.round(b / combined).to(torch.int32)
        return Requantization(bq, (("mul", combined / out),), zp, False)
    if form.startswith("fbgemm"):
        add = () if b is None else (("add", b / combined),) if form == "fbgemm" else \
            (("add_exact", b.double() * (1 / combined).double()),)  # fma(b, 1 / scale, acc)
        return Requantization(None, add + (("mul", combined / out),), zp, False)
    return _onednn(form, ws, float(x_scale), b, float(out_scale), zp)


def _onednn(form, ws, x_scale, b, out_scale, zp) -> Requantization:
    _, order, xs, inv = form.split()
    one = torch.tensor([1.0], dtype=F32)
    xs = torch.tensor([x_scale], dtype=F32) if xs == "x_scale:float" else \
        one / torch.tensor([1 / x_scale], dtype=F32)
    inv = one / torch.tensor([out_scale], dtype=F32) if inv == "out_inverse:float" else \
        one / (one / torch.tensor([1 / out_scale], dtype=F32))
    scale = (("mul", ws * xs),) if order == "combined" else (("mul", xs), ("mul", ws))
    add = () if b is None else (("add", b),)
    return Requantization(None, scale + add + (("mul", inv),), zp, True)


def apply(r: Requantization, acc: torch.Tensor, channel_axis: int = 1) -> torch.Tensor:
    """``r`` on int32 sums in torch (the probe's prediction; the lowering emits the same
    ops): the rounded values with the zero point, before the clamp, as float32."""
    shape = [1] * acc.dim()
    shape[channel_axis] = -1
    acc = acc.to(torch.int32)
    if r.int_bias is not None:
        acc = acc + r.int_bias.reshape(shape)
    y = acc.to(F32)
    for op, c in r.steps:
        c = c.reshape(shape)
        y = y * c if op == "mul" else y + c if op == "add" else (y.double() + c).to(F32)
    if r.zero_point_inside:
        return torch.round(y + float(r.zero_point)) if r.zero_point else torch.round(y)
    return torch.round(y) + float(r.zero_point)


# ---------------------------------------------------------------------------- the probe
def requantization_form(kind: str, weight: torch.Tensor, has_bias: bool, stride, padding,
                        dilation, groups: int, x_shape, x_dtype, relu: bool) -> str | None:
    """The form (one of :data:`FORMS`) the running torch's ``kind`` ("conv" or "linear")
    kernel uses for a layer of this structure under the current quantized engine, or None
    when its integers match none. ``weight``: the layer's quantized weight (only its
    shape, dtype and zero points are used; a linear layer's ``[N, K]`` leads its shape);
    ``x_shape``: the input's (dims that are not ints count as 1)."""
    per_channel = weight.qscheme() in (torch.per_channel_affine,
                                       torch.per_channel_affine_float_qparams)
    zps = tuple(weight.q_per_channel_zero_points().tolist()) if per_channel \
        else (int(weight.q_zero_point()),)
    shape = tuple(d if isinstance(d, int) else 1 for d in x_shape)
    w_shape = tuple(weight.shape)[:2] if kind == "linear" else tuple(weight.shape)
    return _probe(torch.backends.quantized.engine, kind, w_shape, per_channel,
                  zps, bool(has_bias), tuple(stride), tuple(padding), tuple(dilation),
                  int(groups), shape, x_dtype, bool(relu))


@functools.lru_cache(maxsize=None)
def _probe(engine, kind, w_shape, per_channel, zps, has_bias, stride, padding, dilation,
           groups, x_shape, x_dtype, relu) -> str | None:
    first = _PREFERRED.get(engine, "fbgemm")
    alive = [first] + [f for f in FORMS if f != first]
    gen = torch.Generator().manual_seed(0)
    axis = 1 if kind == "conv" else -1
    for _ in range(_ROUNDS):
        case = _case(gen, kind, w_shape, per_channel, zps, has_bias, stride, padding,
                     dilation, groups, x_shape, x_dtype, relu)
        if case is None:
            return first
        got, acc, ws, xs, bias, out_scale, out_zp, lo, hi = case
        low = out_zp if relu else lo
        exact = _exact(acc, ws, xs, bias, out_scale, out_zp, axis)
        near = (exact - exact.floor() - 0.5).abs() < 1e-3  # where the forms may differ
        if not torch.equal(torch.round(exact[~near]).clamp(low, hi), got[~near].double()):
            return None  # not a rounding difference: no form can match
        shape = [1] * acc.dim()
        shape[axis] = -1
        ch = torch.arange(w_shape[0]).reshape(shape).expand(acc.shape)[near]
        sums, want = acc[near].reshape(1, -1), got[near]
        alive = [f for f in alive if torch.equal(apply(requantization(
            f, ws[ch], xs, None if bias is None else bias[ch], out_scale, out_zp),
            sums).clamp(low, hi)[0], want)]
        if len(alive) <= 1:
            break
    return alive[0] if alive else None


def _exact(acc, ws, xs, bias, out_scale, out_zp, axis):
    """The requantized value in exact arithmetic (f64) from the float32 parameters."""
    shape = [1] * acc.dim()
    shape[axis] = -1
    f32 = lambda v: float(torch.tensor(v, dtype=F32))  # noqa: E731
    y = acc * ws.double().reshape(shape) * f32(xs)
    if bias is not None:
        y = y + bias.double().reshape(shape)
    return y / f32(out_scale) + out_zp


def _case(gen, kind, w_shape, per_channel, zps, has_bias, stride, padding, dilation,
          groups, x_shape, x_dtype, relu):
    """One probe run: PyTorch's output integers, the exact sums and the parameters, with
    one output per channel on a tie in exact arithmetic; None when PyTorch cannot run
    this layer (the lowering then keeps the engine's form)."""
    lo, hi = (0, 255) if x_dtype == torch.quint8 else (-128, 127)
    x_int = torch.randint(lo, lo + 128, x_shape, generator=gen, dtype=torch.int32)
    x_scale, x_zp = _scale(gen, 0.02, 0.03), lo + 40 + int(_uniform(gen) * 50)
    zp_w = torch.tensor(zps, dtype=torch.int32)
    zp_rows = zp_w.reshape([-1] + [1] * (len(w_shape) - 1)).expand(w_shape[0], *([1] * (
        len(w_shape) - 1))) if per_channel else zp_w
    w_int = torch.randint(-127, 128, w_shape, generator=gen, dtype=torch.int32)
    w_int = torch.clamp(w_int + zp_rows, -128, 127)
    w_dq = (w_int - zp_rows).double()
    x_dq = (x_int - x_zp).double()
    if kind == "linear":
        acc = x_dq @ w_dq.t()
        channel = acc.movedim(-1, 0).reshape(w_shape[0], -1)
    else:
        conv = F.conv2d if len(w_shape) == 4 else F.conv3d
        acc = conv(x_dq, w_dq, None, stride, padding, dilation, groups)
        channel = acc.transpose(0, 1).reshape(w_shape[0], -1)
    out_scale, out_zp = _scale(gen, 0.05, 0.1), lo + 60 + int(_uniform(gen) * 40)
    c = w_shape[0]
    ws = (0.002 + 0.01 * torch.rand(c, generator=gen, dtype=torch.float64)) \
        if per_channel else torch.full((c,), 0.002 + 0.01 * _uniform(gen), dtype=torch.float64)
    # one output per channel, a positive sum where there is one
    pick = torch.argmax((channel > 0).float() + torch.rand(channel.shape[1], generator=gen),
                        dim=1)
    acc0 = channel.gather(1, pick[:, None])[:, 0]
    half = torch.randint(1, 40, (c,), generator=gen).double() + 0.5  # above the zero point
    if has_bias:
        bias = ((half * out_scale - acc0 * x_scale * ws)).float()
    else:
        bias = None
        tie = (half * out_scale / (acc0 * x_scale)).where(acc0 > 0, ws)
        ws = tie if per_channel else torch.full((c,), float(tie[0]), dtype=torch.float64)
    got = _run(kind, x_int, x_scale, x_zp, x_dtype, w_int, ws, zp_w, per_channel, bias,
               stride, padding, dilation, groups, out_scale, out_zp, relu)
    if got is None:
        return None
    return got, acc, ws.float(), x_scale, bias, out_scale, out_zp, lo, hi


def _scale(gen, low: float, width: float) -> float:
    """A scale whose float32 value and ``1.f / float(1 / scale)`` differ, and so do
    ``1.f / float(scale)`` and ``1.f / (1.f / float(1 / scale))``: the reciprocal
    variants of the oneDNN forms then round differently."""
    one = torch.tensor(1.0, dtype=F32)
    while True:
        s = low + width * _uniform(gen)
        f, r = torch.tensor(s, dtype=F32), torch.tensor(1 / s, dtype=F32)
        if f != one / r and one / f != one / (one / r):
            return s


def _uniform(gen) -> float:
    return float(torch.rand((), generator=gen, dtype=torch.float64))


def _run(kind, x_int, x_scale, x_zp, x_dtype, w_int, ws, zp_w, per_channel, bias, stride,
         padding, dilation, groups, out_scale, out_zp, relu):
    """The running torch's quantized ``kind`` on these integers, or None if it refuses."""
    store = torch.uint8 if x_dtype == torch.quint8 else torch.int8
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            qx = torch._make_per_tensor_quantized_tensor(x_int.to(store), x_scale, x_zp)
            wi = w_int.to(torch.int8)
            wq = torch._make_per_channel_quantized_tensor(wi, ws, zp_w.long(), 0) \
                if per_channel else torch._make_per_tensor_quantized_tensor(
                    wi, float(ws[0]), int(zp_w[0]))
            ops = torch.ops.quantized
            if kind == "linear":
                packed = ops.linear_prepack(wq, bias)
                run = ops.linear_relu if relu else ops.linear
            else:
                spatial = wq.dim() - 2
                prepack = ops.conv2d_prepack if spatial == 2 else ops.conv3d_prepack
                packed = prepack(wq, bias, list(stride), list(padding), list(dilation), groups)
                run = {(2, False): ops.conv2d, (2, True): ops.conv2d_relu,
                       (3, False): ops.conv3d, (3, True): ops.conv3d_relu}[(spatial, relu)]
            return run(qx, packed, out_scale, out_zp).int_repr().to(F32)
    except RuntimeError:
        return None
