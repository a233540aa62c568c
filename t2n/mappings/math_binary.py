"""Binary and ternary math: remainder/fmod with PyTorch's sign rules, atan2, hypot,
logaddexp, xlogy, copysign, heaviside, ldexp, lerp, addcmul/addcdiv, float_power, isclose.

Operands are computed in the node's result dtype (``g.out_dtype()``), as torch promotes.
"""

from __future__ import annotations

import math

import torch

from t2n.mappings.helpers.elementwise import is_inf, is_nan, log1p_of, select
from t2n.mappings.helpers.exact_division import exact_fmod
from t2n.walk.registry import aten


def _b(g, kind, a, b):
    dtype = a.dtype
    return g.binary(kind, a, b, dtype, out_dtype=torch.bool)


def _operands(g, self, other, dtype=None):
    dtype = dtype or g.out_dtype()
    return g.as_tensor(self, dtype), g.as_tensor(other, dtype), dtype


def _trunc(g, x):
    return select(g, _b(g, "lt", x, g.scalar(0.0, x.dtype)), g.unary("ceil", x),
                  g.unary("floor", x))


def fmod_of(g, a, b, dtype):
    """C fmod, the sign of the dividend: exact for floats (helpers/exact_division.py),
    ``a - trunc(a / b) * b`` for integers (tract's integer division truncates)."""
    if dtype.is_floating_point:
        return g.cast(exact_fmod(g, a, b, dtype), dtype)
    q = g.binary("div", a, b, dtype)
    return g.binary("sub", a, g.binary("mul", q, b, dtype), dtype)


@aten("fmod")
def fmod(g, self, other):
    a, b, dtype = _operands(g, self, other)
    return fmod_of(g, a, b, dtype)


@aten("remainder")
def remainder(g, self, other):
    """Python's modulo: the result takes the sign of the divisor."""
    a, b, dtype = _operands(g, self, other)
    r = fmod_of(g, a, b, dtype)
    zero = g.scalar(0, dtype)
    fix = g.binary("and", _b(g, "ne", r, zero),
                   g.binary("tract_core_xor", _b(g, "lt", r, zero), _b(g, "lt", b, zero),
                            torch.bool),
                   torch.bool)
    return select(g, fix, g.binary("add", r, b, dtype), r)


@aten("atan2", "arctan2")
def atan2(g, self, other):
    y, x, d = _operands(g, self, other)
    zero = g.scalar(0.0, d)
    base = g.unary("atan", g.binary("div", y, x, d))
    y_neg = _b(g, "lt", y, zero)
    # y < 0 or y is -0.0
    y_signneg = g.binary("or", y_neg, g.binary("and", _b(g, "eq", y, zero),
                                                _b(g, "lt", g.unary("recip", y), zero),
                                                torch.bool), torch.bool)
    pi = select(g, y_signneg, -math.pi, math.pi, d)
    x_neg = g.binary("or", _b(g, "lt", x, zero),
                     g.binary("and", _b(g, "eq", x, zero), _b(g, "lt", g.unary("recip", x), zero),
                              torch.bool), torch.bool)
    r = select(g, x_neg, g.binary("add", base, pi, d), base)
    # x == 0: +-pi/2 by the sign of y, y == 0 handled above through atan(0/0)=nan
    x_zero = _b(g, "eq", x, zero)
    y_zero = _b(g, "eq", y, zero)
    half = select(g, y_signneg, -math.pi / 2, math.pi / 2, d)
    r = select(g, g.binary("and", x_zero, g.unary("not", y_zero), torch.bool), half, r)
    signed_zero = select(g, y_signneg, g.binary("mul", zero, -1.0, d), zero)
    r = select(g, g.binary("and", y_zero, g.unary("not", x_neg), torch.bool), signed_zero, r)
    r = select(g, g.binary("and", y_zero, x_neg, torch.bool), pi, r)
    # infinities
    yi, xi = is_inf(g, y), is_inf(g, x)
    both = g.binary("and", yi, xi, torch.bool)
    quarter = select(g, x_neg, 3 * math.pi / 4, math.pi / 4, d)
    quarter = select(g, y_signneg, g.unary("neg", quarter), quarter)
    return select(g, both, quarter, r)


@aten("hypot")
def hypot(g, self, other):
    a, b, d = _operands(g, self, other)
    r = g.unary("sqrt", g.binary("add", g.binary("mul", a, a, d), g.binary("mul", b, b, d), d))
    return select(g, g.binary("or", is_inf(g, a), is_inf(g, b), torch.bool), float("inf"), r, d)


def _logaddexp(g, a, b, d, base_e: bool):
    m = g.binary("max", a, b, d)
    diff = g.unary("neg", g.unary("abs", g.binary("sub", a, b, d)))
    if base_e:
        r = g.binary("add", m, log1p_of(g, g.unary("exp", diff)), d)
    else:
        e = g.binary("pow", g.scalar(2.0, d), diff, d)
        r = g.binary("add", m, g.binary("mul", log1p_of(g, e), 1 / math.log(2.0), d), d)
    # equal infinities: the result is that infinity (a - b would be nan)
    return select(g, g.binary("and", _b(g, "eq", a, b), is_inf(g, a), torch.bool), a, r)


@aten("logaddexp")
def logaddexp(g, self, other):
    a, b, d = _operands(g, self, other)
    return _logaddexp(g, a, b, d, True)


