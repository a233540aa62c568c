"""Normalisations: ``batch_norm``, ``instance_norm``, ``layer_norm``, ``group_norm``.

Batch norm in eval mode with stored statistics is folded in Python into one per-channel
scale and shift (two ops in the graph; tract fuses them further). Everything else is written
with ``mean_reduce``: mean, centred values, biased variance, ``rsqrt(var + eps)``, so weights
and biases may be stored or runtime inputs alike (they are applied, never dropped).

Batch norm in training mode normalises with the batch statistics, as PyTorch; PyTorch also
updates the running statistics in place, which an exported graph cannot do (the buffers keep
their exported values). The ``native_*`` variants that return statistics are in
normalization_stats.py.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.normalization_steps import (affine, check_float, normalise_stats,
                                                      per_channel)
from t2n.walk.registry import aten


def _normalise(g, x, axes, eps):
    """(x - mean) / sqrt(var + eps) over ``axes`` (biased variance, as PyTorch)."""
    return normalise_stats(g, x, axes, eps)[0]


def _derived(g, src, data):
    """A tensor computed in Python from a stored weight keeps that weight's file label."""
    var = next((v for v in g.variables if v.tensor is src), None) if src is not None else None
    if var is None or data.numel() <= 8:
        return g.const(data)
    return g.variable(data, var.label)


@aten("batch_norm")
def batch_norm(g, input, weight, bias, running_mean, running_var, training=False,
               momentum=0.1, eps=1e-5, *_):
    check_float(g, input)
    if input.rank == 1 and input.shape[0] == 0:
        return input  # PyTorch accepts an empty 1-d input (and nothing else of rank 1)
    if input.rank < 2:
        raise g.error(f"input: batch norm needs a channel axis (rank >= 2), got {input.rank}")
    dtype = input.dtype
    if training or running_mean is None or running_var is None:
        # batch statistics (training mode, or track_running_stats=False)
        axes = [0] + list(range(2, input.rank))
        y = _normalise(g, input, axes, eps)
        return affine(g, y, weight, bias, lambda t: per_channel(g, t, input.rank, dtype))
    stats = [running_mean, running_var, weight, bias]
    if all(t is None or t.is_const for t in stats):
        inv = torch.rsqrt(running_var.value.double() + eps)
        scale = inv * (weight.value.double() if weight is not None else 1.0)
        shift = -running_mean.value.double() * scale
        if bias is not None:
            shift = shift + bias.value.double()
        scale = _derived(g, weight if weight is not None else running_var, scale.to(dtype))
        shift = _derived(g, bias if bias is not None else running_mean, shift.to(dtype))
        y = g.binary("mul", input, per_channel(g, scale, input.rank, dtype), dtype)
        return g.binary("add", y, per_channel(g, shift, input.rank, dtype), dtype)
    mean = per_channel(g, running_mean, input.rank, dtype)
    var = per_channel(g, running_var, input.rank, dtype)
    inv = g.unary("rsqrt", g.binary("add", var, float(eps), dtype))
    y = g.binary("mul", g.binary("sub", input, mean, dtype), inv, dtype)
    return affine(g, y, weight, bias, lambda t: per_channel(g, t, input.rank, dtype))


@aten("instance_norm")
def instance_norm(g, input, weight, bias, running_mean, running_var, use_input_stats,
                  momentum=0.1, eps=1e-5, *_):
    if not use_input_stats:
        return batch_norm(g, input, weight, bias, running_mean, running_var, False,
                          momentum, eps)
    check_float(g, input)
    if input.rank < 3:
        raise g.error(f"input: instance norm needs spatial axes (rank >= 3), got {input.rank}")
    y = _normalise(g, input, list(range(2, input.rank)), eps)
    return affine(g, y, weight, bias, lambda t: per_channel(g, t, input.rank, input.dtype))


@aten("layer_norm")
def layer_norm(g, input, normalized_shape, weight=None, bias=None, eps=1e-5, *_):
    check_float(g, input)
    n = len(normalized_shape)
    if n == 0 or n > input.rank:
        raise g.error(f"normalized_shape: {list(normalized_shape)} does not fit an input of "
                      f"rank {input.rank}")
    y = _normalise(g, input, list(range(input.rank - n, input.rank)), eps)
    # weight and bias have the normalized shape: g.binary aligns them to the trailing axes
    return affine(g, y, weight, bias, lambda t: t)


@aten("group_norm")
def group_norm(g, input, num_groups, weight=None, bias=None, eps=1e-5, *_):
    check_float(g, input)
    if input.rank < 2:
        raise g.error(f"input: group norm needs a channel axis (rank >= 2), got {input.rank}")
    c = input.shape[1]
    if not isinstance(c, int) or c % num_groups:
        raise g.error(f"num_groups: {c} channels do not split into {num_groups} groups")
    grouped = [input.shape[0], num_groups, c // num_groups] + list(input.shape[2:])
    x = g.reshape(input, grouped)
    y = _normalise(g, x, list(range(2, len(grouped))), eps)
    y = g.reshape(y, list(input.shape))
    return affine(g, y, weight, bias, lambda t: per_channel(g, t, input.rank, input.dtype))
