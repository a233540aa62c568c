"""PyTorch-quantized models (torch.ao eager and FX mode, x86/fbgemm and qnnpack engines).

A quantized tensor is its integer representation in the graph, its scale and zero point
beside it (helpers/quantized_tensors.py). The int8 work runs in tract's quantized convolution,
``tract_core_qconv`` (``a`` = filter, ``b`` = input; its int8 x int8 -> int32 kernels):
convolutions directly, linear layers as 1-wide 1-D convolutions (grouped convolutions sum
their integers in tract's faster float conv where that is exact: helpers/grouped_int8.py).
It returns the exact int32 sums (every scale 1); the requantization then follows the float
steps of the kernel PyTorch runs for the layer (helpers/requantization.py: the scales,
bias and output scale applied in its order, rounded half to even), which makes the
integers equal to PyTorch's on the models tested (tract's own fixed-point
requantization differs by one step here and there). Per-channel weights carry their
scales into that product. Dynamic linear layers quantize their input at run time with
PyTorch's min/max rule (7 bits on x86/fbgemm) and scale the int32 sums in float as PyTorch
does. Element-wise quantized ops (add, cat, batch norm, activations) dequantize, compute in
float and requantize to their output parameters, except those the running torch's kernel
runs as a map of the integers (hardtanh, relu6, clamp, relu: one clamp; sigmoid,
hardsigmoid, tanh, gelu, hardswish, leaky_relu: a lookup of the 256 integers;
helpers/quantized_maps.py); averaging pools round the average of the
integers (or, where the running torch's kernel does, the average minus the zero point) half
to even, as PyTorch does. Rounding half to even is two float32 additions where an 8-bit
clamp follows (helpers/round_by_adds.py), and a requantized tensor keeps its clamped float
beside it, so float consumers (a residual add, a pool) skip the cast back.
"""

from __future__ import annotations

import dataclasses

import torch

from t2n.mappings.helpers.dynamic_quant import (DynamicInt8Products, dynamic_linear,
                                               int8_weight, reduce_range_for_engine,
                                               weight_parts)
from t2n.mappings.helpers.quantize_rounding import (average_rounded_off_zero_point,
                                                    int32_wrapped,
                                                    zero_point_rounded_with_product)
from t2n.mappings.helpers.grouped_int8 import (float_sums_exact, grouped_sums_in_float,
                                               pointwise_in_float, pointwise_sums_in_float)
from t2n.mappings.helpers.int8_inputs import signed_input, worth_it, zero_point_sums
from t2n.mappings.helpers.recurrence import FLOAT_PRODUCTS, layers
from t2n.mappings.helpers.quantized_maps import ScrambledLayout, integer_map
from t2n.mappings.helpers.quantized_tensors import (RANGE, dequantize_tensor,
                                                   dequantized_as_vectors, integers_as_float,
                                                   integers_clamped, integers_mapped,
                                                   is_quantized, qparams, quantize, rounded_to,
                                                   set_qparams)
from t2n.mappings.helpers.requantization import (emit_steps, requantization,
                                                  requantization_form)
from t2n.mappings.helpers.round_by_adds import rounded_plus
from t2n.mappings.helpers.memory_format import channels_last_contiguous
from t2n import dtypes
from t2n.walk.registry import aten, lookup, own_shapes, quantized_variant

_QCODES = {12: torch.qint8, 13: torch.quint8, 14: torch.qint32}  # ScalarType codes


def _label(g, kind: str) -> str:
    return g.session.quantized.label(kind)


def _relu_q(g, q):
    """ReLU on integers: max(q, zero point)."""
    lo, hi = RANGE[q.dtype]
    return integers_clamped(g, q, max(lo, qparams(g, q)[1]), hi)


@aten("quantize_per_tensor")
def quantize_per_tensor(g, self, scale, zero_point, dtype):
    scale, zero_point = _number(g, scale, "scale"), _number(g, zero_point, "zero_point")
    dtype = _QCODES.get(dtype, dtype) if isinstance(dtype, int) else dtype
    if dtype not in (torch.quint8, torch.qint8):
        raise g.error(f"dtype: {dtype} activations are not supported (quint8, qint8)")
    return _quantize_fused(g, self, float(scale), int(zero_point), dtype)


