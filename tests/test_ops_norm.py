"""Normalisations: torch eager vs tract (eval batch norm with/without affine, weights as
runtime inputs, batch statistics, layer/group/instance norm)."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from t2n.testing import assert_exports


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _randomise_stats(bn):
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn_like(bn.running_mean))
        bn.running_var.copy_(torch.rand_like(bn.running_var) + 0.2)
        if bn.affine:
            bn.weight.copy_(torch.randn_like(bn.weight))
            bn.bias.copy_(torch.randn_like(bn.bias))
    return bn.eval()


BN = {
    "2d affine": (lambda: nn.BatchNorm2d(3), (2, 3, 4, 5)),
    "2d no affine eps 1e-3": (lambda: nn.BatchNorm2d(3, eps=1e-3, affine=False), (2, 3, 4, 5)),
    "1d on (N,C)": (lambda: nn.BatchNorm1d(4), (5, 4)),
    "1d on (N,C,L)": (lambda: nn.BatchNorm1d(4), (2, 4, 6)),
    "3d": (lambda: nn.BatchNorm3d(2), (1, 2, 3, 4, 2)),
}


@pytest.mark.parametrize("name", list(BN))
def test_batch_norm_eval(name):
    make, shape = BN[name]
    assert_exports(_randomise_stats(make()), (torch.randn(*shape),))


def test_batch_norm_runtime_stats_and_none_weight():
    m = Fn(lambda x, mean, var, w: (F.batch_norm(x, mean, var, w, None, eps=1e-4),
                                    F.batch_norm(x, mean, var, None, w)))
    assert_exports(m, (torch.randn(2, 3, 4), torch.randn(3), torch.rand(3) + 0.5,
                       torch.randn(3)))


def test_batch_norm_batch_statistics():
    m = nn.BatchNorm2d(3, track_running_stats=False).eval()
    with torch.no_grad():
        m.weight.copy_(torch.tensor([0.5, -1.0, 2.0]))
    assert_exports(m, (torch.randn(4, 3, 5, 5) * 3 + 1,))


LN = {
    "last dim": lambda: nn.LayerNorm(6),
    "last two dims": lambda: nn.LayerNorm((5, 6), eps=1e-3),
    "no affine": lambda: nn.LayerNorm(6, elementwise_affine=False),
    "no bias": lambda: nn.LayerNorm(6, bias=False),
}


@pytest.mark.parametrize("name", list(LN))
def test_layer_norm(name):
    m = LN[name]()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p))
    assert_exports(m.eval(), (torch.randn(2, 4, 5, 6) * 2 + 1,))


def test_layer_norm_runtime_weight_and_bias():
    m = Fn(lambda x, w, b: F.layer_norm(x, (3, 4), w, b, 1e-6))
    assert_exports(m, (torch.randn(2, 3, 4), torch.randn(3, 4), torch.randn(3, 4)))


@pytest.mark.parametrize("groups,shape", [(1, (2, 6, 4, 3)), (3, (2, 6, 4, 3)),
                                          (6, (2, 6, 5)), (2, (3, 4))],
                         ids=["1 group", "3 groups 2d", "6 groups 1d", "2 groups no spatial"])
def test_group_norm(groups, shape):
    m = nn.GroupNorm(groups, shape[1])
    with torch.no_grad():
        m.weight.copy_(torch.randn(shape[1]))
        m.bias.copy_(torch.randn(shape[1]))
    assert_exports(m.eval(), (torch.randn(*shape),))


def test_instance_norm():
    m = nn.InstanceNorm2d(3, affine=True).eval()
    with torch.no_grad():
        m.weight.copy_(torch.randn(3))
    assert_exports(m, (torch.randn(2, 3, 4, 5),))
