"""Unary math beyond tract's primitives, written with numerically careful decompositions.

``log1p``/``expm1`` use Kahan's correction so that small arguments keep their relative
precision (a plain ``log(1 + x)`` loses it all below 1e-7); special functions use published
single-precision approximations (Giles for erfinv, Lanczos for lgamma).
"""

from __future__ import annotations

import math

import torch

from t2n.mappings.helpers.elementwise import expm1_of, is_inf, is_nan, log1p_of, select, sign_of
from t2n.mappings.helpers.gamma import digamma_of, lgamma_of, poly
from t2n.walk.registry import aten


def _float(g, x):
    return g.cast(x, g.out_dtype() if g.node is not None else x.dtype)


def _bool(g, kind, a, b):
    return g.binary(kind, a, b, a.dtype, out_dtype=torch.bool)


@aten("log1p")
def log1p(g, self):
    return log1p_of(g, _float(g, self))


@aten("expm1", "special_expm1")
def expm1(g, self):
    return expm1_of(g, _float(g, self))


@aten("exp2", "special_exp2")
def exp2(g, self):
    x = _float(g, self)
    return g.binary("pow", g.scalar(2.0, x.dtype), x, x.dtype)


@aten("log2")
def log2(g, self):
    x = _float(g, self)
    return g.binary("mul", g.unary("log", x), 1.0 / math.log(2.0), x.dtype)


@aten("log10")
def log10(g, self):
    x = _float(g, self)
    return g.binary("mul", g.unary("log", x), 1.0 / math.log(10.0), x.dtype)


@aten("sinc", "special_sinc")
def sinc(g, self):
    x = _float(g, self)
    px = g.binary("mul", x, math.pi, x.dtype)
    r = g.binary("div", g.unary("sin", px), px, x.dtype)
    return select(g, _bool(g, "eq", x, g.scalar(0.0, x.dtype)), 1.0, r, x.dtype)


@aten("deg2rad")
def deg2rad(g, self):
    x = _float(g, self)
    return g.binary("mul", x, math.pi / 180.0, x.dtype)


@aten("rad2deg")
def rad2deg(g, self):
    x = _float(g, self)
    return g.binary("mul", x, 180.0 / math.pi, x.dtype)


def trunc_of(g, x):
    neg = _bool(g, "lt", x, g.scalar(0.0, x.dtype))
    return select(g, neg, g.unary("ceil", x), g.unary("floor", x))


@aten("frac")
def frac(g, self):
    return g.binary("sub", self, trunc_of(g, self), self.dtype)


@aten("sgn")
def sgn(g, self):
    return sign_of(g, self)


@aten("signbit")
def signbit(g, self):
    if self.dtype == torch.bool:
        return g.broadcast_to(g.scalar(False, torch.bool), self.shape)
    zero = g.scalar(0, self.dtype)
    neg = _bool(g, "lt", self, zero)
    if not self.dtype.is_floating_point:
        return neg
    # -0.0 has its sign bit set: 1 / -0.0 = -inf
    negzero = g.binary("and", _bool(g, "eq", self, zero),
                       _bool(g, "lt", g.unary("recip", self), zero), torch.bool)
    return g.binary("or", neg, negzero, torch.bool)


@aten("positive", "conj", "conj_physical", "real", "_conj")
def positive(g, self):
    return self


@aten("angle")
def angle(g, self):
    x = _float(g, self)
    r = select(g, _bool(g, "lt", x, g.scalar(0.0, x.dtype)), math.pi, 0.0, x.dtype)
    return select(g, is_nan(g, x), x, r)


@aten("logit", "special_logit")
def logit(g, self, eps=None):
    x = _float(g, self)
    if eps is not None:  # clamp with selects: NaN stays NaN (tract's max/min drop it)
        lo, hi = float(eps), 1.0 - float(eps)
        x = select(g, _bool(g, "lt", x, g.scalar(lo, x.dtype)), lo, x, x.dtype)
        x = select(g, _bool(g, "gt", x, g.scalar(hi, x.dtype)), hi, x, x.dtype)
    return g.unary("log", g.binary("div", x, g.binary("sub", g.scalar(1.0, x.dtype), x,
                                                      x.dtype), x.dtype))


