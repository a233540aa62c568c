"""PyTorch's "opmath" for half tensors: which aten ops compute in float32 on float16 inputs.

PyTorch's CPU kernels for ``torch.float16`` tensors mostly load each value as a float,
compute the op's intermediates in float32 (``at::opmath_type<Half>`` = ``float``, and the
reduction accumulators ``at::acc_type<Half>``) and round the result to float16 once. tract
computes an f16 graph in f16: a lowering of several NNEF ops rounds after each of them, and
a long sum, a convolution or a variance rounds (and overflows) where PyTorch does not.

This module is the one table of those rules, consulted by the walkers around every mapping
call (:func:`call`): an aten op listed in :data:`F32_OPS`, given float16 tensors, has them
cast to float32, its mapping run as for a float32 node (``g.out_dtype()`` answers float32),
and its float results cast back to float16 once. Ops that are not listed keep f16: the
element-wise ops tract evaluates with one rounding (add, mul, div, sqrt, comparisons,
selections), shape and indexing ops, and the ops PyTorch itself computes step by step in
float16: ``prod`` multiplies half values (it overflows where an f32 product would not),
``scatter_add``/``index_add``/``segment_reduce`` accumulate into the f16 output, the
composite ops (``linalg_vecdot``, ``cov``/``corrcoef``, ``cosine_similarity``,
``cosine_embedding_loss``, ``soft_margin_loss``, ``binary_cross_entropy_with_logits``,
``hinge_embedding_loss``, the trapezoid rules) round after each of their aten steps,
``logit`` and ``xlogy`` round their intermediate, ``conv_transpose`` adds its kernel
taps' columns (each an f32 product rounded to f16) into the output in f16, tap after tap
(its Half kernel; where torch runs it with oneDNN instead, on CPUs with AVX512-FP16, in
float32 rounded once: t2n/mappings/helpers/conv_backend.py asks which),
and ``adaptive_avg_pool3d``'s Half kernel (any output but 1 x 1 x 1, which is a float mean)
sums each window in f16 in order and divides by each window size in turn.
Mappings of ops whose PyTorch steps matter in f16 follow those steps themselves
(``addr``, ``bilinear``, ``addbmm`` in t2n/mappings/products.py; the ordered f16 sums of
``conv_transpose`` and ``adaptive_avg_pool3d`` with t2n/mappings/helpers/ordered_sum.py). Ops in
:data:`_HALF_WEIGHTS` compute in float32 but PyTorch stores their computed weights as
float16: :func:`call` says so in ``g.node.weights_dtype`` and the mapping rounds them.

Each rule was checked against torch 2.13's CPU kernels by comparing the f16 result with the
float32 result rounded once; tests/test_opmath.py and the float16 OpInfo sweep
(tests/test_opinfo_dtypes.py, ``tools/opinfo_sweep.py --dtype float16``) pin the outcome.
Float32 and float64 graphs are untouched: the rule only applies when a tensor argument or a
result of the node is float16.
"""

from __future__ import annotations

import dataclasses

import torch

HALF, OPMATH = torch.float16, torch.float32

