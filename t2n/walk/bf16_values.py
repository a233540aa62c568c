"""bfloat16 values inside a float32 or float16 model: held in float32, rounded as PyTorch
rounds them.

tract has no bfloat16 (t2n/dtypes.py). A model that computes in float32 or float16 and casts
a value to bfloat16 on the way (``x.bfloat16()``, ``.to(torch.bfloat16)``), or keeps a
bfloat16 buffer, gives that value's later results PyTorch's bfloat16 rounding. Every bf16
value is exactly a float32 value, so the graph holds it in f32; what must be reproduced is
the rounding:

* a cast to bf16 rounds to nearest-even on 8 significant bits, as ``c10::BFloat16``'s
  ``round_to_nearest_even`` does (subnormals on bf16's grid of 2**-133, a value rounding
  past the largest finite bf16 becomes inf, inf and NaN stay, a zero keeps its sign);
* every other aten op with a bf16 result is computed by PyTorch's CPU kernels in float32
  (``at::opmath_type<BFloat16>`` = ``float``, reductions accumulate in ``acc_type`` =
  ``float``) and rounded to bf16 once: the graph computes the op in f32, as for a float32
  node, and rounds each bf16 result once. Where tract's float32 kernel gives PyTorch's
  float32 value the result matches to the bit (411 of 428 OpInfo ops on their first bf16
  sample); tract's float32 division (not correctly rounded: one f32 ulp off on about a
  quarter of quotients) and some transcendental kernels (rsqrt, erfc, softplus, mish, ...)
  can move a value across a bf16 rounding boundary, one bf16 ulp; reductions and products
  accumulate in another order than PyTorch's (the same few-ulp policy as float16's opmath,
  t2n/walk/opmath.py); ops PyTorch computes step by step in bf16 (each step rounded) are
  refused, naming the op (:data:`_REFUSED`).

The rounding is one NNEF fragment, ``t2n_bf16_round``, written once before the graph: float
arithmetic only (tract has no bit casts), exact for every float32 input: the same formula
in numpy's IEEE float32 arithmetic matched PyTorch on all 2**32 patterns, and
tests/test_bfloat16_values.py checks tract against PyTorch on every bf16 tie and its
neighbours over all signs, exponents and bf16 mantissas. Inside the normal range it is Veltkamp's split (``v = x * (2**16 + 1)``,
``x`` rounded = ``v + (x - v)``, round-to-nearest-even on 8 bits under IEEE arithmetic),
with ``|x| >= 2**111`` scaled down by ``2**32`` first (``v`` would overflow) and back after
(where a value rounding past the largest bf16 overflows to inf, as in PyTorch); below
``2**-126`` bf16's subnormal grid is reached by adding and subtracting ``1.5 * 2**-110``.

Only an export without ``dtype=``: with ``dtype="f32"``/``"f16"`` (t2n/walk/compute_dtype.py) the
model's bf16 values are computed in that dtype on purpose.
"""

from __future__ import annotations

import torch

from t2n.walk import opmath
from t2n.passes.rewrite import TextFragment
from t2n.walk.tensors import Tensor

BF16 = torch.bfloat16
FRAGMENT = "t2n_bf16_round"

