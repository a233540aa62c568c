"""Correctly rounded division and exact float remainders, which tract's ``div`` is not.

tract divides floats by multiplying by the reciprocal (f16, f32 and f64 alike): half of the
quotients are one ulp off, and ``7 * 0.1 / 0.1`` may come out just below ``7``. That is
harmless for a value but not under a discontinuity: ``floor``/``trunc`` of a quotient, an
integer ``linspace``, ``fmod``/``remainder`` of exact multiples (``9.8`` instead of ``0``).
PyTorch's kernels divide correctly rounded and take ``std::fmod`` (exact). Here:

- :func:`rounded_div` is IEEE division: f16/f32 operands are divided in f64 and rounded
  once (the f64 quotient of two 24-bit numbers is never close enough to a rounding boundary
  of f32 to round differently), f64 operands get one correction step from the exact residual
  ``a - q*b`` (Dekker's exact product);
- :func:`exact_fmod` is C's ``fmod`` (sign of the dividend), computed in f64 from an
  approximate quotient ``q``: ``a - q*b`` is exact with Dekker's product (an ``fmod``
  result is always representable), and one correction step fixes a ``q`` one off.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import select
from t2n.mappings.helpers.integer import fixed_loop

F64 = torch.float64
_SPLIT = float(2 ** 27 + 1)  # Veltkamp's constant for f64: 53 bits -> 26 + 27


def _split(g, x):
    t = g.binary("mul", x, _SPLIT, F64)
    hi = g.binary("sub", t, g.binary("sub", t, x, F64), F64)
    return hi, g.binary("sub", x, hi, F64)


def residual(g, a, q, b):
    """``a - q*b`` without rounding the product (f64 tensors; exact whenever the result is
    representable, e.g. for ``q`` the quotient rounded or truncated)."""
    p = g.binary("mul", q, b, F64)
    qh, ql = _split(g, q)
    bh, bl = _split(g, b)
    err = g.binary("sub", g.binary("mul", qh, bh, F64), p, F64)
    err = g.binary("add", err, g.binary("mul", qh, bl, F64), F64)
    err = g.binary("add", err, g.binary("mul", ql, bh, F64), F64)
    err = g.binary("add", err, g.binary("mul", ql, bl, F64), F64)  # q*b = p + err exactly
    return g.binary("sub", g.binary("sub", a, p, F64), err, F64)


def _finite(g, x):
    return g.binary("lt", g.unary("abs", x), float("inf"), F64, out_dtype=torch.bool)


def rounded_div(g, a, b, dtype):
    """``a / b`` correctly rounded in ``dtype`` (a float dtype)."""
    a64, b64 = g.cast(g.as_tensor(a, dtype), F64), g.cast(g.as_tensor(b, dtype), F64)
    q = g.binary("div", a64, b64, F64)
    if dtype == F64:
        corrected = g.binary("add", q, g.binary("div", residual(g, a64, q, b64), b64, F64),
                             F64)
        # inf/NaN/0 quotients (and overflowing products) keep the plain quotient
        ok = g.binary("and", _finite(g, corrected), g.binary("ne", q, 0.0, F64,
                                                             out_dtype=torch.bool), torch.bool)
        q = select(g, ok, corrected, q)
    return g.cast(q, dtype)


def _trunc(g, x):
    neg = g.binary("lt", x, 0.0, x.dtype, out_dtype=torch.bool)
    return select(g, neg, g.unary("ceil", x), g.unary("floor", x))


# passes of ``r -= trunc(r / b) * b`` needed to bring the largest ``|a / b|`` of a dtype
# (2^40 for f16, 2^277 for f32, 2^2098 for f64) below 1, each pass gaining 49 bits or more
_PASSES = {torch.float16: 1, torch.float32: 6, torch.float64: 43}


def _reduce_pass(g, r, b):
    return residual(g, r, _trunc(g, g.binary("div", r, b, F64)), b)


def exact_fmod(g, a, b, dtype):
    """``fmod(a, b)`` (C's, the sign of ``a``, ``|r| < |b|``) as an exact f64 tensor, for
    float operands of ``dtype``. ``b = 0`` or an infinite ``a`` give NaN, a finite ``a``
    and an infinite ``b`` give ``a``. Each pass subtracts the multiple of ``b`` the
    approximate quotient names, exactly (Dekker); quotients beyond 2^49 take more passes
    (a fixed-count loop), the last remainder is at most one ``b`` off and is corrected.
    f64 operands beyond 1e300 overflow Dekker's split (NaN)."""
    a64, b64 = g.cast(g.as_tensor(a, dtype), F64), g.cast(g.as_tensor(b, dtype), F64)
    r = _reduce_pass(g, a64, b64)
    passes = _PASSES.get(dtype, 1)
    if passes > 1 and not any(isinstance(d, int) and d == 0 for d in r.shape):
        # the steps are zeros, added to keep the scanned input alive (tract fails to
        # discard an unused scan input)
        r = fixed_loop(g, "fmod", torch.zeros(passes - 1, dtype=torch.int64), [r, b64],
                       lambda body, s, st: [body.binary("add", _reduce_pass(body, *st),
                                                        body.cast(s, F64), F64), st[1]])[0]
    # the last quotient may be one off: r of the wrong sign, or |r| >= |b|
    step = g.binary("mul", g.unary("abs", b64), g.unary("sign", a64), F64)  # |b| * sign(a)
    over = g.binary("lt", g.binary("mul", r, g.unary("sign", a64), F64), 0.0, F64,
                    out_dtype=torch.bool)
    short = g.binary("ge", g.unary("abs", r), g.unary("abs", b64), F64, out_dtype=torch.bool)
    r = select(g, over, g.binary("add", r, step, F64),
               select(g, short, g.binary("sub", r, step, F64), r))
    # fmod(finite, +-inf) is the dividend (the split of an infinite b gives NaN)
    keep = g.binary("and", g.unary("not", _finite(g, b64)), _finite(g, a64), torch.bool)
    keep = g.binary("and", keep, g.binary("eq", b64, b64, F64, out_dtype=torch.bool),
                    torch.bool)
    return select(g, keep, a64, r)