@aten("logaddexp2")
def logaddexp2(g, self, other):
    a, b, d = _operands(g, self, other)
    return _logaddexp(g, a, b, d, False)


@aten("xlogy", "special_xlogy")
def xlogy(g, self, other):
    x, y, d = _operands(g, self, other)
    r = g.binary("mul", x, g.unary("log", y), d)
    r = select(g, _b(g, "eq", x, g.scalar(0.0, d)), 0.0, r, d)
    return select(g, is_nan(g, y), y, r)


@aten("special_xlog1py")
def xlog1py(g, self, other):
    x, y, d = _operands(g, self, other)
    r = g.binary("mul", x, log1p_of(g, y), d)
    r = select(g, _b(g, "eq", x, g.scalar(0.0, d)), 0.0, r, d)
    return select(g, is_nan(g, y), y, r)


def _signbit(g, x):
    zero = g.scalar(0.0, x.dtype)
    return g.binary("or", _b(g, "lt", x, zero),
                    g.binary("and", _b(g, "eq", x, zero), _b(g, "lt", g.unary("recip", x), zero),
                             torch.bool), torch.bool)


@aten("copysign")
def copysign(g, self, other):
    a, b, d = _operands(g, self, other)
    mag = g.unary("abs", a)
    return select(g, _signbit(g, b), g.unary("neg", mag), mag)


@aten("heaviside")
def heaviside(g, self, values):
    x, v, d = _operands(g, self, values)
    zero = g.scalar(0, d)
    step = select(g, _b(g, "lt", x, zero), zero, g.scalar(1, d))
    r = select(g, _b(g, "eq", x, zero), v, step)
    if d.is_floating_point:
        r = select(g, is_nan(g, x), x, r)
    return r


@aten("ldexp")
def ldexp(g, self, other):
    d = g.out_dtype()
    x = g.as_tensor(self, d)
    e = g.as_tensor(other, d)
    return g.binary("mul", x, g.binary("pow", g.scalar(2.0, d), e, d), d)


@aten("lerp")
def lerp(g, self, end, weight):
    d = g.out_dtype()
    a = g.as_tensor(self, d)
    b = g.as_tensor(end, d)
    w = g.as_tensor(weight, d)
    diff = g.binary("sub", b, a, d)
    low = g.binary("add", a, g.binary("mul", w, diff, d), d)
    high = g.binary("sub", b, g.binary("mul", diff, g.binary("sub", g.scalar(1.0, d), w, d), d),
                    d)
    return select(g, _b(g, "lt", g.unary("abs", w), g.scalar(0.5, d)), low, high)


@aten("addcmul")
def addcmul(g, self, tensor1, tensor2, value=1):
    d = g.out_dtype()
    prod = g.binary("mul", tensor1, tensor2, d)
    if value != 1:
        prod = g.binary("mul", prod, value, d)
    return g.binary("add", self, prod, d)


@aten("addcdiv")
def addcdiv(g, self, tensor1, tensor2, value=1):
    d = g.out_dtype()
    q = g.binary("div", tensor1, tensor2, d)
    if value != 1:
        q = g.binary("mul", q, value, d)
    return g.binary("add", self, q, d)


@aten("float_power")
def float_power(g, self, exponent):
    d = torch.float64
    return g.binary("pow", g.as_tensor(self, d), g.as_tensor(exponent, d), d)


@aten("isclose")
def isclose(g, self, other, rtol=1e-5, atol=1e-8, equal_nan=False):
    d = torch.promote_types(self.dtype, other.dtype)
    if not d.is_floating_point:
        return g.binary("eq", self, other, d, out_dtype=torch.bool)
    a, b = g.cast(self, d), g.cast(other, d)
    tol = g.binary("add", g.binary("mul", g.unary("abs", b), float(rtol), d), float(atol), d)
    err = g.unary("abs", g.binary("sub", a, b, d))
    finite = g.unary("not", g.binary("or", is_inf(g, err), is_nan(g, err), torch.bool))
    close = g.binary("and", _b(g, "le", err, tol), finite, torch.bool)
    close = g.binary("or", close, _b(g, "eq", a, b), torch.bool)
    if equal_nan:
        close = g.binary("or", close, g.binary("and", is_nan(g, a), is_nan(g, b), torch.bool),
                         torch.bool)
    return close


@aten("isin")
def isin(g, elements, test_elements, assume_unique=False, invert=False):
    """Compare every element with every test value: [..., 1] == [M], any over M."""
    d = torch.promote_types(getattr(elements, "dtype", torch.float32),
                            getattr(test_elements, "dtype", torch.float32))
    if not hasattr(elements, "rank"):
        elements = g.scalar(elements, d)
    if not hasattr(test_elements, "rank"):
        test_elements = g.scalar(test_elements, d)
    m = 1
    for s in test_elements.shape:
        if not isinstance(s, int):
            raise g.error("isin with a dynamic number of test elements")
        m *= s
    if m == 0:
        return g.broadcast_to(g.scalar(bool(invert), torch.bool), list(elements.shape))
    tests = g.reshape(g.cast(test_elements, d), [m]) if test_elements.rank != 1 else \
        g.cast(test_elements, d)
    e = g.unsqueeze(g.cast(elements, d), [elements.rank])
    hit = g.reduce("any_reduce", g.binary("eq", e, tests, d, out_dtype=torch.bool),
                   [elements.rank], keepdim=False)
    return g.unary("not", hit) if invert else hit