# PyTorch computes these step by step in bf16 (each step rounded to bf16), which one f32
# computation rounded once does not reproduce: the ops float16's opmath keeps in f16 for
# that reason (t2n/walk/opmath.py), for which t2n's f16 export relies on tract's own f16 steps
_REFUSED = {
    "prod": "multiplies bfloat16 values one by one, rounding each product",
    "cumprod": "multiplies bfloat16 values one by one, rounding each product",
    "scatter_add": "accumulates into the bfloat16 output, rounding each sum",
    "scatter_reduce": "accumulates into the bfloat16 output, rounding each step",
    "index_add": "accumulates into the bfloat16 output, rounding each sum",
    "index_reduce": "accumulates into the bfloat16 output, rounding each step",
    "segment_reduce": "accumulates into the bfloat16 output, rounding each sum",
    "_segment_reduce": "accumulates into the bfloat16 output, rounding each sum",
    "linalg_vecdot": "rounds after each of its aten steps",
    "cov": "rounds after each of its aten steps",
    "corrcoef": "rounds after each of its aten steps",
    "cosine_similarity": "rounds after each of its aten steps",
    "cosine_embedding_loss": "rounds after each of its aten steps",
    "soft_margin_loss": "rounds after each of its aten steps",
    "binary_cross_entropy_with_logits": "rounds after each of its aten steps",
    "hinge_embedding_loss": "rounds after each of its aten steps",
    "trapezoid": "rounds after each of its aten steps",
    "trapz": "rounds after each of its aten steps",
    "cumulative_trapezoid": "rounds after each of its aten steps",
    "logit": "rounds its intermediate to bfloat16",
    "xlogy": "rounds its intermediate to bfloat16",
    "special_xlogy": "rounds its intermediate to bfloat16",
    "conv_transpose1d": "adds its kernel taps into the bfloat16 output one by one",
    "conv_transpose2d": "adds its kernel taps into the bfloat16 output one by one",
    "conv_transpose3d": "adds its kernel taps into the bfloat16 output one by one",
    "adaptive_avg_pool3d": "sums each window in bfloat16",
    "_adaptive_avg_pool3d": "sums each window in bfloat16",
    "grid_sampler": "rounds grid_sample's coordinates and weights in bfloat16",
    "grid_sampler_2d": "rounds grid_sample's coordinates and weights in bfloat16",
    "grid_sampler_3d": "rounds grid_sample's coordinates and weights in bfloat16",
    "_unsafe_masked_index_put_accumulate": "accumulates into the bfloat16 output, rounding "
                                           "each sum",
    # rounded between their aten steps (as in float16, t2n/mappings/products.py follows
    # those steps there; measured on OpInfo's bf16 samples: several bf16 ulps apart)
    "addbmm": "rounds each batch's product before adding the next",
    "bilinear": "rounds its intermediate products to bfloat16",
    "addr": "rounds the outer product to bfloat16 before adding it",
    "nextafter": "steps to the next bfloat16 value, not to float32's",
    # measured one bf16 ulp apart on OpInfo's samples (its log-sum is held in bf16)
    "log_softmax": "rounds its log-sum to bfloat16 before subtracting it",
    "_log_softmax": "rounds its log-sum to bfloat16 before subtracting it",
    "cross": "rounds its products to bfloat16 before subtracting them",
    "linalg_cross": "rounds its products to bfloat16 before subtracting them",
    # the generic upsampling kernel keeps its tap weights in the input's dtype (as for
    # float16, t2n/walk/opmath.py's _HALF_WEIGHTS), which tract cannot hold in bf16
    **{name: "keeps its interpolation weights in bfloat16" for name in (
        "upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d",
        "upsample_bicubic2d", "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa")},
    # PyTorch's bf16 batch-norm kernels round their statistics and the normalised value
    # differently from one float32 computation (measured on OpInfo's bf16 samples: up to
    # 0.125 apart)
    **{name: "rounds its statistics to bfloat16 in its own steps" for name in (
        "batch_norm", "native_batch_norm", "_native_batch_norm_legit",
        "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional",
        "_batch_norm_with_update", "_batch_norm_no_update", "instance_norm")},
}
# with ``accumulate=True`` (argument 3) an index_put adds into the bf16 output in turn
_ACCUMULATE_FLAG = {"index_put", "_index_put_impl"}
# the generic convolutions run the transposed path (col2im, taps summed in bf16) when their
# argument 6 (``transposed``) is set
_TRANSPOSED_FLAG = {"convolution", "_convolution"}

# ops whose Python-number (or 0-dim tensor) operand PyTorch casts to the bf16 tensor's
# dtype before the float formula (TensorIterator's common dtype; measured with torch 2.13:
# ``b + 0.1`` adds bf16(0.1), ``b == 0.1`` compares with bf16(0.1)); mul, div, lerp and the
# activations' parameters keep the number in float and are not listed
_BF16_SCALARS = {"add", "sub", "rsub", "pow", "fmod", "remainder", "hypot", "atan2",
                 "arctan2", "maximum", "minimum", "fmax", "fmin"}
_COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge", "greater", "less", "greater_equal",
                "less_equal", "not_equal"}

# the fragment's literals, each exactly the float32 it names
_BODY = [
    "a = abs(x)",
    "big = ge(a, 2.596148429267414e+33)",                 # 2**111: v below would overflow
    "xs = select(big, mul(x, 2.3283064365386963e-10), x)",  # * 2**-32, exact
    "v = mul(xs, 65537.0)",                              # Veltkamp: 2**16 + 1
    "r = add(v, sub(xs, v))",                            # xs rounded to 8 bits, ties even
    "rn = select(big, mul(r, 4294967296.0), r)",         # * 2**32: past bf16's max -> inf
    "rs = sub(add(x, 1.1555579666323415e-33), 1.1555579666323415e-33)",  # 1.5 * 2**-110
    "rt = select(lt(a, 1.1754943508222875e-38), rs, rn)",  # 2**-126: bf16's subnormals
    "rf = select(le(a, 3.4028234663852886e+38), rt, x)",   # inf and NaN stay
    "y = select(eq(rf, 0.0), mul(x, 7.888609052210118e-31), rf)",  # a zero keeps x's sign
]


