"""Activations beyond the CNN set: threshold, soft/hard shrink, log_sigmoid, glu, rrelu
(eval: a fixed leaky slope), and the softmax variants _safe_softmax and the softmax
backward formula that some traced graphs keep.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import log1p_of, select
from t2n.walk.registry import aten


def _gt(g, a, b, d):
    return g.binary("gt", a, b, d, out_dtype=torch.bool)


@aten("threshold")
def threshold(g, self, threshold, value):
    d = self.dtype
    return select(g, _gt(g, self, g.scalar(threshold, d), d), self, value, d)


@aten("softshrink")
def softshrink(g, self, lambd=0.5):
    d = self.dtype
    lo = g.binary("add", self, float(lambd), d)
    hi = g.binary("sub", self, float(lambd), d)
    r = select(g, _gt(g, self, g.scalar(float(lambd), d), d), hi,
               select(g, g.binary("lt", self, -float(lambd), d, out_dtype=torch.bool), lo, 0.0,
                      d))
    return r


@aten("hardshrink")
def hardshrink(g, self, lambd=0.5):
    d = self.dtype
    keep = _gt(g, g.unary("abs", self), g.scalar(float(lambd), d), d)
    return select(g, keep, self, 0.0, d)


@aten("log_sigmoid")
def log_sigmoid(g, self):
    d = self.dtype
    # min(x, 0) - log1p(exp(-|x|))
    r = g.binary("sub", g.binary("min", self, 0.0, d),
                 log1p_of(g, g.unary("exp", g.unary("neg", g.unary("abs", self)))), d)
    return r


@aten("glu")
def glu(g, self, dim=-1):
    axis = dim % self.rank
    n = self.shape[axis]
    if not isinstance(n, int):
        raise g.error("glu over a dynamic axis")
    a = g.slice(self, axis, 0, n // 2)
    b = g.slice(self, axis, n // 2, n)
    return g.binary("mul", a, g.unary("sigmoid", b), self.dtype)


@aten("rrelu")
def rrelu(g, self, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    if training:
        raise g.error("rrelu in training mode is random")
    slope = (lower + upper) / 2
    return g.op("leaky_relu", self, alpha=float(slope))


@aten("_safe_softmax")
def safe_softmax(g, self, dim, dtype=None):
    """softmax, but rows that are entirely -inf give zeros instead of NaN."""
    d = g.out_dtype()
    x = g.cast(self, d)
    axis = dim % x.rank
    sm = g.op("tract_core_softmax", x, axes=[axis])
    all_masked = g.reduce("all_reduce", g.binary("eq", x, float("-inf"), d,
                                                 out_dtype=torch.bool), [axis], keepdim=True)
    return select(g, all_masked, 0.0, sm, d)


@aten("_softmax_backward_data")
def softmax_backward_data(g, grad_output, output, dim, input_dtype):
    d = output.dtype
    axis = dim % output.rank
    go = g.cast(grad_output, d)
    s = g.reduce("sum_reduce", g.binary("mul", go, output, d), [axis], keepdim=True)
    return g.binary("mul", output, g.binary("sub", go, s, d), d)
