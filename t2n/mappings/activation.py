"""Activations and softmax.

tract has native ops for some (``relu``, ``sigmoid``, ``tanh``, ``leaky_relu``,
``tract_core_silu``, ``tract_core_hard_swish``, ``tract_core_gelu_approx``, softmax and
log-softmax); the rest are written with ``select``/``min``/``max`` so that every PyTorch
parameter (ELU's alpha/scale/input_scale, Softplus's beta/threshold, Hardtanh's bounds) is
honoured exactly rather than approximated.
"""

from __future__ import annotations

import math

import torch

from t2n.walk.registry import aten


def _float_input(g, self):
    """The input in the node's (floating) result dtype: ``torch.sigmoid(int)`` is float."""
    return g.cast(self, g.out_dtype())


@aten("relu")
def relu(g, self):
    if self.dtype.is_floating_point:
        return g.unary("relu", self)
    if self.dtype == torch.bool:
        raise g.error("self: relu of a bool tensor is not defined in PyTorch")
    return g.binary("max", self, 0, self.dtype)


@aten("relu6")
def relu6(g, self):
    return hardtanh(g, self, 0, 6)


@aten("hardtanh")
def hardtanh(g, self, min_val=-1, max_val=1):
    """clamp(x, min_val, max_val): ReLU6 traces as hardtanh(x, 0, 6)."""
    x = g.binary("max", self, min_val, self.dtype)
    return g.binary("min", x, max_val, self.dtype)


@aten("leaky_relu")
def leaky_relu(g, self, negative_slope=0.01):
    x = _float_input(g, self)
    return g.op("leaky_relu", x, alpha=float(negative_slope))


@aten("elu")
def elu(g, self, alpha=1, scale=1, input_scale=1):
    """scale * (x if x > 0 else alpha * (exp(x * input_scale) - 1))."""
    x = _float_input(g, self)
    dtype = x.dtype
    xs = x if input_scale == 1 else g.binary("mul", x, float(input_scale), dtype)
    neg = g.binary("sub", g.unary("exp", xs), 1.0, dtype)
    if alpha != 1:
        neg = g.binary("mul", neg, float(alpha), dtype)
    pos = g.binary("gt", x, 0.0, dtype, out_dtype=torch.bool)
    y = _select(g, pos, x, neg)
    return y if scale == 1 else g.binary("mul", y, float(scale), dtype)


@aten("selu")
def selu(g, self):
    return elu(g, self, 1.6732632423543772848170429916717,
               1.0507009873554804934193349852946, 1)


@aten("celu")
def celu(g, self, alpha=1.0):
    if alpha == 0:
        raise g.error("alpha: celu with alpha=0 divides by zero")
    return elu(g, self, alpha, 1, 1.0 / alpha)


@aten("gelu")
def gelu(g, self, approximate="none"):
    x = _float_input(g, self)
    dtype = x.dtype
    if approximate == "tanh":
        return g.op("tract_core_gelu_approx", x, fast_impl=False)
    if approximate != "none":
        raise g.error(f"approximate: unknown mode {approximate!r}")
    # exact: 0.5 * x * (1 + erf(x / sqrt(2)))
    e = g.unary("tract_core_erf", g.binary("mul", x, 1.0 / math.sqrt(2.0), dtype))
    half = g.binary("mul", x, 0.5, dtype)
    return g.binary("mul", half, g.binary("add", e, 1.0, dtype), dtype)


@aten("sigmoid")
def sigmoid(g, self):
    return g.unary("sigmoid", _float_input(g, self))


@aten("tanh")
def tanh(g, self):
    return g.unary("tanh", _float_input(g, self))


@aten("silu")
def silu(g, self):
    return g.op("tract_core_silu", _float_input(g, self))


@aten("mish")
def mish(g, self):
    x = _float_input(g, self)
    return g.binary("mul", x, g.unary("tanh", softplus(g, x)), x.dtype)


@aten("hardswish")
def hardswish(g, self):
    return g.op("tract_core_hard_swish", _float_input(g, self))


@aten("hardsigmoid")
def hardsigmoid(g, self):
    """clamp(x / 6 + 1/2, 0, 1)."""
    x = _float_input(g, self)
    dtype = x.dtype
    y = g.binary("add", g.binary("div", x, 6.0, dtype), 0.5, dtype)
    return g.binary("min", g.binary("max", y, 0.0, dtype), 1.0, dtype)


@aten("softplus")
def softplus(g, self, beta=1, threshold=20):
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (as torch)."""
    x = _float_input(g, self)
    dtype = x.dtype
    bx = x if beta == 1 else g.binary("mul", x, float(beta), dtype)
    soft = g.unary("log", g.binary("add", g.unary("exp", bx), 1.0, dtype))
    if beta != 1:
        soft = g.binary("div", soft, float(beta), dtype)
    linear = g.binary("gt", bx, float(threshold), dtype, out_dtype=torch.bool)
    return _select(g, linear, x, soft)


@aten("prelu", "_prelu_kernel")
def prelu(g, self, weight):
    """x if x >= 0 else weight * x, weight per channel (axis 1) or a single value."""
    dtype = self.dtype
    w = weight
    if w.rank == 1 and self.rank >= 2 and not (isinstance(w.shape[0], int) and w.shape[0] == 1
                                               and self.shape[1] != 1):
        # channel weights: [C] -> [C, 1, ..., 1] so they line up with axis 1
        trailing = self.rank - 2
        w = g.reshaped_const(w, tuple(w.shape) + (1,) * trailing) if w.is_const else \
            g.unsqueeze(w, list(range(1, 1 + trailing)))
    neg = g.binary("mul", self, w, dtype)
    pos = g.binary("ge", self, 0.0, dtype, out_dtype=torch.bool)
    return _select(g, pos, self, neg)


def _softmax_like(g, kind, self, dim, dtype):
    """softmax / log-softmax along ``dim``, computed in the traced result dtype (which is
    ``dtype`` when given); a rank-0 input is a 1-element vector, as in torch."""
    x = g.cast(self, g.out_dtype())
    if x.rank == 0:
        return g.squeeze(g.op(kind, g.unsqueeze(x, [0]), axes=[0]), [0])
    return g.op(kind, x, axes=[dim % x.rank])


@aten("softmax", "_softmax")
def softmax(g, self, dim, dtype=None):
    return _softmax_like(g, "softmax", self, dim, dtype)


@aten("log_softmax", "_log_softmax")
def log_softmax(g, self, dim, dtype=None):
    return _softmax_like(g, "tract_core_log_softmax", self, dim, dtype)


def _select(g, cond, a, b):
    rank = max(cond.rank, a.rank, b.rank)
    cond, a, b = (g.unsqueeze_to_rank(t, rank) for t in (cond, a, b))
    return g.op("select", cond, a, b, out_dtype=a.dtype)