# --- reductions and scans: accumulated in float (acc_type<Half> = float) ---------------
_REDUCTIONS = {
    "sum", "mean", "nansum", "nanmean", "logsumexp", "special_logsumexp", "std", "var",
    "std_mean", "var_mean", "norm", "linalg_norm", "linalg_vector_norm",
    "linalg_matrix_norm", "renorm", "trace", "cumsum", "logcumsumexp", "cumprod",
    "embedding_bag", "_embedding_bag", "_embedding_bag_forward_only",
}
# --- normalisation: statistics and the affine step in float --------------------------
_NORMS = {
    "batch_norm", "instance_norm", "layer_norm", "group_norm", "native_batch_norm",
    "native_layer_norm", "native_group_norm", "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional",
    "_batch_norm_with_update", "_batch_norm_no_update", "rms_norm",
}
# --- softmax family and attention: float accumulation -----------------------------------
_SOFTMAX = {
    "softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax",
    "_softmax_backward_data", "scaled_dot_product_attention",
}
# --- matrix products and convolutions: float accumulation, one rounding of
# ``beta * input + alpha * product`` (cpublas gemm for Half) ------------------------------
_PRODUCTS = {
    "mm", "bmm", "matmul", "linear", "addmm", "baddbmm", "addmv", "mv",
    "dot", "vdot", "inner", "einsum", "tensordot", "_grouped_mm",
    "chain_matmul", "linalg_multi_dot", "conv1d", "conv2d", "conv3d", "convolution",
    "_convolution", "_convolution_mode",
}
# --- resampling: interpolation weights and sums in float -----------------------------
_RESAMPLING = {
    "upsample_linear1d", "upsample_bilinear2d", "upsample_bicubic2d", "upsample_trilinear3d",
    "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa", "avg_pool1d", "avg_pool2d",
    "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "_adaptive_avg_pool2d",
}
# --- distances: differences, squares and sums in float -------------------------------
_DISTANCES = {
    "dist", "cdist", "_cdist_forward", "pdist", "_pdist_forward", "pairwise_distance",
}
# --- element-wise kernels evaluated as one float formula (Vectorized<Half> converts to
# float, computes, rounds once); t2n lowers most of them to several NNEF ops -------------
_FORMULAS = {
    # activations
    "mish", "gelu", "silu", "softplus", "elu", "celu", "selu", "hardswish", "hardsigmoid",
    "log_sigmoid", "glu", "sigmoid", "tanh",
    # blends
    "lerp", "addcmul", "addcdiv", "hypot", "logaddexp", "logaddexp2", "atan2", "arctan2",
    "copysign", "fmod", "remainder",
    # transcendental functions
    "exp", "exp2", "special_exp2", "expm1", "special_expm1", "log", "log2", "log10", "log1p",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "erf", "erfc", "erfinv", "special_erf", "special_erfc", "special_erfinv", "special_erfcx",
    "sinc", "special_sinc", "lgamma", "digamma", "special_digamma", "special_psi",
    "polygamma", "special_polygamma", "mvlgamma", "special_multigammaln", "i0", "special_i0",
    "special_i0e", "special_i1", "special_i1e", "special_ndtr", "special_ndtri",
    "special_log_ndtr", "special_entr", "special_zeta", "igamma", "igammac",
    "special_gammainc", "special_gammaincc", "special_bessel_j0", "special_bessel_j1",
    "special_bessel_y0", "special_bessel_y1", "special_modified_bessel_i0",
    "special_modified_bessel_i1", "special_modified_bessel_k0", "special_modified_bessel_k1",
    "special_scaled_modified_bessel_k0", "special_scaled_modified_bessel_k1",
    "special_spherical_bessel_j0", "special_airy_ai", "pow", "float_power", "reciprocal",
    "rsqrt",
}
# --- losses: per-element terms and their reduction in float ---------------------------
_LOSSES = {
    "binary_cross_entropy", "cross_entropy_loss",
    "nll_loss", "nll_loss2d", "nll_loss_nd", "kl_div", "mse_loss", "l1_loss",
    "smooth_l1_loss", "huber_loss", "multi_margin_loss",
    "multilabel_margin_loss", "margin_ranking_loss", "triplet_margin_loss",
}

# --- resampling whose weights PyTorch stores as Half: the generic CPU upsample kernel
# computes each axis's tap weights in float, keeps them in a tensor of the input's dtype
# (``float16``: one rounding per weight; linear's second weight is ``1 - lambda`` taken of the
# rounded first), then sums the taps in float. Its channels-last kernel, which 2-D bilinear
# uses for small outputs (see t2n/mappings/interpolate.py), keeps float weights.
_HALF_WEIGHTS = {"upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d",
                 "upsample_bicubic2d"}

# ops whose Python-number operand PyTorch casts to the tensors' Half dtype before the float
# formula (TensorIterator's common dtype; measured: fmod(x, 0.3) is fmod(x, 0.2998...)).
# Other formulas keep the number in float (mul, div, lerp's weight) and are not listed.
_HALF_SCALARS = {"fmod", "remainder"}

# tract kernels that are not correctly rounded in float16 (its f16 division multiplies by
# the reciprocal: one ulp off on about a quarter of random operands, which linspace's step
# multiplies). PyTorch's Half division is a float division rounded once: the builder emits
# that for every f16 division, an aten op's or a lowering's.
TRACT_F16_WIDENED = frozenset({"div"})

F32_OPS = frozenset(_REDUCTIONS | _NORMS | _SOFTMAX | _PRODUCTS | _RESAMPLING | _DISTANCES
                    | _FORMULAS | _LOSSES)


