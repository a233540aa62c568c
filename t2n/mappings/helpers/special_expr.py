"""A tiny expression layer over the builder for the special-function mappings.

Special functions are long formulas (rational approximations, Clenshaw sums, continued
fractions); written with ``g.binary(...)`` calls they become unreadable. ``E`` wraps a
tensor handle so that ``(x * x - 2.0) * q - p`` emits exactly those element-wise ops, all in
the wrapped tensor's dtype (usually f64: the special functions are evaluated in double and
cast back, so f32 results are correctly rounded approximations of torch's).
"""

from __future__ import annotations

import math

import torch

from t2n.mappings.helpers.elementwise import is_nan, select

F64 = torch.float64


class E:
    """An element-wise expression: arithmetic operators emit NNEF ops."""

    __slots__ = ("g", "t")

    def __init__(self, g, t):
        self.g = g
        self.t = t

    @property
    def dtype(self):
        return self.t.dtype

    def _bin(self, kind, other, swap=False):
        b = other.t if isinstance(other, E) else other
        a = self.t
        if swap:
            a, b = b, a
        return E(self.g, self.g.binary(kind, a, b, self.dtype))

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __rtruediv__(self, o): return self._bin("div", o, True)
    def __pow__(self, o): return self._bin("pow", o)
    def __rpow__(self, o): return self._bin("pow", o, True)
    def __neg__(self): return self.f("neg")

    def _cmp(self, kind, other):
        b = other.t if isinstance(other, E) else other
        return self.g.binary(kind, self.t, b, self.dtype, out_dtype=torch.bool)

    # comparisons give raw bool tensor handles (combine with both/either/negate)
    def lt(self, o): return self._cmp("lt", o)
    def le(self, o): return self._cmp("le", o)
    def gt(self, o): return self._cmp("gt", o)
    def ge(self, o): return self._cmp("ge", o)
    def eq(self, o): return self._cmp("eq", o)
    def ne(self, o): return self._cmp("ne", o)

    def f(self, kind):
        """A unary NNEF op (exp, log, sqrt, sin, cos, acos, acosh, sinh, cosh, abs, floor...)."""
        return E(self.g, self.g.unary(kind, self.t))

    def exp(self): return self.f("exp")
    def log(self): return self.f("log")
    def sqrt(self): return self.f("sqrt")
    def abs(self): return self.f("abs")
    def sin(self): return self.f("sin")
    def cos(self): return self.f("cos")
    def floor(self): return self.f("floor")

    def isnan(self):
        return is_nan(self.g, self.t)

    def isinf(self):
        return self.abs().eq(float("inf"))

    def cast(self, dtype):
        return E(self.g, self.g.cast(self.t, dtype))


def both(g, a, b):
    return g.binary("and", a, b, torch.bool)


def either(g, a, b):
    return g.binary("or", a, b, torch.bool)


def negate(g, c):
    return g.op("not", c, out_dtype=torch.bool)


def where(g, cond, a, b, dtype=F64):
    """select(cond, a, b) with E or Python numbers on either side."""
    a = a.t if isinstance(a, E) else a
    b = b.t if isinstance(b, E) else b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        a = g.scalar(float(a), dtype)
    return E(g, select(g, cond, a, b, dtype))


def polevl(x: E, coeffs) -> E:
    """Horner: coeffs[0] * x^n + ... + coeffs[n] (Cephes ``polevl`` order)."""
    acc = x * coeffs[0] + coeffs[1]
    for c in coeffs[2:]:
        acc = acc * x + c
    return acc


def p1evl(x: E, coeffs) -> E:
    """polevl with an implied leading coefficient 1 (Cephes ``p1evl``)."""
    acc = x + coeffs[0]
    for c in coeffs[1:]:
        acc = acc * x + c
    return acc


def chbevl(y: E, coeffs) -> E:
    """Clenshaw sum of a Chebyshev series, coefficients highest order first (Cephes
    ``chbevl``): 0.5 * (b0 - b2)."""
    b0, b1, b2 = coeffs[0], 0.0, 0.0
    for c in coeffs[1:]:
        b2, b1 = b1, b0
        b0 = y * b1 + (c - b2) if isinstance(b2, float) else y * b1 - b2 + c
    return (b0 - b2) * 0.5


def float_in(g, x) -> E:
    """A floating input as an f64 expression (integer/bool inputs become floats first)."""
    return E(g, g.cast(x, F64))


def out(g, e: E, dtype=None):
    """Cast an expression back to the traced output dtype."""
    dtype = dtype or (g.out_dtype() if g.node is not None else torch.float32)
    return g.cast(e.t, dtype)


_SQRT_PI = math.sqrt(math.pi)


def _double_factorial_series(n_terms: int):
    """Coefficients (highest power first) of sum_n u^n / (2n+1)!!."""
    coeffs, d = [], 1.0
    for n in range(n_terms):
        d = d * (2 * n + 1) if n else 1.0
        coeffs.append(1.0 / d)
    return coeffs[::-1]


_ERFCX_SERIES = _double_factorial_series(32)


def erfcx_pos(z: E) -> E:
    """exp(z^2) erfc(z) for z >= 0 (or NaN), about 1e-13 relative error.

    z < 2: erf's positive series erf(z) = 2/sqrt(pi) exp(-z^2) z sum (2z^2)^n/(2n+1)!!
    (no cancellation inside the sum; the final subtraction loses < 4 digits of 16);
    z >= 2: Laplace's continued fraction, 35 levels evaluated backwards (< 5e-13)."""
    zz = z * z
    series = zz.exp() - z * polevl(zz * 2.0, _ERFCX_SERIES) * (2.0 / _SQRT_PI)
    t = z
    for k in range(35, 0, -1):
        t = z + (k / 2.0) / t
    frac = (1.0 / _SQRT_PI) / t
    return where(z.g, z.lt(2.0), series, frac)


def erfc_from(x: E, p: E) -> E:
    """erfc(x) given p = erfcx(|x|)."""
    pos = p * (-(x * x)).exp()
    return where(x.g, x.lt(0.0), 2.0 - pos, pos)