def _quantize_fused(g, x, scale: float, zero_point: int, qdtype):
    """PyTorch's ``quantize_per_tensor`` on x86 (whatever the engine): ``x * (1.f /
    float(scale))`` rounded half to even, with the zero point added where this torch adds it
    (helpers/quantize_rounding.py): inside the rounding (fbgemm's fused multiply-add, torch
    <= 2.13; computed in f64, where the product of two float32 is exact, then rounded to
    float32) or after it (torch 2.14). Measured equal to PyTorch on 2 M random values with
    each."""
    fused = zero_point_rounded_with_product()
    if fused is None:
        raise g.error(f"this PyTorch ({torch.__version__}) rounds quantize_per_tensor in a way "
                      "t2n does not know (neither fbgemm's fused multiply-add nor the product "
                      "rounded first)")
    f32, f64 = torch.float32, torch.float64
    inv = float(torch.tensor(1.0, dtype=f32) / torch.tensor(scale, dtype=f32))
    if not fused:
        product = int32_wrapped(g, g.binary("mul", g.cast(x, f32), inv, f32), zero_point)
        return rounded_to(g, product, scale, zero_point, qdtype)
    y = g.binary("mul", g.cast(g.cast(x, f32), f64), inv, f64)
    if zero_point:
        y = g.binary("add", y, float(zero_point), f64)
    return rounded_to(g, g.cast(y, f32), scale, 0, qdtype, zero_point=zero_point)


def _number(g, v, what):
    if hasattr(v, "is_const"):
        if not v.is_const or v.value.numel() != 1:
            raise g.error(f"{what}: a quantization parameter computed at run time is not "
                          "supported")
        return v.value.item()
    return v


@aten("dequantize")
def dequantize(g, self):
    if not is_quantized(self):
        return self
    out = dequantize_tensor(g, self)
    # the check accepts one quantization step of difference on this output (t2n.api)
    g.session.quantized.steps[id(out)] = qparams(g, self)[0]
    return out


