"""The ``native_*`` normalisations, which also return their statistics:
``native_layer_norm``, ``native_group_norm``, ``native_batch_norm``,
``_native_batch_norm_legit`` (with and without running stats),
``_native_batch_norm_legit_no_training``, ``_native_batch_norm_legit_functional``,
``_batch_norm_with_update`` (and its ``_functional`` form, which torch.export produces),
``_batch_norm_no_update``.

Statistics follow PyTorch: ``mean`` and ``rstd = 1 / sqrt(biased var + eps)``; layer norm keeps
the normalised axes as size 1, group norm gives [N, G], batch norm [C]. Batch norm in
evaluation mode returns empty [0] tensors for them (PyTorch's CPU kernels do).

Running statistics: in training mode PyTorch updates ``running_mean``/``running_var`` IN PLACE
as a side effect. An exported graph has no mutable buffers, so that update is dropped: the
returned tensors are right (they only use the batch statistics), the buffers keep their
exported values. ``_native_batch_norm_legit_functional`` returns the updated statistics as
outputs instead, and those are computed.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.normalization_steps import (affine, check_float, normalise_stats,
                                                      per_channel)
from t2n.walk import registry
from t2n.walk.registry import aten


def _empty(g, dtype):
    return g.broadcast_to(g.scalar(0, dtype), [0])


def _check_channels(g, input):
    check_float(g, input)
    if input.rank < 2:
        raise g.error(f"input: batch norm needs a channel axis (rank >= 2), got {input.rank}")


def _batch_stats(g, input, weight, bias, eps):
    """Training-mode batch norm: output, batch mean [C], inverse std [C], biased variance
    [C] (for running-stat updates) and the number of values per channel."""
    axes = [0] + list(range(2, input.rank))
    y, mean, inv, var = normalise_stats(g, input, axes, eps)
    y = affine(g, y, weight, bias, lambda t: per_channel(g, t, input.rank, input.dtype))
    c = [input.shape[1]]
    n = 1
    for a in axes:
        n = n * input.shape[a]
    return y, g.reshape(mean, c), g.reshape(inv, c), g.reshape(var, c), n


def _eval(g, input, weight, bias, running_mean, running_var, eps):
    if running_mean is None or running_var is None:
        raise g.error("running_mean: evaluation mode needs running statistics")
    y = registry.lookup("batch_norm")(g, input, weight, bias, running_mean, running_var, False,
                                      0.0, eps)
    return y, _empty(g, input.dtype), _empty(g, input.dtype)


@aten("native_batch_norm")
def native_batch_norm(g, input, weight, bias, running_mean, running_var, training, momentum,
                      eps):
    """Training mode: batch statistics (the running stats are not updated, see the module)."""
    _check_channels(g, input)
    if training:
        return _batch_stats(g, input, weight, bias, eps)[:3]
    return _eval(g, input, weight, bias, running_mean, running_var, eps)


@aten("_native_batch_norm_legit")
def native_batch_norm_legit(g, input, weight, bias, *rest):
    """Two overloads: ``(…, running_mean, running_var, training, momentum, eps)`` and
    ``.no_stats(…, training, momentum, eps)``."""
    if len(rest) == 3:
        (training, momentum, eps), running_mean, running_var = rest, None, None
    else:
        running_mean, running_var, training, momentum, eps = rest
    return native_batch_norm(g, input, weight, bias, running_mean, running_var, training,
                             momentum, eps)


@aten("_native_batch_norm_legit_no_training")
def native_batch_norm_legit_no_training(g, input, weight, bias, running_mean, running_var,
                                        momentum, eps):
    _check_channels(g, input)
    return _eval(g, input, weight, bias, running_mean, running_var, eps)


@aten("_batch_norm_with_update")
def batch_norm_with_update(g, input, weight, bias, running_mean, running_var, momentum, eps):
    """Batch statistics; the fourth output is cuDNN's reserve space (empty on CPU). The
    running-stat update of eager PyTorch does not happen in the exported graph."""
    _check_channels(g, input)
    y, mean, inv, _, _ = _batch_stats(g, input, weight, bias, eps)
    return y, mean, inv, _empty(g, torch.uint8)


@aten("_batch_norm_no_update")
def batch_norm_no_update(g, input, weight, bias, running_mean, running_var, momentum, eps):
    """Evaluation with running stats (without them PyTorch 2.13 crashes: refused)."""
    _check_channels(g, input)
    return _eval(g, input, weight, bias, running_mean, running_var, eps) + \
        (_empty(g, torch.uint8),)


@aten("_native_batch_norm_legit_functional")
def native_batch_norm_legit_functional(g, input, weight, bias, running_mean, running_var,
                                       training, momentum, eps):
    """Also returns the updated running stats: ``(1 - momentum) * running + momentum *
    batch``, with the unbiased batch variance, as PyTorch."""
    _check_channels(g, input)
    if not training:
        return _eval(g, input, weight, bias, running_mean, running_var, eps) + \
            (running_mean, running_var)
    dtype = input.dtype
    y, mean, inv, biased, n = _batch_stats(g, input, weight, bias, eps)
    nf = g.scalar(n, dtype)
    unbiased = g.binary("mul", biased, g.binary("div", nf, g.binary("sub", nf, 1.0, dtype),
                                                dtype), dtype)
    m = float(momentum)
    new_mean = g.binary("add", g.binary("mul", g.cast(running_mean, dtype), 1.0 - m, dtype),
                        g.binary("mul", mean, m, dtype), dtype)
    new_var = g.binary("add", g.binary("mul", g.cast(running_var, dtype), 1.0 - m, dtype),
                       g.binary("mul", unbiased, m, dtype), dtype)
    return y, mean, inv, new_mean, new_var


@aten("_batch_norm_with_update_functional")
def batch_norm_with_update_functional(g, input, weight, bias, running_mean, running_var,
                                      momentum, eps):
    """``_batch_norm_with_update`` functionalised (torch.export's form of a training-mode
    batch norm): the updated running stats come back as the last two outputs."""
    y, mean, inv, new_mean, new_var = native_batch_norm_legit_functional(
        g, input, weight, bias, running_mean, running_var, True, momentum, eps)
    return y, mean, inv, _empty(g, torch.uint8), new_mean, new_var


@aten("native_layer_norm")
def native_layer_norm(g, input, normalized_shape, weight, bias, eps):
    check_float(g, input)
    n = len(normalized_shape)
    if n == 0 or n > input.rank:
        raise g.error(f"normalized_shape: {list(normalized_shape)} does not fit an input of "
                      f"rank {input.rank}")
    y, mean, rstd, _ = normalise_stats(g, input, list(range(input.rank - n, input.rank)),
                                        eps)
    return affine(g, y, weight, bias, lambda t: t), mean, rstd


@aten("native_group_norm")
def native_group_norm(g, input, weight, bias, N, C, HxW, group, eps):
    """``N``, ``C``, ``HxW`` restate the input's shape; the input's own shape is used."""
    check_float(g, input)
    if input.rank < 2:
        raise g.error(f"input: group norm needs a channel axis (rank >= 2), got {input.rank}")
    c = input.shape[1]
    if not isinstance(c, int) or group <= 0 or c % group:
        raise g.error(f"group: {c} channels do not split into {group} groups")
    grouped = [input.shape[0], group, c // group] + list(input.shape[2:])
    x = g.reshape(input, grouped)
    y, mean, rstd, _ = normalise_stats(g, x, list(range(2, len(grouped))), eps)
    y = g.reshape(y, list(input.shape))
    y = affine(g, y, weight, bias, lambda t: per_channel(g, t, input.rank, input.dtype))
    ng = [input.shape[0], group]
    return y, g.reshape(mean, ng), g.reshape(rstd, ng)
