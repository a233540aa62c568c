"""Normalisation building blocks shared by the ``normalization`` and ``normalization_stats`` families: the
float check, per-channel broadcasting, mean/rstd/variance statistics, the affine step."""

from __future__ import annotations


def check_float(g, x):
    if not x.dtype.is_floating_point:
        raise g.error(f"input: normalising a {x.dtype} tensor is not supported")


def per_channel(g, t, rank, dtype):
    """A [C] tensor shaped [1, C, 1, ...] to broadcast along axis 1 of a rank-``rank`` input."""
    shape = (1, t.shape[0]) + (1,) * (rank - 2)
    t = g.cast(t, dtype)
    if t.is_const:
        return g.reshaped_const(t, shape)
    return g.reshape(t, list(shape))


def normalise_stats(g, x, axes, eps):
    """``_normalise`` plus the statistics the ``native_*`` ops need: the mean,
    ``rstd = 1 / sqrt(var + eps)`` and the biased variance, reduced axes kept as size 1."""
    dtype = x.dtype
    mean = g.reduce("mean_reduce", x, axes, keepdim=True)
    centred = g.binary("sub", x, mean, dtype)
    var = g.reduce("mean_reduce", g.binary("mul", centred, centred, dtype), axes, keepdim=True)
    inv = g.unary("rsqrt", g.binary("add", var, float(eps), dtype))
    return g.binary("mul", centred, inv, dtype), mean, inv, var


def affine(g, y, weight, bias, shape_fn):
    dtype = y.dtype
    if weight is not None:
        y = g.binary("mul", y, shape_fn(weight), dtype)
    if bias is not None:
        y = g.binary("add", y, shape_fn(bias), dtype)
    return y