@aten("nan_to_num")
def nan_to_num(g, self, nan=None, posinf=None, neginf=None):
    if not self.dtype.is_floating_point:
        return self
    fi = torch.finfo(self.dtype)
    x = self
    x = select(g, is_nan(g, x),
               0.0 if nan is None else float(nan), x)
    x = select(g, _bool(g, "eq", x, g.scalar(float("inf"), x.dtype)),
               fi.max if posinf is None else float(posinf), x)
    x = select(g, _bool(g, "eq", x, g.scalar(float("-inf"), x.dtype)),
               fi.min if neginf is None else float(neginf), x)
    return x


def _all_false(g, x):
    return g.broadcast_to(g.scalar(False, torch.bool), x.shape)


@aten("isnan")
def isnan(g, self):
    if not self.dtype.is_floating_point:
        return _all_false(g, self)
    return is_nan(g, self)


@aten("isinf")
def isinf(g, self):
    if not self.dtype.is_floating_point:
        return _all_false(g, self)
    return is_inf(g, self)


@aten("isposinf")
def isposinf(g, self):
    if not self.dtype.is_floating_point:
        return _all_false(g, self)
    return _bool(g, "eq", self, g.scalar(float("inf"), self.dtype))


@aten("isneginf")
def isneginf(g, self):
    if not self.dtype.is_floating_point:
        return _all_false(g, self)
    return _bool(g, "eq", self, g.scalar(float("-inf"), self.dtype))


@aten("isfinite")
def isfinite(g, self):
    if not self.dtype.is_floating_point:
        return g.broadcast_to(g.scalar(True, torch.bool), self.shape)
    bad = g.binary("or", is_nan(g, self),
                   is_inf(g, self), torch.bool)
    return g.unary("not", bad)


@aten("isreal")
def isreal(g, self):
    return g.broadcast_to(g.scalar(True, torch.bool), self.shape)


def erf_of(g, x):
    """tract's erf has no f64 kernel: f64 goes through f32 (about 1e-7 relative error)."""
    if x.dtype == torch.float64:
        return g.cast(g.unary("tract_core_erf", g.cast(x, torch.float32)), torch.float64)
    return g.unary("tract_core_erf", x)


@aten("erf", "special_erf")
def erf(g, self):
    return erf_of(g, _float(g, self))


@aten("erfc", "special_erfc")
def erfc(g, self):
    x = _float(g, self)
    return g.binary("sub", g.scalar(1.0, x.dtype), erf_of(g, x), x.dtype)


@aten("erfinv", "special_erfinv")
def erfinv(g, self):
    """Giles (2010), single-precision erfinv: two polynomials in w = -log(1 - x^2), refined
    by two Newton steps on erf so that the result is exact to f32 tolerance."""
    x = _float(g, self)
    d = x.dtype
    w = g.unary("neg", g.unary("log", g.binary(
        "mul", g.binary("sub", g.scalar(1.0, d), x, d), g.binary("add", g.scalar(1.0, d), x, d),
        d)))
    w1 = g.binary("sub", w, 2.5, d)
    p1 = poly(g, w1, [2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                       0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941])
    w2 = g.binary("sub", g.unary("sqrt", w), 3.0, d)
    p2 = poly(g, w2, [-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                       0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682])
    p = select(g, _bool(g, "lt", w, g.scalar(5.0, d)), p1, p2)
    y = g.binary("mul", p, x, d)
    two_over_sqrt_pi = 2.0 / math.sqrt(math.pi)
    for _ in range(2):
        err = g.binary("sub", erf_of(g, y), x, d)
        deriv = g.binary("mul", g.unary("exp", g.unary("neg", g.binary("mul", y, y, d))),
                         two_over_sqrt_pi, d)
        y = g.binary("sub", y, g.binary("div", err, deriv, d), d)
    ax = g.unary("abs", x)
    y = select(g, _bool(g, "eq", ax, g.scalar(1.0, d)),
               g.binary("mul", g.unary("sign", x), float("inf"), d), y)
    return y


