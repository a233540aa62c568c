"""Gamma-family kernels (log|Gamma| by Lanczos, digamma) and Horner evaluation, shared by the
unary-math and special-function families."""

from __future__ import annotations

import math

import torch

from t2n.mappings.helpers.elementwise import is_inf, select


def _bool(g, kind, a, b):
    return g.binary(kind, a, b, a.dtype, out_dtype=torch.bool)


def poly(g, x, coeffs):
    """Horner evaluation of sum(c_i x^(n-i)) with scalar coefficients."""
    acc = g.broadcast_to(g.scalar(coeffs[0], x.dtype), x.shape)
    for c in coeffs[1:]:
        acc = g.binary("add", g.binary("mul", acc, x, x.dtype), c, x.dtype)
    return acc


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
    series = poly(g, inv2, [-1.0 / 240, 1.0 / 252, -1.0 / 120, 1.0 / 12])
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