# ---------------------------------------------------------------------------- int8 kernels
def _qconv(g, x, wq: torch.Tensor, bias, stride, padding, dilation, groups, out_scale,
           out_zp, out_dtype, kind, relu=False):
    """Quantized convolution of quantized ``x`` with torch weight ``wq``.

    The exact int32 sums ``sum((x - x0) * (w - w0))`` come from tract_core_qconv (every
    scale 1) or, where exact and faster, tract's float products (helpers/grouped_int8.py);
    they are then requantized in float as PyTorch's kernel does. ``out_scale`` None
    returns (acc, w_scales) for dynamic layers."""
    wi, a0, a_scale, a_scales = weight_parts(g, wq)  # integers, a0, scale(s)
    n = wi.dim() - 2
    x_scale, x_zp = qparams(g, x) if is_quantized(x) and out_scale is not None else (1.0, 0)
    w = g.variable(wi.contiguous(), _label(g, kind) + ".weight")
    per = wq.q_per_channel_scales() if a_scales is not None else \
        torch.tensor([a_scale], dtype=torch.float64)  # double, as the weight holds them
    spatial = []
    for i in range(n):
        length = x.shape[2 + i]
        k = wi.shape[2 + i]
        spatial.append((length + 2 * padding[i] - dilation[i] * (k - 1) - 1) // stride[i] + 1)
    out_shape = [x.shape[0], wi.shape[0]] + spatial
    if groups > 1 and out_scale is not None and float_sums_exact(wi, a0, RANGE[x.dtype]):
        acc = grouped_sums_in_float(g, integers_as_float(g, x), w, a0, x_zp, groups, dilation,
                                    stride, padding, out_shape)
    elif out_scale is not None and pointwise_in_float(wi, a0, RANGE[x.dtype], stride, padding):
        acc = pointwise_sums_in_float(g, integers_as_float(g, x), w, a0, x_zp, out_shape)
    else:
        xq, pads, b0, correction = x, padding, int(x_zp), None
        if out_scale is not None and worth_it(wi, x.dtype):  # helpers/int8_inputs.py
            correction = zero_point_sums(wi, a0, x.dtype, b0)
            xq, pads = signed_input(g, integers_as_float(g, x), x.dtype, b0, padding)
            b0 = 0
        acc = g.op("tract_core_qconv", xq, w, g.const(torch.zeros((), dtype=torch.int32)),
                   group=groups, groups=groups, dilation=list(dilation), stride=list(stride),
                   padding=[(p, p) for p in pads], border="constant", a0=a0, a_scale=1.0,
                   b0=b0, b_scale=1.0, c0=0, c_scale=1.0, output_dt="i32",
                   out_dtype=torch.int32, out_shape=out_shape)
        if correction is not None:
            acc = g.binary("add", acc, g.const(correction.reshape([1, -1] + [1] * n)),
                           torch.int32)
    if out_scale is None:
        return acc, per
    shape = [1, -1] + [1] * n
    engine = torch.backends.quantized.engine
    if engine in _SINGLE_MULTIPLIER:
        form = _kernel_form(g, engine, kind, wq, bias, stride, padding, dilation, groups, x,
                            relu)
        return _requantized_sums(g, acc, per, x_scale, bias, shape, out_scale, out_zp, out_dtype,
                                 relu, form, a_scales is not None)
    f = g.cast(acc, torch.float32)
    f = g.binary("mul", f, g.const((per.double() * x_scale).float().reshape(shape)),
                 torch.float32)
    if bias is not None:
        f = g.binary("add", f, g.const(bias.detach().float().reshape(shape)), torch.float32)
    return quantize(g, f, out_scale, out_zp, out_dtype, relu=relu)


# engines whose conv and linear kernels requantize the int32 sums with one float32 multiplier
_SINGLE_MULTIPLIER = ("qnnpack", "x86", "fbgemm")


def _kernel_form(g, engine, kind, wq, bias, stride, padding, dilation, groups, x, relu):
    """Which float steps PyTorch's kernel for this layer takes from the int32 sums to the
    integers (helpers/requantization.py): qnnpack's one form, or, for x86/fbgemm, the one
    the running torch is found to use for a layer of this structure (fbgemm's, or oneDNN's
    on a CPU with AVX-512 VNNI for symmetric weights); refused when none matches."""
    if engine == "qnnpack":
        return "qnnpack"
    linear = kind == "linear"  # run as a 1-wide 1-D convolution: [N, K, 1] weight, [M, K, 1]
    form = requantization_form(kind, wq, bias is not None, stride, padding, dilation,
                               groups, list(x.shape)[:2] if linear else list(x.shape),
                               x.dtype, relu)
    if form is None:
        raise g.error(f"{kind}: this PyTorch's {engine} kernel requantizes a layer like this "
                      f"one (weight {tuple(wq.shape)}, groups {groups}) in a way t2n does not "
                      "know (neither fbgemm's nor oneDNN's float steps)")
    return form


def _requantized_sums(g, acc, w_scales, x_scale, bias, shape, out_scale, out_zp, out_dtype,
                      relu, form, per_channel):
    """The int32 sums requantized as PyTorch's kernel does (``form``, the engine set when
    exporting and the kernel it runs, helpers/requantization.py): each scales the total in
    float32, rounds half to even, adds the zero point (before the rounding, in float32, in
    oneDNN's kernels) and clamps (a fused ReLU clamps at the zero point); they differ in the
    bias and the order of the products:

    - qnnpack quantizes the bias to int32 with the double scale ``w_scale * x_scale`` (its
      ``quantize_per_channel``, or ``_per_tensor``), adds it to the sums, then multiplies
      by ``(w_scale * x_scale) * (1 / out_scale)`` in float32;
    - fbgemm (the x86 and fbgemm engines) adds ``bias / (w_scale * x_scale)`` in float32 to
      the sums converted to float32 (per-tensor weights on AVX-512: ``bias * (1 / (w_scale
      * x_scale))`` in one fused multiply-add), then multiplies by the same one multiplier;
    - oneDNN (x86 on a CPU with AVX-512 VNNI, symmetric weights, at most 100 groups)
      multiplies by the input and weight scales (at once or one after the other, per
      kernel), adds the bias, multiplies by ``1 / out_scale`` and adds the zero point.

    Computing ``acc * x_scale * w_scale + bias`` then dividing by the output scale instead
    differs from them by one step where the value lies near a rounding tie (measured: 5 of
    the 20 M outputs of a ResNet-50, which its 50 layers then grew to 4 steps of the
    output; MobileNetV2 on oneDNN: 20 of 6 M, grown to 0.07 of the output); these forms
    were measured bit-exact on every layer of both."""
    r = requantization(form, w_scales, x_scale, bias, out_scale, out_zp, per_channel)
    y = emit_steps(g, r, acc, shape)  # with the zero point when it goes inside the rounding
    if not r.zero_point_inside:
        return rounded_to(g, y, out_scale, out_zp, out_dtype, relu)
    return rounded_to(g, y, out_scale, 0, out_dtype, relu, zero_point=out_zp)


def _packed_conv(g, packed, what):
    if bool(packed.transpose()):
        raise g.error(f"{what}: quantized transposed convolutions are not supported")
    w, bias = packed.unpack()
    return w, bias, list(packed.stride()), list(packed.padding()), list(packed.dilation()), \
        int(packed.groups())


@aten("quantized::conv2d", "quantized::conv2d_relu", "quantized::conv3d",
      "quantized::conv3d_relu")
def quantized_conv(g, qx, packed_weight, output_scale, output_zero_point):
    w, bias, stride, padding, dilation, groups = _packed_conv(g, packed_weight, "weight")
    relu = g.node.op.endswith("_relu")
    return _qconv(g, qx, w, bias, stride, padding, dilation, groups, output_scale,
                  output_zero_point, qx.dtype, "conv", relu=relu)


@aten("quantized::conv1d", "quantized::conv1d_relu")
def quantized_conv1d(g, qx, packed_weight, output_scale, output_zero_point):
    """PyTorch packs a 1-D convolution as a 2-D one over a height of 1 (weight ``[O, I/g,
    1, k]``, stride, padding and dilation ``[1, s]``, ``[0, p]``, ``[1, d]``): so is it
    run here, on the input with that height added."""
    w, bias, stride, padding, dilation, groups = _packed_conv(g, packed_weight, "weight")
    y = _qconv(g, g.unsqueeze(qx, [2]), w, bias, stride, padding, dilation, groups,
               output_scale, output_zero_point, qx.dtype, "conv", relu=g.node.op.endswith("_relu"))
    return g.squeeze(y, [2])


def _as_rows(g, x):
    """[..., K] -> [M, K, 1] (M rows as the batch of a 1-D convolution)."""
    k = x.shape[-1]
    m = 1
    for d in x.shape[:-1]:
        m = m * d
    return g.reshape(x, [m, k, 1])


def _from_rows(g, y, lead):
    return g.reshape(y, list(lead) + [y.shape[1]])


@aten("quantized::linear", "quantized::linear_relu")
def quantized_linear(g, X, W_prepack, Y_scale_i, Y_zero_point_i):
    w, bias = W_prepack.unpack()
    rows = _as_rows(g, X)
    y = _qconv(g, rows, w.unsqueeze(-1), bias, [1], [0], [1], 1, Y_scale_i, Y_zero_point_i,
               X.dtype, "linear", relu=g.node.op.endswith("_relu"))
    return _from_rows(g, y, X.shape[:-1])


@aten("quantized::linear_dynamic", "quantized::linear_relu_dynamic")
def quantized_linear_dynamic(g, input, W_prepack, reduce_range=False):
    """PyTorch's dynamic linear: the input is quantized per call to u8 from its own range
    (min/max with 0 included; 7 bits with reduce_range on x86/fbgemm), the product
    accumulates in int32 (tract_core_qconv), and ``acc * (x_scale * w_scale) + bias`` is
    computed in float as the engine's kernel does (t2n/mappings/helpers/dynamic_quant.py)."""
    w, bias = W_prepack.unpack()
    weight = int8_weight(g, w, _label(g, "linear_dynamic") + ".weight")
    f = dynamic_linear(g, g.cast(input, torch.float32), weight,
                       reduce_range_for_engine(reduce_range), bias)
    if g.node.op.endswith("_relu_dynamic"):
        f = g.op("relu", f)
    return g.cast(f, input.dtype)


@aten("quantized::linear_dynamic_fp16", "quantized::linear_relu_dynamic_fp16")
def quantized_linear_dynamic_fp16(g, input, W_prepack):
    """``quantize_dynamic(..., dtype=torch.float16)``'s linear: float input, weights rounded
    to float16 (stored so: half the archive), products accumulated in float32 (what
    fbgemm's fp16 kernels do)."""
    w, bias = W_prepack.unpack()
    label = _label(g, "linear_dynamic_fp16")
    weight = g.cast(g.variable(w.detach().half(), label + ".weight"), torch.float32)
    b = g.variable(bias.detach().float(), label + ".bias") if bias is not None else None
    y = _float_call(g, "linear", g.cast(input, torch.float32), weight, b)
    if g.node.op.endswith("_relu_dynamic_fp16"):
        y = g.op("relu", y)
    return g.cast(y, input.dtype)


# ---------------------------------------------------------------------------- recurrent
@aten("quantized_lstm")
@own_shapes
def quantized_lstm(g, input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                   batch_first, dtype=None, use_dynamic=False):
    """``quantize_dynamic``'s LSTM: the float LSTM's loop (t2n/mappings/helpers/recurrence.py)
    with int8 products, quantizing the whole input once for the input projection and each
    direction's state at every step, as PyTorch's dynamic cells do."""
    weights, products = _dynamic_cells(g, params, has_biases, "lstm_dynamic")
    outs = layers(g, "lstm", input, list(hx), weights, has_biases, num_layers, dropout,
                  train, bidirectional, batch_first, None, products)
    return _one_state_step(g, outs, weights, products)


@aten("quantized_gru")
@own_shapes
def quantized_gru(g, input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                  batch_first):
    """``quantize_dynamic``'s GRU (see :func:`quantized_lstm`)."""
    weights, products = _dynamic_cells(g, params, has_biases, "gru_dynamic")
    outs = layers(g, "gru", input, [hx], weights, has_biases, num_layers, dropout, train,
                  bidirectional, batch_first, None, products)
    return _one_state_step(g, outs, weights, products)


def _one_state_step(g, outs, weights, products):
    """The check's tolerance for these outputs: one quantization step of a state (range
    at most 2, tanh-bounded, over ``qmax`` levels) through the largest weight it meets.
    tract's tanh and sigmoid differ from PyTorch's in the last place; on a long sequence
    such a difference now and then moves one integer of a per-step quantization, and the
    outputs then differ by about that much (measured: 1e-4 after 47 steps of a 128-wide
    LSTM, whose step is 1.4e-3), where a float or wrongly quantized lowering differs by
    the quantization error itself (1e-2 on the same model)."""
    if products is FLOAT_PRODUCTS:  # float16 weights: float products, the float check
        return outs
    qmax = 127.0 if products.reduce_range else 255.0
    largest = max(float((w.ints.float().abs() * w.scales[:, None]).max())
                  for w in weights if hasattr(w, "ints"))
    steps = g.session.quantized.steps
    for t in outs:
        steps[id(t)] = 2.0 / qmax * largest
    return outs


def _dynamic_cells(g, params, has_biases, kind):
    """PyTorch's cell parameters (``CellParamsBase``, one per layer and direction) as the
    lists the recurrent layers read: int8 weights ``w_ih, w_hh`` and float biases."""
    out, reduce_range, kinds = [], False, set()
    for p in params:
        state = p.__getstate__()[0] if hasattr(p, "__getstate__") else None
        if not state or state[0] not in ("quantized_dynamic", "quantized_fp16"):
            got = state[0] if state else type(p).__name__
            raise g.error(f"params: {got} cell parameters are not supported (t2n converts "
                          "quantize_dynamic(..., dtype=torch.qint8 or torch.float16) "
                          "recurrent layers)")
        kinds.add(state[0])
        _, _, _, longs, packed = state
        reduce_range = bool(longs[0]) if longs else False
        label = _label(g, kind)
        (w_ih, b_ih), (w_hh, b_hh) = packed[0].unpack(), packed[1].unpack()
        if state[0] == "quantized_fp16":  # float products of the f16-rounded weights
            out += [g.variable(w.detach().float(), f"{label}.{name}")
                    for w, name in ((w_ih, "weight_ih"), (w_hh, "weight_hh"))]
        else:
            out += [int8_weight(g, w_ih, label + ".weight_ih"),
                    int8_weight(g, w_hh, label + ".weight_hh")]
        if has_biases:
            out += [g.variable(_float_bias(b, w), f"{label}.{name}")
                    for b, w, name in ((b_ih, w_ih, "bias_ih"), (b_hh, w_hh, "bias_hh"))]
    if kinds == {"quantized_fp16"}:
        return out, FLOAT_PRODUCTS
    if len(kinds) > 1:
        raise g.error("params: int8 and float16 cell parameters mixed in one layer stack")
    return out, DynamicInt8Products(reduce_range)


def _float_bias(b, w):
    if b is None:
        return torch.zeros(w.shape[0], dtype=torch.float32)
    return b.detach().float()


# ---------------------------------------------------------------------------- float paths
@aten("quantized::add", "quantized::add_relu", "quantized::mul", "quantized::mul_relu")
def quantized_binary(g, qa, qb, scale, zero_point):
    """``add``: PyTorch's kernel dequantizes both inputs as its vectors do (a fused
    multiply-add with the premultiplied zero point), adds them in float32 and quantizes."""
    kind = "mul" if "mul" in g.node.op else "add"
    vectors = kind == "add" and torch.backends.quantized.engine != "qnnpack"
    dq = dequantized_as_vectors if vectors else dequantize_tensor
    f = g.binary(kind, dq(g, qa), dq(g, qb), torch.float32)
    return quantize(g, f, scale, zero_point, qa.dtype, relu=g.node.op.endswith("_relu"))


@aten("quantized::add_scalar", "quantized::add_scalar_relu", "quantized::mul_scalar",
      "quantized::mul_scalar_relu")
def quantized_binary_scalar(g, qa, b):
    """PyTorch picks the output parameters of these from the input's: not reproduced."""
    raise g.error("quantized add/mul with a Python scalar is not supported (use "
                  "FloatFunctional.add with a tensor)")


@aten("quantized::cat", "quantized::cat_relu")
def quantized_cat(g, qx, dim, scale, zero_point):
    fs = [dequantize_tensor(g, q) for q in qx]
    dim = dim % fs[0].rank
    return quantize(g, g.concat(fs, dim), scale, zero_point, qx[0].dtype,
                        relu=g.node.op.endswith("_relu"))


@aten("quantized::batch_norm2d", "quantized::batch_norm2d_relu", "quantized::batch_norm1d",
      "quantized::batch_norm3d", "quantized::batch_norm")
def quantized_batch_norm(g, qx, weight, bias, mean, var, eps, output_scale, output_zero_point):
    """PyTorch's quantized batch norm kernel: per channel ``alpha`` and ``beta`` computed
    in its float and double steps (``compute_fused_params``), then ``fma(alpha, q - zp,
    beta)`` rounded half to even plus the output zero point (its vector body; the fma in
    f64, where the product is exact, rounded once to float32)."""
    if any(not hasattr(t, "value") or t.value is None for t in (weight, bias, mean, var)):
        raise g.error("batch norm statistics computed at run time are not supported")
    alpha, beta = _batch_norm_params(weight.value, bias.value, mean.value, var.value,
                                     float(eps), qparams(g, qx)[0], float(output_scale))
    shape = [1, -1] + [1] * (qx.rank - 2)
    f64 = torch.float64
    d = g.binary("sub", integers_as_float(g, qx), float(qparams(g, qx)[1]), torch.float32)
    y = g.binary("add", g.binary("mul", g.cast(d, f64), g.const(alpha.reshape(shape)), f64),
                 g.const(beta.reshape(shape)), f64)
    return rounded_to(g, g.cast(y, torch.float32), float(output_scale),
                      int(output_zero_point), qx.dtype, relu=g.node.op.endswith("_relu"))


def _batch_norm_params(weight, bias, mean, var, eps, x_scale, out_scale):
    """(alpha, beta) per channel as f64 tensors holding PyTorch's float32 values:
    ``inv_sigma = float(1.0 / sqrtf(var + float(eps)))``, ``alpha = float(inv_sigma *
    weight * (x_scale / out_scale))`` (the last ratio in double) and ``beta = float((bias -
    mean * inv_sigma * weight) / out_scale)`` (float32 steps, the division in double)."""
    f32 = torch.float32
    w, b = weight.detach().to(f32), bias.detach().to(f32)
    m, v = mean.detach().to(f32), var.detach().to(f32)
    inv_sigma = (1.0 / torch.sqrt(v + torch.tensor(eps, dtype=f32)).double()).to(f32)
    alpha = ((inv_sigma * w).double() * (x_scale / out_scale)).to(f32)
    beta = ((b - m * inv_sigma * w).double() / out_scale).to(f32)
    return alpha.double(), beta.double()


@quantized_variant("relu", "relu_")
def relu_q(g, self):
    return _relu_q(g, self)


@quantized_variant("avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d",
                   "adaptive_avg_pool2d", "adaptive_avg_pool3d", "mean", "upsample_bilinear2d")
def averaging_on_integers(g, self, *args):
    """Averages keep the input's scale and zero point: PyTorch's kernels average the
    integers and round half to even, some after taking the zero point off (which changes
    the rounding at ties when it is odd: which kernels do depends on the op, the input's
    memory layout and the torch version, helpers/quantize_rounding.py); so does this, on
    the integers as exact floats."""
    scale, zp = qparams(g, self)
    lo, hi = RANGE[self.dtype]
    name = g.node.op.removeprefix("aten::")
    f = _float_call(g, name, integers_as_float(g, self), *args)
    probe = name + " global" if name.startswith("adaptive") and _all_ones(args[0]) else name
    channels = self.shape[1] if self.rank >= 2 and isinstance(self.shape[1], int) else None
    offset = average_rounded_off_zero_point(probe, self.rank, _channels_last(g, self),
                                            channels) if zp else False
    offset = offset if isinstance(offset, tuple) else (offset,)
    plain = None if all(offset) else rounded_plus(g, f, 0, (lo, hi))
    y = plain
    if any(offset):  # round(f - zp) + zp
        y = rounded_plus(g, g.binary("sub", f, float(zp), torch.float32), zp, (lo, hi))
        if plain is not None:  # only some channels (PyTorch's vector lanes) round so
            mask = torch.tensor(offset).reshape([1, len(offset)] + [1] * (self.rank - 2))
            y = g.op("select", g.const(mask), y, plain, out_dtype=torch.float32)
    y = g.op("tract_core_cast", g.op("clamp", y, float(lo), float(hi)),
             to=dtypes.tract_name(self.dtype), out_dtype=self.dtype)
    return set_qparams(g, y, scale, zp)


def _all_ones(sizes) -> bool:
    sizes = list(sizes) if isinstance(sizes, (list, tuple)) else [sizes]
    return all(isinstance(n, int) and n == 1 for n in sizes)


def _channels_last(g, x) -> bool:
    """Whether the traced input was channels-last contiguous (PyTorch's kernel choice)."""
    strides = g.node.in_strides[0] if g.node is not None and g.node.in_strides else None
    return x.rank in (4, 5) and all(isinstance(n, int) for n in x.shape[1:]) and \
        channels_last_contiguous([1] + list(x.shape[1:]), strides)


@quantized_variant("hardtanh", "hardtanh_", "relu6", "clamp", "leaky_relu", "hardswish",
                   "upsample_nearest2d", "sigmoid", "sigmoid_", "hardsigmoid", "hardsigmoid_",
                   "tanh", "tanh_", "gelu")
def element_wise_on_integers(g, self, *args):
    """Element-wise ops on a quantized tensor: the map of the integers the running torch's
    kernel computes, asked of it (helpers/quantized_maps.py: a clamp, or a lookup of the
    256 integers); else (an op PyTorch runs on the dequantized values with the input's
    scale and zero point kept, or arguments that are tensors) computed on the dequantized
    values and requantized."""
    scale, zp = qparams(g, self)
    name = g.node.op.removeprefix("aten::")
    m = _integer_map(g, self, name, args)
    if m is not None:
        return integers_mapped(g, self, m)
    if name.rstrip("_") in ("sigmoid", "hardsigmoid", "tanh", "gelu"):
        raise g.error(f"{name} of a quantized tensor: this PyTorch's kernel did not run on "
                      "the probe (no quantized kernel for these arguments)")
    f = _float_call(g, name, dequantize_tensor(g, self), *args)
    return quantize(g, f, scale, zp, self.dtype)


def _integer_map(g, q, name, args):
    """helpers/quantized_maps.py's map of ``name`` on ``q``, or an error where the running
    kernel scrambles a channels-last input (PyTorch's result is then not an element-wise
    function of its input)."""
    scale, zp = qparams(g, q)
    try:
        return integer_map(name, args, scale, zp, q.dtype, _channels_last(g, q))
    except ScrambledLayout:
        raise g.error(
            f"{name} of a channels-last quantized tensor: this PyTorch's "
            f"{torch.backends.quantized.engine} kernel returns the elements of such a tensor "
            "out of place (a PyTorch bug: its result is not the op applied element by "
            "element), so there is nothing correct to reproduce. Run the model with "
            "another quantized engine (x86), or make the input contiguous before the op"
        ) from None


def _float_call(g, name: str, *args):
    """The float mapping of aten ``name``, told that the node's outputs are float32 (the
    traced node has quantized ones; torch.export's has none, its fake tensors having no
    quantized dtype: walk/fx_walker.py's ``_quantized_outs``)."""
    saved = g.node
    g.node = dataclasses.replace(saved, op=f"aten::{name}", out_dtypes=[
        torch.float32 if d is None or d in dtypes.QUANTIZED else d for d in saved.out_dtypes])
    try:
        return lookup(name)(g, *args)
    finally:
        g.node = saved


def _activation(g, qx, output_scale, output_zero_point, name, *args, probe=()):
    """``name`` with given output parameters: the running kernel's map of the integers
    (``probe``: the quantized op's arguments after the input), else in float."""
    if probe:
        m = _integer_map(g, qx, probe[0], probe[1:])
        if m is not None:
            return integers_mapped(g, qx, m)
    f = _float_call(g, name, dequantize_tensor(g, qx), *args)
    return quantize(g, f, float(output_scale), int(output_zero_point), qx.dtype)


@aten("quantized::hardswish")
def quantized_hardswish(g, qx, output_scale, output_zero_point):
    return _activation(g, qx, output_scale, output_zero_point, "hardswish", probe=(
        "quantized::hardswish", float(output_scale), int(output_zero_point)))


@aten("quantized::sigmoid")
def quantized_sigmoid(g, qx, output_scale, output_zero_point):
    return _activation(g, qx, output_scale, output_zero_point, "sigmoid", probe=(
        "quantized::sigmoid", float(output_scale), int(output_zero_point)))


@aten("quantized::leaky_relu")
def quantized_leaky_relu(g, qx, negative_slope, inplace, output_scale, output_zero_point):
    return _activation(g, qx, output_scale, output_zero_point, "leaky_relu", negative_slope,
                       probe=("quantized::leaky_relu", float(negative_slope), False,
                              float(output_scale), int(output_zero_point)))


@aten("quantized::relu6")
def quantized_relu6(g, qx, inplace=False):
    scale, zp = qparams(g, qx)
    return _activation(g, qx, scale, zp, "hardtanh", 0.0, 6.0, probe=("quantized::relu6",))