@aten("lgamma")
def lgamma(g, self):
    # computed in f64: accuracy near the zeros of lgamma (x = 1, 2) needs it
    x = _float(g, self)
    return g.cast(lgamma_of(g, g.cast(x, torch.float64)), x.dtype)


@aten("digamma", "special_digamma", "special_psi")
def digamma(g, self):
    x = _float(g, self)
    return g.cast(digamma_of(g, g.cast(x, torch.float64)), x.dtype)


@aten("mvlgamma", "special_multigammaln")
def mvlgamma(g, self, p):
    x = g.cast(_float(g, self), torch.float64)
    acc = g.scalar(p * (p - 1) / 4.0 * math.log(math.pi), torch.float64)
    for j in range(p):
        acc = g.binary("add", acc, lgamma_of(g, g.binary("sub", x, j / 2.0, torch.float64)),
                       torch.float64)
    return g.cast(acc, g.out_dtype())


@aten("i0", "special_i0")
def i0(g, self):
    """Modified Bessel I0: power series for |x| <= 15 (f64, 40 terms folded into a
    polynomial in x^2/4), asymptotic expansion beyond."""
    x = g.cast(_float(g, self), torch.float64)
    d = torch.float64
    ax = g.unary("abs", x)
    q = g.binary("mul", g.binary("mul", ax, ax, d), 0.25, d)
    coeffs = []
    fact = 1.0
    for k in range(40):
        if k:
            fact *= k
        coeffs.append(1.0 / (fact * fact))
    small = poly(g, q, coeffs[::-1])
    inv = g.unary("recip", ax)
    asym = poly(g, inv, [0.112152099609375, 0.0732421875, 0.0703125, 0.125, 1.0])
    big = g.binary("mul", g.binary("div", g.unary("exp", ax),
                                   g.unary("sqrt", g.binary("mul", ax, 2 * math.pi, d)), d),
                   asym, d)
    r = select(g, _bool(g, "le", ax, g.scalar(15.0, d)), small, big)
    return g.cast(r, g.out_dtype())


@aten("frexp")
def frexp(g, self):
    """(mantissa in [0.5, 1), exponent): a log2 estimate corrected by one step each way."""
    x = self
    d = x.dtype
    ax = g.unary("abs", x)
    special = g.binary("or", g.binary("or", _bool(g, "eq", x, g.scalar(0.0, d)), is_nan(g, x),
                                      torch.bool), is_inf(g, x), torch.bool)
    safe = select(g, special, 1.0, ax, d)
    e = g.binary("add", g.unary("floor", g.binary("mul", g.unary("log", safe),
                                                 1.0 / math.log(2.0), d)), 1.0, d)
    m = g.binary("div", safe, g.binary("pow", g.scalar(2.0, d), e, d), d)
    too_big = _bool(g, "ge", m, g.scalar(1.0, d))
    e = select(g, too_big, g.binary("add", e, 1.0, d), e)
    m = select(g, too_big, g.binary("mul", m, 0.5, d), m)
    too_small = _bool(g, "lt", m, g.scalar(0.5, d))
    e = select(g, too_small, g.binary("sub", e, 1.0, d), e)
    m = select(g, too_small, g.binary("mul", m, 2.0, d), m)
    m = select(g, _bool(g, "lt", x, g.scalar(0.0, d)), g.unary("neg", m), m)
    m = select(g, special, x, m)
    e = select(g, special, 0.0, e, d)
    return m, g.cast(e, torch.int32)