def _not_global_pool(args) -> bool:
    out = args[1] if len(args) > 1 else None
    sizes = list(out) if isinstance(out, (list, tuple)) else [out] * 3
    return not all(s == 1 for s in sizes)


# argument-dependent exceptions: the generic convolution ops with ``transposed=True``
# (argument 6) run PyTorch's col2im path, which sums the columns in f16;
# ``adaptive_avg_pool3d`` is a float mean for an output of 1 x 1 x 1 and otherwise the
# Half kernel (``_adaptive_avg_pool3d``) that sums each window in f16
_UNLESS = {"convolution": lambda args: len(args) > 6 and bool(args[6]),
           "_convolution": lambda args: len(args) > 6 and bool(args[6]),
           "adaptive_avg_pool3d": _not_global_pool}


# float16 ops whose PyTorch result is defined by its own step-by-step f16 rounding, which
# t2n does not reproduce (measured on OpInfo samples: differences far beyond a few f16 ulps):
# refused for half tensors rather than exported with other numbers. float32 is unaffected.
_F16_REFUSED = {
    "grid_sampler": "PyTorch rounds grid_sample's coordinates and weights in f16",
    "grid_sampler_2d": "PyTorch rounds grid_sample's coordinates and weights in f16",
    "grid_sampler_3d": "PyTorch rounds grid_sample's coordinates and weights in f16",
}


def f16_refusal(name: str, args) -> str | None:
    """Why PyTorch's float16 result of this node cannot be reproduced, or None."""
    if not _has_half(args):
        return None
    return _F16_REFUSED.get(name)


def computes_in_f32(name: str, args=()) -> bool:
    """Whether PyTorch computes aten op ``name`` (or its in-place form) in float32 for
    float16 tensors (given the node's resolved arguments)."""
    base = name[:-1] if name.endswith("_") and name[:-1] in F32_OPS else name
    if base not in F32_OPS:
        return False
    unless = _UNLESS.get(base)
    return unless is None or not unless(args)


def _has_half(values) -> bool:
    from t2n.walk.tensors import Tensor

    for v in values:
        if isinstance(v, Tensor) and v.dtype == HALF:
            return True
        if isinstance(v, (list, tuple)) and _has_half(v):
            return True
    return False


def _up(g, v, half_scalars=False):
    from t2n.walk.tensors import Tensor

    if half_scalars and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(torch.tensor(v, dtype=HALF))
    if isinstance(v, Tensor) and v.dtype == HALF:
        key = ("opmath cast", id(v))  # one cast per f16 tensor of the graph
        hit = g.shared.get(key)
        if hit is None or hit[0] is not v:
            hit = g.shared[key] = (v, g.cast(v, OPMATH))
        return hit[1]
    if isinstance(v, list):
        return [_up(g, x) for x in v]
    if isinstance(v, tuple):
        return tuple(_up(g, x) for x in v)
    if v is HALF:  # a dtype= argument asking for half: the rule computes in float
        return OPMATH
    return v


def _down(g, r, dtype):
    from t2n.walk.tensors import Tensor

    if isinstance(r, Tensor) and r.dtype == OPMATH and dtype in (HALF, None):
        return g.cast(r, HALF)
    return r


def call(g, name: str, fn, args: list):
    """``fn(g, *args)``, computed in float32 when the rule table says PyTorch does so for
    float16 arguments; the results are rounded back to float16 once."""
    refused = f16_refusal(name, args)
    if refused is not None:
        raise g.error(f"float16 input: {refused}, a step-by-step rounding t2n does not "
                      "reproduce; export the model in float32")
    node = g.node
    if node is None or not computes_in_f32(name, args):
        return fn(g, *args)
    outs = list(node.out_dtypes)
    if not (_has_half(args) or HALF in outs):
        return fn(g, *args)
    base = name[:-1] if name.endswith("_") else name
    g.node = dataclasses.replace(node, out_dtypes=[OPMATH if d == HALF else d for d in outs],
                                 weights_dtype=HALF if base in _HALF_WEIGHTS else None)
    try:
        result = fn(g, *[_up(g, a, base in _HALF_SCALARS) for a in args])
    finally:
        g.node = node
    if isinstance(result, (tuple, list)) and len(outs) > 1:
        return type(result)(_down(g, r, d) for r, d in zip(result, outs + [None] * len(result)))
    return _down(g, result, outs[0] if outs else None)