def call_node(g, name: str, fn, args: list):
    """The walkers' call of a mapping: bf16 results rounded (:func:`call`), float16 ones
    per PyTorch's half opmath (:func:`t2n.walk.opmath.call`)."""
    if is_bf16_node(g):
        return call(g, name, fn, args)
    if g.session.bf16_rounding and _base(name) in _COMPARISONS:
        args = _bf16_operands(g, args)
    return opmath.call(g, name, fn, args)


def is_bf16_node(g) -> bool:
    """Whether the node being converted has a bf16 result that the graph must round."""
    node = g.node
    return bool(g.session.bf16_rounding and node is not None
                and any(d == BF16 for d in node.torch_out_dtypes))


def refusal(name: str, args) -> str | None:
    """Why PyTorch's bf16 result of aten op ``name`` cannot be reproduced, or None."""
    base = name[:-1] if name.endswith("_") else name
    if base in _TRANSPOSED_FLAG and len(args) > 6 and bool(args[6]):
        return "adds its kernel taps into the bfloat16 output one by one"
    if base in _ACCUMULATE_FLAG and len(args) > 3 and bool(args[3]):
        return "accumulates into the bfloat16 output, rounding each sum"
    return _REFUSED.get(base)


def call(g, name: str, fn, args: list):
    """``fn(g, *args)`` for a node with bf16 results: computed in float32 (the graph's
    dtype of bf16 values), each bf16 result rounded to bf16 once."""
    why = refusal(name, args)
    if why is not None:
        raise g.error(f"bfloat16 result: PyTorch's {name} {why}, which t2n does not "
                      "reproduce; compute it in float32 (cast to bfloat16 after it)")
    if _base(name) in _BF16_SCALARS:
        args = _bf16_operands(g, args)
    result = fn(g, *args)
    wants = list(g.node.torch_out_dtypes)
    if isinstance(result, (tuple, list)) and len(wants) > 1:
        return type(result)(_rounded(g, r, d)
                            for r, d in zip(result, wants + [None] * len(result)))
    return _rounded(g, result, wants[0] if wants else None)


def _base(name: str) -> str:
    return name[:-1] if name.endswith("_") else name


def _is_bf16(g, t) -> bool:
    return isinstance(t, Tensor) and (id(t) in _held(g) or (
        t.value is not None and t.value.dtype == BF16))


def _bf16_operands(g, args: list) -> list:
    """The first two operands with a Python number or a 0-dim float tensor beside a bf16
    tensor rounded to bf16, as PyTorch's common dtype casts them."""
    ops = list(args[:2])
    if not any(_is_bf16(g, a) for a in ops):
        return args
    dimensioned = any(_is_bf16(g, a) and a.rank > 0 for a in ops)
    for i, a in enumerate(ops):
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            ops[i] = float(torch.tensor(a, dtype=torch.float64).to(BF16))
        elif isinstance(a, Tensor) and a.rank == 0 and dimensioned and not _is_bf16(g, a) \
                and a.dtype.is_floating_point:
            ops[i] = round_to_bf16(g, g.cast(a, torch.float32))
    return ops + list(args[2:])


def round_to_bf16(g, t: Tensor) -> Tensor:
    """``t`` (float32) rounded to the nearest bf16 value, as ``t.to(torch.bfloat16)``."""
    if not any(f.name == FRAGMENT for f in g.fragments):
        g.fragments.append(TextFragment(FRAGMENT, "x: tensor<scalar>", "y: tensor<scalar>",
                                        _BODY))
    y = g.op(FRAGMENT, t, out_dtype=torch.float32, out_shape=t.shape)
    _held(g).add(id(y))
    return y


def _held(g) -> set:
    """ids of the graph's tensors known to hold bf16 values (results of the rounding)."""
    return g.session.bf16_held


def _rounded(g, r, dtype):
    if dtype != BF16:
        return r
    if isinstance(r, list):
        return [_rounded(g, x, dtype) for x in r]
    if not isinstance(r, Tensor):
        return r
    if id(r) in _held(g) or (r.value is not None and r.value.dtype == BF16):
        return r  # an operand as it is (a no-op op), or a bf16 weight: already bf16
    if r.dtype != torch.float32:
        r = g.cast(r, torch.float32)
    return round_to_bf16(g, r)
