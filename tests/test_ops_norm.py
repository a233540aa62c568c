"""Normalisations: torch eager vs tract (eval batch norm with/without affine, weights as
runtime inputs, batch statistics, layer/group/instance norm)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from opcases import Apply, assert_cases


def _randomise_stats(bn):
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn_like(bn.running_mean))
        bn.running_var.copy_(torch.rand_like(bn.running_var) + 0.2)
        if bn.affine:
            bn.weight.copy_(torch.randn_like(bn.weight))
            bn.bias.copy_(torch.randn_like(bn.bias))
    return bn.eval()


def test_batch_norm_eval():
    bn_stats_free = nn.BatchNorm2d(3, track_running_stats=False)
    with torch.no_grad():
        bn_stats_free.weight.copy_(torch.tensor([0.5, -1.0, 2.0]))
    assert_cases({
        "2d affine": _randomise_stats(nn.BatchNorm2d(3)),
        "2d no affine eps 1e-3": _randomise_stats(nn.BatchNorm2d(3, eps=1e-3, affine=False)),
        "1d on (N,C)": Apply(_randomise_stats(nn.BatchNorm1d(3)), lambda x: x[:, :, 0, 0]),
        "1d on (N,C,L)": Apply(_randomise_stats(nn.BatchNorm1d(3)), lambda x: x[:, :, 0]),
        "3d": Apply(_randomise_stats(nn.BatchNorm3d(3)), lambda x: x.reshape(2, 3, 2, 2, 5)),
        "batch statistics (track_running_stats=False)": bn_stats_free,
    }, (torch.randn(2, 3, 4, 5) * 3 + 1,))


def test_batch_norm_runtime_stats_and_none_weight():
    assert_cases({
        "runtime stats, no bias": lambda x, mean, var, w: F.batch_norm(x, mean, var, w, None,
                                                                       eps=1e-4),
        "runtime stats, no weight": lambda x, mean, var, w: F.batch_norm(x, mean, var, None, w),
        "no weight no bias": lambda x, mean, var, w: F.batch_norm(x, mean, var),
    }, (torch.randn(2, 3, 4), torch.randn(3), torch.rand(3) + 0.5, torch.randn(3)))


LN = {
    "last dim": lambda: nn.LayerNorm(6),
    "last two dims": lambda: nn.LayerNorm((5, 6), eps=1e-3),
    "no affine": lambda: nn.LayerNorm(6, elementwise_affine=False),
    "no bias": lambda: nn.LayerNorm(6, bias=False),
}


def _random_params(m):
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p))
    return m


def test_layer_norm():
    assert_cases({name: _random_params(make()) for name, make in LN.items()},
                 (torch.randn(2, 4, 5, 6) * 2 + 1,))


def test_layer_norm_runtime_weight_and_bias():
    assert_cases({
        "runtime weight and bias": lambda x, w, b: F.layer_norm(x, (3, 4), w, b, 1e-6),
        "runtime weight only": lambda x, w, b: F.layer_norm(x, (4,), w[0]),
    }, (torch.randn(2, 3, 4), torch.randn(3, 4), torch.randn(3, 4)))


def test_group_and_instance_norm():
    assert_cases({
        "group norm 1 group": _random_params(nn.GroupNorm(1, 6)),
        "group norm 3 groups 2d": _random_params(nn.GroupNorm(3, 6)),
        "group norm 6 groups 1d": Apply(_random_params(nn.GroupNorm(6, 6)),
                                        lambda x: x.flatten(2)),
        "group norm 2 groups no spatial": Apply(_random_params(nn.GroupNorm(2, 6, eps=1e-3)),
                                                lambda x: x[:, :, 0, 0]),
        "group norm no affine": nn.GroupNorm(2, 6, affine=False),
        "instance norm affine": _random_params(nn.InstanceNorm2d(6, affine=True)),
        "instance norm 1d plain": Apply(nn.InstanceNorm1d(6), lambda x: x.flatten(2)),
    }, (torch.randn(3, 6, 4, 3) * 2 - 1,))
