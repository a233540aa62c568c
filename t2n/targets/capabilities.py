"""The one table of what each target can express.

tract reads every op the mappings emit (standard NNEF plus its ``tract_core`` registry), so
its column is implicit: everything. The Khronos column says, per op kind, how a standard
consumer gets it:

- ``FLOAT``: a standard operation whose tensor parameters are ``tensor<scalar>``; valid
  while every tensor operand is float32 (standard NNEF has no integer arithmetic);
- ``ANY``: a generic standard operation (``reshape<?>``, ``gather<?>``...): any dtype;
- ``COMPARE``: float operands, logical result; ``LOGICAL``: logical operands;
- ``"lower:NAME"``: no standard operation, but an exact rewrite into standard ones
  (``t2n.targets.khronos.LOWERINGS[NAME]``);
- absent: the target cannot express it, and an export refuses it with the model's line.

tract version gates, when one is needed, belong in this module too.
"""

from __future__ import annotations

FLOAT, ANY, COMPARE, LOGICAL = "float", "any", "compare", "logical"

# Forms of the graph the passes may write, by what a target's reader takes (Target.can):
FEATURES: dict[str, str] = {
    "fragment_calls": "composite ops (GELU, layer norm, clamp...) as calls of t2n's NNEF "
                      "fragments instead of their expansion (t2n.passes.compose)",
    "partial_reshape": "reshapes written over the axes they change, axis_start/axis_count "
                       "(t2n.passes.minimal_reshape)",
    "engine_product_forms": "matrix products in the operand layouts tract's kernels take: "
                            "labelled broadcast axes, squeezed or split constant weights, "
                            "un-broadcast operands (broadcast_axes, squeeze_weights, "
                            "unshare_packed, product_broadcasts)",
    "properties": "tract_core_properties: metadata a runtime reads (export(properties=...))",
    "stateful_cache": "a cache kept in the run's state, tract_transformers_dyn_kv_cache "
                      "(t2n.passes.stateful_cache)",
    "integer_weights": "int8/uint8 weights stored as such and widened to float in the graph "
                       "(tract_core_cast; t2n.walk.core.widens_stored_integers)",
}

KHRONOS: dict[str, str] = {
    # element-wise arithmetic and functions
    **{k: FLOAT for k in (
        "add", "sub", "mul", "div", "pow", "min", "max", "neg", "rcp", "abs", "sign", "exp",
        "log", "log2", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan",
        "asinh", "acosh", "atanh", "sqrt", "rsqrt", "sqr", "rsqr", "floor", "ceil", "round",
        "sigmoid", "relu", "elu", "selu", "silu", "softplus", "leaky_relu", "prelu", "clamp",
        # sliding windows, reductions, normalisation, products, resampling
        "conv", "separable_conv", "max_pool", "avg_pool", "rms_pool", "box",
        "sum_reduce", "mean_reduce", "max_reduce", "min_reduce", "argmax_reduce",
        "argmin_reduce", "moments", "softmax", "batch_normalization", "l1_normalization",
        "l2_normalization", "local_response_normalization", "matmul",
        "nearest_upsample", "multilinear_upsample", "nearest_downsample", "area_downsample",
        "pad")},
    # generic data movement
    **{k: ANY for k in (
        "reshape", "transpose", "concat", "split", "slice", "squeeze", "unsqueeze", "stack",
        "unstack", "tile", "copy", "gather", "select")},
    **{k: COMPARE for k in ("lt", "gt", "le", "ge", "eq", "ne")},
    **{k: LOGICAL for k in ("and", "or", "not", "any_reduce", "all_reduce")},
    # tract ops with an exact standard form
    "deconv": "lower:deconv",  # the standard filter layout is PyTorch's, not tract's
    "linear": "lower:linear",  # the standard linear is rank 2: others become matmul + add
    "tract_core_gather": "lower:gather",
    "tract_core_cast": "lower:cast",
    "tract_core_silu": "lower:silu",
    "tract_core_hard_swish": "lower:hard_swish",
    "tract_core_gelu_approx": "lower:gelu_tanh",
    "tract_core_erf": "lower:erf",
    "tract_core_softmax": "lower:softmax",
    "tract_core_log_softmax": "lower:log_softmax",
    "tract_core_broadcast": "lower:broadcast",
    "tract_core_range": "lower:constant",
    "tract_core_shape_of": "lower:constant",
    "tract_core_xor": "lower:xor",
    "tract_core_rms_norm": "lower:rms_norm",
    "tract_core_scaled_rms_norm": "lower:rms_norm",
}

# dtypes a Khronos archive carries: NNEF's scalar, integer and logical, as tract and the
# reference tools read them (nnef-tools' interpreter computes scalars in float32)
KHRONOS_DTYPES = ("float32", "int64", "bool")


def khronos_rule(kind: str) -> str | None:
    """How the Khronos target expresses ``kind`` (see the module docstring), or None."""
    return KHRONOS.get(kind)
