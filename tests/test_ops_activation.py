"""Activations and softmax: torch eager vs tract, every parameter of each module form.
Each group is one export whose outputs are named after the cases (see ``opcases.py``)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from opcases import Fn, assert_cases


def _wide(*shape):
    """Values that cross every kink and saturation point (-30 .. 30)."""
    return torch.linspace(-30, 30, int(torch.tensor(shape).prod())).reshape(shape)


def _prelu(n):
    m = nn.PReLU(n)
    with torch.no_grad():
        m.weight.copy_(torch.linspace(0.1, 0.7, n))
    return m


def test_activations():
    assert_cases({
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
        "prelu shared": _prelu(1),
        "prelu per channel": _prelu(3),
    }, (_wide(2, 3, 10),))


def test_activations_of_small_values():
    # the region around 0 where the smooth activations differ most from their limits
    assert_cases({
        "gelu none": nn.GELU(), "gelu tanh": nn.GELU(approximate="tanh"),
        "silu": nn.SiLU(), "mish": nn.Mish(), "elu": nn.ELU(0.5), "softplus": nn.Softplus(),
        "hardswish": nn.Hardswish(), "hardsigmoid": nn.Hardsigmoid(),
    }, (torch.linspace(-4, 4, 41),))


def test_activation_int_input():
    assert_cases({
        "relu int64": torch.relu,
        "sigmoid int64 -> f32": torch.sigmoid,
        "tanh int64 -> f32": torch.tanh,
    }, (torch.arange(-6, 6).reshape(3, 4),))


def test_softmax():
    assert_cases({
        "softmax dim=-1": lambda x: F.softmax(x, -1),
        "softmax dim=1": lambda x: F.softmax(x, 1),
        "softmax dim=0": lambda x: torch.softmax(x, 0),
        "log_softmax dim=-1": lambda x: F.log_softmax(x, -1),
        "log_softmax dim=-2 dtype f64": lambda x: F.log_softmax(x, -2, dtype=torch.float64),
        "softmax dtype f64": lambda x: F.softmax(x, 2, dtype=torch.float64),
        "softmax large values": lambda x: F.softmax(x * 100, -1),
        "log_softmax large values": lambda x: F.log_softmax(x * 100, -1),
        "nn.Softmax / nn.LogSoftmax": lambda x: (nn.Softmax(1)(x), nn.LogSoftmax(-1)(x)),
    }, (torch.randn(2, 3, 5),))


def test_softmax_rank0_and_int_with_dtype():
    assert_cases({
        "softmax of rank 0": lambda x, i: F.softmax(x.sum(), 0),
        "log_softmax of rank 0": lambda x, i: F.log_softmax(x.sum(), 0),
        "softmax int with dtype": lambda x, i: F.softmax(i, -1, dtype=torch.float32),
    }, (torch.randn(3), torch.arange(6).reshape(2, 3)))
