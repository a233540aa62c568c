"""Activations and softmax: torch eager vs tract, every parameter of each module form."""

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


def _wide(*shape):
    """Values that cross every kink and saturation point (-30 .. 30)."""
    return torch.linspace(-30, 30, int(torch.tensor(shape).prod())).reshape(shape)


CASES = {
    "relu": nn.ReLU(),
    "relu6": nn.ReLU6(),
    "F.relu6": Fn(F.relu6),
    "hardtanh(-2,3)": nn.Hardtanh(-2.0, 3.0),
    "leaky_relu default": nn.LeakyReLU(),
    "leaky_relu 0.2": nn.LeakyReLU(0.2),
    "elu": nn.ELU(),
    "elu alpha=0.3": nn.ELU(alpha=0.3),
    "selu": nn.SELU(),
    "celu alpha=2": nn.CELU(2.0),
    "gelu none": nn.GELU(),
    "gelu tanh": nn.GELU(approximate="tanh"),
    "sigmoid": nn.Sigmoid(),
    "tanh": nn.Tanh(),
    "silu": nn.SiLU(),
    "mish": nn.Mish(),
    "hardswish": nn.Hardswish(),
    "hardsigmoid": nn.Hardsigmoid(),
    "softplus": nn.Softplus(),
    "softplus beta=2 thr=5": nn.Softplus(beta=2.0, threshold=5.0),
    "softplus beta=0.5 thr=1": nn.Softplus(beta=0.5, threshold=1.0),
    "prelu shared": nn.PReLU(),
    "prelu per channel": nn.PReLU(3, init=0.1),
}


@pytest.mark.parametrize("name", list(CASES))
def test_activation(name):
    m = CASES[name]
    if isinstance(m, nn.PReLU):
        with torch.no_grad():
            m.weight.copy_(torch.linspace(0.1, 0.7, m.weight.numel()))
    assert_exports(m.eval(), (_wide(2, 3, 10),))


@pytest.mark.parametrize("fn,dtype", [
    (torch.relu, torch.int64), (torch.sigmoid, torch.int64), (torch.tanh, torch.int32),
], ids=["relu int64", "sigmoid int64->f32", "tanh int32->f32"])
def test_activation_int_input(fn, dtype):
    x = torch.arange(-6, 6, dtype=dtype).reshape(3, 4)
    assert_exports(Fn(fn), (x,))


SOFTMAX = {
    "softmax dim=-1": lambda x: F.softmax(x, -1),
    "softmax dim=1": lambda x: F.softmax(x, 1),
    "softmax dim=0": lambda x: torch.softmax(x, 0),
    "log_softmax dim=-1": lambda x: F.log_softmax(x, -1),
    "log_softmax dim=-2 dtype f64": lambda x: F.log_softmax(x, -2, dtype=torch.float64),
    "softmax dtype f64": lambda x: F.softmax(x, 2, dtype=torch.float64),
    "softmax large values": lambda x: F.softmax(x * 100, -1),
}


@pytest.mark.parametrize("name", list(SOFTMAX))
def test_softmax(name):
    assert_exports(Fn(SOFTMAX[name]), (torch.randn(2, 3, 5),))


def test_softmax_rank0_and_int_with_dtype():
    m = Fn(lambda x, i: (F.softmax(x.sum(), 0), F.log_softmax(x.sum(), 0),
                         F.softmax(i, -1, dtype=torch.float32)))
    assert_exports(m, (torch.randn(3), torch.arange(6).reshape(2, 3)))
