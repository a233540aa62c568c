"""Unary math beyond tract's primitives, written with numerically careful decompositions.

``log1p``/``expm1`` use Kahan's correction so that small arguments keep their relative
precision (a plain ``log(1 + x)`` loses it all below 1e-7); special functions use published
single-precision approximations (Giles for erfinv, Lanczos for lgamma).
"""

from __future__ import annotations

import math

import torch

from t2n.registry import aten


def _float(g, x):
    return g.cast(x, g.out_dtype() if g.node is not None else x.dtype)


def _bool(g, kind, a, b):
    return g.binary(kind, a, b, a.dtype, out_dtype=torch.bool)


def select(g, cond, a, b, dtype=None):
    """where(cond, a, b) with Python scalars allowed for a/b (typed like the other side)."""
    if dtype is None:
        dtype = a.dtype if hasattr(a, "dtype") else b.dtype
    a = g.as_tensor(a, dtype)
    b = g.as_tensor(b, dtype)
    rank = max(cond.rank, a.rank, b.rank)
    return g.op("select", g.unsqueeze_to_rank(cond, rank), g.unsqueeze_to_rank(a, rank),
                g.unsqueeze_to_rank(b, rank), out_dtype=dtype)


def is_inf(g, x):
    """|x| == inf (tract_core_is_inf does not give a bool on f64)."""
    return _bool(g, "eq", g.unary("abs", x), g.scalar(float("inf"), x.dtype))


def is_nan(g, x):
    """x != x (tract_core_is_nan has no f64 kernel)."""
    if x.dtype == torch.float64:
        return _bool(g, "ne", x, x)
    return g.op("tract_core_is_nan", x, out_dtype=torch.bool)


def log1p_of(g, x):
    u = g.binary("add", x, 1.0, x.dtype)
    d = g.binary("sub", u, 1.0, x.dtype)
    ratio = g.binary("div", x, d, x.dtype)
    general = g.binary("mul", g.unary("log", u), ratio, x.dtype)
    # u == inf: log(u) is right, the ratio is nan
    general = select(g, is_inf(g, u), g.unary("log", u), general)
    return select(g, _bool(g, "eq", d, g.scalar(0.0, x.dtype)), x, general)


@aten("log1p")
def log1p(g, self):
    return log1p_of(g, _float(g, self))


def expm1_of(g, x):
    u = g.unary("exp", x)
    um1 = g.binary("sub", u, 1.0, x.dtype)
    general = g.binary("div", g.binary("mul", um1, x, x.dtype), g.unary("log", u), x.dtype)
    general = select(g, _bool(g, "eq", um1, g.scalar(-1.0, x.dtype)), um1, general)
    general = select(g, is_inf(g, u), u, general)
    return select(g, _bool(g, "eq", u, g.scalar(1.0, x.dtype)), x, general)


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


def sign_of(g, x):
    """torch.sign: -1, 0 or 1, and 0 for NaN (tract's sign keeps NaN)."""
    if x.dtype == torch.bool:
        return x
    s = g.unary("sign", x)
    if x.dtype.is_floating_point:
        s = select(g, is_nan(g, x), 0.0, s, x.dtype)
    return s


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


