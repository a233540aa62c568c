"""How the running torch's quantized convolution and linear kernels requantize their int32
sums, found by asking it.

Every kernel scales the exact int32 sums ``acc`` in float32 and rounds half to even, but
not with the same float steps, and the steps decide which integer a value within a few
units of the last place of a tie gets:

- ``fbgemm`` (x86 and fbgemm engines, fbgemm's kernels):
  ``round((float(acc) + bias / (w_scale * x_scale)) * (w_scale * x_scale / out_scale)) + zp``;
  ``fbgemm fma``, its per-tensor kernels on AVX-512: the bias times ``1 / (w_scale *
  x_scale)`` added to ``float(acc)`` in one fused multiply-add;
- ``qnnpack``: the bias quantized to int32 by PyTorch's own ``quantize_per_channel`` (or
  ``_per_tensor``) with the double scales ``w_scale * x_scale``, added to the sums, then
  ``round(float(acc) * ((w_scale * x_scale) * (1 / out_scale))) + zp``, all in float32;
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
(and so which form) depends on the shape and the ISA too (measured, torch 2.13 with oneDNN
3.12 on AMX: 3x3 and 3-D convolutions ``combined``, 1x1 and depthwise ``two_step``, both with
the reciprocal scales; limited to AVX2 kernels: all ``combined``). Rather than repeat those
heuristics, t2n asks the running torch, once per layer structure and engine: it runs a layer
of the same structure (shapes, groups, stride, padding, dilation, weight zero points, bias
or not, fused ReLU) on random integers, with one output per channel put on a rounding tie
(the weight scale and the bias chosen from one of the channel's sums, the bias then a tiny
float32 residue, or the sum whose tie the float32 scale reaches most closely), where the
forms round differently, and keeps the forms that give PyTorch's integers, round after
round, until none is left, the ones left take the same steps, or 256 more distinct sums
within 1e-7 of a tie rule out none (of several left, the engine's preferred one stays).
The inputs stay below 128 (x86's 7-bit activations): fbgemm's AVX2 kernels saturate larger
pairs of products to int16. Measured on 320 random layer structures (conv 1x1 to 5x5,
strides 1-2, dense and depthwise, linear; per-channel or per-tensor, symmetric or not, bias
or not, ReLU or not) with oneDNN's AMX, AVX-512 VNNI and AVX2 kernels: the chosen form gave
PyTorch's integers on 6 more rounds each. Cost: about 1-2 s of an export for ResNet-50's 24
layer structures or MobileNetV2's 31. A kernel matching none is refused by the caller
rather than guessed.
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
_ROUNDS = 128  # probe rounds at most; each puts one tie in every output channel (one in
# all with per-tensor weights and no bias: such layers take the most rounds)
_TIES = 256  # distinct sums within 1e-7 of a tie that rule out no form before it stops


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
                   out_zero_point: int, per_channel: bool = True) -> Requantization:
    """``form``'s steps (see the module's docstring) for per-channel (or one) weight scales
    ``w_scales`` (as the weight holds them: double), the float bias (or None) and the
    output's scale and zero point; ``per_channel``: whether the weight's scheme is (qnnpack
    quantizes the bias per channel or per tensor accordingly)."""
    ws64 = torch.as_tensor(w_scales).reshape(-1).to(torch.float64)
    ws = ws64.to(F32)
    xs = torch.tensor([float(x_scale)], dtype=F32)
    out = torch.tensor([float(out_scale)], dtype=F32)
    combined = ws * xs
    b = None if bias is None else bias.detach().reshape(-1).to(F32)
    zp = int(out_zero_point)
    if form == "qnnpack":
        inverse = torch.tensor([1.0], dtype=F32) / out
        return Requantization(_qnnpack_bias(b, ws64, float(x_scale), per_channel),
                              (("mul", combined * inverse),), zp, False)
    if form.startswith("fbgemm"):
        add = () if b is None else (("add", b / combined),) if form == "fbgemm" else \
            (("add_exact", b.double() * (1 / combined).double()),)  # fma(b, 1 / scale, acc)
        return Requantization(None, add + (("mul", combined / out),), zp, False)
    return _onednn(form, ws, float(x_scale), b, float(out_scale), zp)


def _qnnpack_bias(b, ws64, x_scale: float, per_channel: bool):
    """qnnpack's int32 bias: PyTorch quantizes the float bias itself, with the double scales
    ``w_scale * x_scale``, per channel or per tensor as the weight is; so does this, with
    the running torch's own quantization (its rounding is the build's)."""
    if b is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors' deprecation notice (torch 2.14)
        if per_channel:
            scales = ws64.expand(b.numel()) * x_scale
            q = torch.quantize_per_channel(b, scales, torch.zeros(b.numel(), dtype=torch.long),
                                           0, torch.qint32)
        else:
            q = torch.quantize_per_tensor(b, float(ws64[0]) * x_scale, 0, torch.qint32)
    return q.int_repr()


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


def emit_steps(g, r: Requantization, acc, shape):
    """``r``'s steps in the graph on the sums ``acc`` (int32, or float32 holding exact
    integers), the per-channel constants reshaped to ``shape``: the float32 value before
    the rounding, with the zero point when ``r`` adds it inside."""
    f32, f64 = torch.float32, torch.float64
    if r.int_bias is not None:
        acc = g.binary("add", g.cast(acc, torch.int32), g.const(r.int_bias.reshape(shape)),
                       torch.int32)
    y = g.cast(acc, f32)
    channels = acc.shape[shape.index(-1)]
    kinds = [op for op, _ in r.steps]
    for i, (op, c) in enumerate(r.steps):
        c = c.reshape(shape)
        paired = op == "mul" and "mul" in kinds[max(i - 1, 0):i] + kinds[i + 1:i + 2]
        if op == "add_exact":  # a fused multiply-add: its exact product in f64, one rounding
            y = g.cast(g.binary("add", g.cast(y, f64), g.const(c), f64), f32)
        elif paired and channels > 1:  # two products in a row: each constant per channel
            y = g.binary(op, y, g.const(c.reshape(-1).expand(channels).reshape(shape)), f32)
        elif paired and kinds[i - 1] == "mul":  # a single channel: see the function
            y = _product_rounded_alone(g, y, c)
        else:
            y = g.binary(op, y, g.const(c), f32)
    if r.zero_point_inside and r.zero_point:
        y = g.binary("add", y, float(r.zero_point), f32)
    return y


def _product_rounded_alone(g, y, c):
    """``y * c`` in float32, kept apart from the product by a constant before it: tract
    (0.23.9, ``declutter_mul_const_mul_const``) folds ``(y * c1) * c2`` into ``y * (c1 *
    c2)`` when either constant has one element, which rounds differently (measured: one
    output in each of three ResNet-50 layers). :func:`emit_steps` gives both constants one
    element per output channel, out of the fold's reach, at no cost; with a single output
    channel, the product is computed here in f64 (exact for two float32) and rounded to
    float32: the same value as the float32 product, though tract's f64 element-wise ops
    are several times slower (measured: 10 ms of a ResNet-50 run when every 1x1 layer
    took this path)."""
    y = g.binary("mul", g.cast(y, torch.float64), g.const(c.double()), torch.float64)
    return g.cast(y, torch.float32)


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
    still = 0  # distinct sums within 1e-7 of a tie since a form was last ruled out
    for _ in range(_ROUNDS):
        case = _case(gen, kind, w_shape, per_channel, zps, has_bias, stride, padding,
                     dilation, groups, x_shape, x_dtype, relu)
        if case is None:
            return first
        got, acc, ws, xs, bias, out_scale, out_zp, lo, hi = case
        low = out_zp if relu else lo
        rough = _exact(acc.float(), ws.float(), xs, bias, out_scale, out_zp, axis)
        near = (rough - rough.floor() - 0.5).abs() < 1e-2  # where the forms may differ
        if not torch.equal(torch.round(rough[~near]).clamp(low, hi), got[~near]):
            return None  # not a rounding difference: no form can match
        shape = [1] * acc.dim()
        shape[axis] = -1
        ch = torch.arange(w_shape[0]).reshape(shape).expand(acc.shape)[near]
        sums, want = acc[near].double(), got[near]
        exact = _exact(sums[None], ws[ch].double(), xs, None if bias is None else bias[ch],
                       out_scale, out_zp, 1)
        sums = sums.reshape(1, -1)
        kept = [f for f in alive if torch.equal(apply(requantization(
            f, ws[ch], xs, None if bias is None else bias[ch], out_scale, out_zp,
            per_channel),
            sums).clamp(low, hi)[0], want)]
        on_tie = ((exact - exact.floor() - 0.5).abs() < 1e-7)[0]  # distinct cases only
        tight = len(torch.unique(torch.stack([sums[0], ws[ch].double(), torch.zeros_like(
            sums[0]) if bias is None else bias[ch].double()], 1)[on_tie], dim=0))
        still = still + tight if len(kept) == len(alive) else 0
        alive = kept
        # done when no form is left, or _TIES ties in a row ruled out none (the one left
        # holds; several: too rarely apart to matter, the preferred one stays), or the
        # forms left take the same steps whatever the scales (no bias: fbgemm's, qnnpack's)
        if not alive or still >= _TIES or (len(alive) > 1 and _equivalent(alive, has_bias)):
            break
    return alive[0] if alive else None


def _equivalent(forms, has_bias: bool) -> bool:
    """Whether ``forms`` take the same steps whatever the scales (without a bias, fbgemm's
    and qnnpack's do), judged on scales where every variant differs."""
    gen = torch.Generator().manual_seed(1)
    ws = (0.002 + 0.01 * torch.rand(8, generator=gen, dtype=torch.float64)).float()
    xs, out = _scale(gen, 0.02, 0.03), _scale(gen, 0.05, 0.1)
    bias = torch.randn(8, generator=gen) if has_bias else None
    steps = [requantization(f, ws, xs, bias, out, 3) for f in forms]
    return all(_same(r, steps[0]) for r in steps)


def _same(a: Requantization, b: Requantization) -> bool:
    """Whether two forms take the same steps with the same constants."""
    same = lambda x, y: (x is None and y is None) or (  # noqa: E731
        x is not None and y is not None and x.dtype == y.dtype and torch.equal(x, y))
    return same(a.int_bias, b.int_bias) and a.zero_point_inside == b.zero_point_inside \
        and len(a.steps) == len(b.steps) and all(
            o1 == o2 and same(c1, c2) for (o1, c1), (o2, c2) in zip(a.steps, b.steps))


def _exact(acc, ws, xs, bias, out_scale, out_zp, axis):
    """The requantized value from the float32 parameters, in ``acc``'s dtype (f64: exact to
    ~1e-13 here; float32: to ~1e-3, enough to tell which outputs lie near a tie)."""
    shape = [1] * acc.dim()
    shape[axis] = -1
    y = acc * ws.to(acc.dtype).reshape(shape) * _f32(xs)
    if bias is not None:
        y = y + bias.to(acc.dtype).reshape(shape)
    return y / _f32(out_scale) + out_zp


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
    # exact sums: in float32 while every partial sum stays below 2^24 (products of at most
    # 2^14, fewer than 2^10 of them), else in f64
    k = w_shape[1] * (1 if kind == "linear" else int(torch.tensor(w_shape[2:]).prod()))
    dtype = F32 if k < 1024 else torch.float64
    w_dq = (w_int - zp_rows).to(dtype)
    x_dq = (x_int - x_zp).to(dtype)
    if kind == "linear":
        acc = x_dq @ w_dq.t()
        channel = acc.movedim(-1, 0).reshape(w_shape[0], -1).double()
    else:
        conv = F.conv2d if len(w_shape) == 4 else F.conv3d
        acc = conv(x_dq, w_dq, None, stride, padding, dilation, groups)
        channel = acc.transpose(0, 1).reshape(w_shape[0], -1).double()
    out_scale, out_zp = _scale(gen, 0.05, 0.1), lo + 60 + int(_uniform(gen) * 40)
    c = w_shape[0]
    ws = (0.002 + 0.01 * torch.rand(c, generator=gen, dtype=torch.float64)) \
        if per_channel else torch.full((c,), 0.002 + 0.01 * _uniform(gen), dtype=torch.float64)
    # one output per channel, a positive sum where there is one
    pick = torch.argmax((channel > 0).float() + torch.rand(channel.shape[1], generator=gen),
                        dim=1)
    acc0 = channel.gather(1, pick[:, None])[:, 0]
    half = torch.randint(1, 40, (c,), generator=gen).double() + 0.5  # above the zero point
    xs32, os32 = _f32(x_scale), _f32(out_scale)  # the values the kernels use
    if has_bias:
        if per_channel:  # half the channels: the weight scale puts the sum on the tie and
            # the bias is the float32 residue, tiny: the tie then is exact to ~1e-13
            tie = _to_f32(half * os32 / (acc0 * xs32))
            ws = tie.where((acc0 > 0) & (torch.arange(c) % 2 == 0), ws)
        bias = _to_f32(half * os32 - acc0 * xs32 * ws).float()
    else:
        bias = None
        if per_channel:
            acc0, ws = _closest_ties(channel, half, xs32, os32, ws)
        else:  # one scale: the output closest to a tie among all channels'
            ws = _closest_ties(channel.reshape(1, -1), half[:1], xs32, os32, ws[:1])[1]
            ws = ws.expand(c).clone()
    got = _run(kind, x_int, x_scale, x_zp, x_dtype, w_int, ws, zp_w, per_channel, bias,
               stride, padding, dilation, groups, out_scale, out_zp, relu)
    if got is None:
        return None
    return got, acc, ws.float(), x_scale, bias, out_scale, out_zp, lo, hi


def _closest_ties(channel, half, xs32, os32, ws):
    """Without a bias, each channel's weight scale (float32) sets the tie: the sum among the
    channel's positive ones whose value then lies closest to ``half``, and that scale."""
    acc = channel.clamp(min=1)
    scale = _to_f32(half[:, None] * os32 / (acc * xs32))
    miss = (acc * xs32 * scale / os32 - half[:, None]).abs().where(channel > 0, float("inf"))
    best = miss.argmin(1, keepdim=True)
    found = torch.isfinite(miss.gather(1, best))[:, 0]
    return channel.gather(1, best)[:, 0], scale.gather(1, best)[:, 0].where(found, ws)


def _f32(v: float) -> float:
    return float(torch.tensor(v, dtype=F32))


def _to_f32(t: torch.Tensor) -> torch.Tensor:
    return t.to(F32).double()


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