def _poly(g, x, coeffs):
    """Horner evaluation of sum(c_i x^(n-i)) with scalar coefficients."""
    acc = g.broadcast_to(g.scalar(coeffs[0], x.dtype), x.shape)
    for c in coeffs[1:]:
        acc = g.binary("add", g.binary("mul", acc, x, x.dtype), c, x.dtype)
    return acc


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
    p1 = _poly(g, w1, [2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                       0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941])
    w2 = g.binary("sub", g.unary("sqrt", w), 3.0, d)
    p2 = _poly(g, w2, [-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
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


_LANCZOS_G = 7.0
_LANCZOS = [0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012,
            9.9843695780195716e-6, 1.5056327351493116e-7]


def lgamma_of(g, x):
    """log|Gamma(x)| by the Lanczos series (g=7) with the reflection formula below 0.5."""
    d = x.dtype
    reflect = _bool(g, "lt", x, g.scalar(0.5, d))
    z = select(g, reflect, g.binary("sub", g.scalar(1.0, d), x, d), x)
    zm1 = g.binary("sub", z, 1.0, d)
    acc = g.broadcast_to(g.scalar(_LANCZOS[0], d), x.shape)
    for i, c in enumerate(_LANCZOS[1:], start=1):
        acc = g.binary("add", acc, g.binary("div", g.scalar(c, d),
                                            g.binary("add", zm1, float(i), d), d), d)
    t = g.binary("add", zm1, _LANCZOS_G + 0.5, d)
    lg = g.binary("add", g.binary("sub", g.binary("mul", g.binary("add", zm1, 0.5, d),
                                                  g.unary("log", t), d), t, d),
                  g.binary("add", g.unary("log", acc), 0.5 * math.log(2 * math.pi), d), d)
    sinpx = g.unary("abs", g.unary("sin", g.binary("mul", x, math.pi, d)))
    refl = g.binary("sub", g.binary("sub", g.scalar(math.log(math.pi), d),
                                    g.unary("log", sinpx), d), lg, d)
    out = select(g, reflect, refl, lg)
    # poles at non-positive integers
    is_pole = g.binary("and", _bool(g, "le", x, g.scalar(0.0, d)),
                       _bool(g, "eq", g.unary("floor", x), x), torch.bool)
    out = select(g, is_pole, float("inf"), out)
    return select(g, is_inf(g, x), float("inf"), out)


@aten("lgamma")
def lgamma(g, self):
    # computed in f64: accuracy near the zeros of lgamma (x = 1, 2) needs it
    x = _float(g, self)
    return g.cast(lgamma_of(g, g.cast(x, torch.float64)), x.dtype)


def digamma_of(g, x):
    """psi(x): recurrence up to x >= 6 (six fixed steps), asymptotic series, reflection."""
    d = x.dtype
    reflect = _bool(g, "lt", x, g.scalar(0.5, d))
    z = select(g, reflect, g.binary("sub", g.scalar(1.0, d), x, d), x)
    shift = g.broadcast_to(g.scalar(0.0, d), x.shape)
    for _ in range(6):
        small = _bool(g, "lt", z, g.scalar(6.0, d))
        shift = select(g, small, g.binary("add", shift, g.unary("recip", z), d), shift)
        z = select(g, small, g.binary("add", z, 1.0, d), z)
    inv = g.unary("recip", z)
    inv2 = g.binary("mul", inv, inv, d)
    series = _poly(g, inv2, [-1.0 / 240, 1.0 / 252, -1.0 / 120, 1.0 / 12])
    psi = g.binary("sub", g.binary("sub", g.unary("log", z), g.binary("mul", inv, 0.5, d), d),
                   g.binary("mul", series, inv2, d), d)
    psi = g.binary("sub", psi, shift, d)
    cot = g.binary("div", g.unary("cos", g.binary("mul", x, math.pi, d)),
                   g.unary("sin", g.binary("mul", x, math.pi, d)), d)
    refl = g.binary("sub", psi, g.binary("mul", cot, math.pi, d), d)
    out = select(g, reflect, refl, psi)
    is_pole = g.binary("and", _bool(g, "le", x, g.scalar(0.0, d)),
                       _bool(g, "eq", g.unary("floor", x), x), torch.bool)
    out = select(g, is_pole, float("nan"), out)
    # at +-0 torch gives -+inf (the sign of the pole's side), i.e. -1/x
    return select(g, _bool(g, "eq", x, g.scalar(0.0, d)), g.unary("neg", g.unary("recip", x)),
                  out)


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
    small = _poly(g, q, coeffs[::-1])
    inv = g.unary("recip", ax)
    asym = _poly(g, inv, [0.112152099609375, 0.0732421875, 0.0703125, 0.125, 1.0])
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
