"""torch.special: the error-function family, ndtri, entr, polygamma and Hurwitz zeta.

Everything is evaluated in f64 and cast back: tract's own erf is single precision only, and
the tails (erfc(5) = 1.5e-12, log_ndtr(-20)) need the relative precision that only a
dedicated f64 evaluation gives. The algorithms follow PyTorch's kernels (ATen Math.h, which
follows Cephes) branch by branch, so edge values (0, poles, infinities, NaN) come out as in
torch. Bessel functions live in ``special_bessel.py``, orthogonal polynomials in
``special_poly.py``.
"""

from __future__ import annotations

import math

import torch

from t2n.mappings.helpers.elementwise import log1p_of
from t2n.mappings.helpers.gamma import digamma_of
from t2n.mappings.helpers.special_expr import (F64, E, both, either, erfc_from, erfcx_pos, float_in,
                                              negate, out, p1evl, polevl, where)
from t2n.walk.builder import broadcast_shapes
from t2n.walk.registry import aten

INF = float("inf")
NAN = float("nan")


# --------------------------------------------------------------------------- erfc family


def erfc_f64(x: E) -> E:
    """erfc(x) in f64 for every x."""
    return erfc_from(x, erfcx_pos(x.abs()))


@aten("special_erfcx")
def special_erfcx(g, self):
    x = float_in(g, self)
    p = erfcx_pos(x.abs())
    return out(g, where(g, x.lt(0.0), (x * x).exp() * 2.0 - p, p))


@aten("special_ndtr")
def special_ndtr(g, self):
    x = float_in(g, self)
    return out(g, erfc_f64(x * (-math.sqrt(0.5))) * 0.5)


@aten("special_log_ndtr")
def special_log_ndtr(g, self):
    """log Phi(x): log(erfcx(-t)/2) - t^2 below -1 (no underflow), log1p(-erfc(t)/2)
    above (no loss near 0), t = x / sqrt(2)."""
    x = float_in(g, self)
    t = x * math.sqrt(0.5)
    p = erfcx_pos(t.abs())
    low = (p * 0.5).log() - t * t
    high = E(g, log1p_of(g, (erfc_from(t, p) * -0.5).t))
    return out(g, where(g, x.lt(-1.0), low, high))


# --------------------------------------------------------------------------- ndtri
_NDTRI_P0 = [-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
             1.39312609387279679503E1, -1.23916583867381258016E0]
_NDTRI_Q0 = [1.95448858338141759834E0, 4.67627912898881538453E0, 8.63602421390890590575E1,
             -2.25462687854119370527E2, 2.00260212380060660359E2, -8.20372256168333339912E1,
             1.59056225126211695515E1, -1.18331621121330003142E0]
_NDTRI_P1 = [4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
             4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
             -1.40256079171354495875E-1, -3.50424626827848203418E-2,
             -8.57456785154685413611E-4]
_NDTRI_Q1 = [1.57799883256466749731E1, 4.53907635128879210584E1, 4.13172038254672030440E1,
             1.50425385692907503408E1, 2.50464946208309415979E0, -1.42182922854787788574E-1,
             -3.80806407691578277194E-2, -9.33259480895457427372E-4]
_NDTRI_P2 = [3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
             1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
             3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9]
_NDTRI_Q2 = [6.02427039364742014255E0, 3.67983563856160859403E0, 1.37702099489081330271E0,
             2.16236993594496635890E-1, 1.34204006088543189037E-2, 3.28014464682127739104E-4,
             2.89247864745380683936E-6, 6.79019408009981274425E-9]
_EXP_M2 = 0.13533528323661269189


@aten("special_ndtri")
def special_ndtri(g, self):
    """Inverse of the normal CDF (Cephes ndtri): a rational function of y - 1/2 in the
    centre, rational functions of 1/sqrt(-2 log y) in the tails."""
    y0 = float_in(g, self)
    flip = y0.gt(1.0 - _EXP_M2)
    y = where(g, flip, 1.0 - y0, y0)
    c = y - 0.5
    c2 = c * c
    centre = (c + c * (c2 * polevl(c2, _NDTRI_P0) / p1evl(c2, _NDTRI_Q0))) * math.sqrt(
        2 * math.pi)
    x = (y.log() * -2.0).sqrt()
    x0 = x - x.log() / x
    z = 1.0 / x
    near = z * polevl(z, _NDTRI_P1) / p1evl(z, _NDTRI_Q1)
    far = z * polevl(z, _NDTRI_P2) / p1evl(z, _NDTRI_Q2)
    tail = x0 - where(g, x.lt(8.0), near, far)
    tail = where(g, flip, tail, -tail)
    r = where(g, y.gt(_EXP_M2), centre, tail)
    r = where(g, either(g, y0.lt(0.0), y0.gt(1.0)), NAN, r)
    r = where(g, y0.eq(0.0), -INF, r)
    r = where(g, y0.eq(1.0), INF, r)
    return out(g, r)


# --------------------------------------------------------------------------- entr
@aten("special_entr")
def special_entr(g, self):
    """-x log x; 0 at 0, -inf below 0, NaN kept (computed in the output dtype, like torch)."""
    d = g.out_dtype()
    x = E(g, g.cast(self, d))
    pos = -(x * x.log())
    r = where(g, x.gt(0.0), pos, where(g, x.eq(0.0), 0.0, -INF, d), d)
    return where(g, x.isnan(), x, r, d).t


# --------------------------------------------------------------------------- zeta
# Euler-Maclaurin denominators (2k)! / B_2k, as in Cephes zeta.c
_EM = [12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
       7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
       -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18]
_MACHEP = 1.11022302462515654042E-16


def _lit(x):
    return isinstance(x, (int, float))


def _zeta_pos(g, x, q: E) -> E:
    """Hurwitz zeta(x, q) for q > 0 by torch's (Cephes') algorithm: nine direct terms, then
    the Euler-Maclaurin tail; each step after torch's convergence test is masked out, so
    the result is torch's even where the asymptotic tail would diverge. ``x`` is an E or a
    Python number (polygamma's constant order)."""
    s = q ** (-x)
    a = q
    b = None
    done = None
    for _ in range(9):
        a = a + 1.0
        b = a ** (-x)
        s_new = s + b
        conv = b.lt(s_new * _MACHEP)
        s = s_new if done is None else where(g, done, s, s_new)
        done = conv if done is None else either(g, done, conv)
    w = a
    xm1 = x - 1.0
    s = where(g, done, s, s + b * w / xm1 - b * 0.5)
    acc = 1.0
    k = 0.0
    for i in range(12):
        acc = acc * (x + k)
        b = b / w
        t = acc * b / _EM[i]
        s_new = s + t
        conv = (t / s_new).abs().lt(_MACHEP)
        s = where(g, done, s, s_new)
        done = either(g, done, conv)
        k += 1.0
        acc = acc * (x + k)
        b = b / w
        k += 1.0
    return s


def zeta_of(g, x, q: E) -> E:
    """Hurwitz zeta with torch's domain rules. Negative non-integer q with integer x (where
    torch sums the series directly from q, an unbounded loop) uses the exact identity
    zeta(x, q) = zeta(x, r) + (-1)^x (zeta(x, 1 - r) - zeta(x, 1 - q)), r = q - floor(q),
    whose three evaluations all have positive q."""
    qf = q.floor()
    r = q - qf
    if _lit(x):
        x = float(x)
        if x <= 1.0:
            return E(g, g.broadcast_to(g.scalar(INF if x == 1.0 else NAN, F64), q.t.shape))
        x_int = x == math.floor(x)
        sign = 1.0 - 2.0 * (x % 2.0) if x_int else None
    else:
        x_int = x.eq(x.floor())
        sign = 1.0 - (x - (x * 0.5).floor() * 2.0) * 2.0
    if x_int is False:
        main = _zeta_pos(g, x, q)
    else:
        neg = q.lt(0.0) if x_int is True else both(g, q.lt(0.0), x_int)
        # the three evaluations share one graph: stacked on a new leading axis
        shape = broadcast_shapes(q.t.shape, () if _lit(x) else x.t.shape)
        parts = [g.unsqueeze(g.broadcast_to(v.t, shape), [0])
                 for v in (where(g, neg, r, q), 1.0 - r, 1.0 - q)]
        z = _zeta_pos(g, x, E(g, g.concat(parts, 0)))
        z0, z1, z2 = (E(g, g.squeeze(g.slice(z.t, 0, i, i + 1), [0])) for i in range(3))
        main = where(g, neg, z0 + sign * (z1 - z2), z0)
    nonpos = q.le(0.0)
    if x_int is False:
        main = where(g, nonpos, NAN, main)
    elif x_int is not True:
        main = where(g, both(g, nonpos, negate(g, x_int)), NAN, main)
    main = where(g, both(g, nonpos, q.eq(qf)), INF, main)
    if not _lit(x):
        main = where(g, x.lt(1.0), NAN, main)
        main = where(g, x.eq(1.0), INF, main)
    return main


@aten("special_zeta")
def special_zeta(g, self, other):
    d = g.out_dtype()
    if _lit(self) and _lit(other):
        raise g.error("self, other: both Python numbers (nothing to compute at run time)")
    x = self if _lit(self) else E(g, g.cast(self, F64))
    q = E(g, g.as_tensor(other, F64))
    return out(g, zeta_of(g, x, q), d)


# --------------------------------------------------------------------------- polygamma
def trigamma_of(g, x: E) -> E:
    """psi'(x) as torch computes it: reflection below 1/2, six recurrence steps, then the
    asymptotic series. sin(pi x)^2 is taken on the fractional part of x, so poles give
    +inf exactly."""
    refl = x.lt(0.5)
    sp = ((x - x.floor()) * math.pi).sin()
    r = where(g, refl, -(math.pi ** 2) / (sp * sp), 0.0)
    z = where(g, refl, 1.0 - x, x)
    for _ in range(6):
        r = r + 1.0 / (z * z)
        z = z + 1.0
    ixx = 1.0 / (z * z)
    r = r + (1.0 + 1.0 / (z * 2.0) + ixx * (1.0 / 6 - ixx * (1.0 / 30 - ixx * (1.0 / 42)))) / z
    return where(g, refl, -r, r)


@aten("polygamma", "special_polygamma")
def polygamma(g, n, self):
    if not isinstance(n, int):
        raise g.error("n: the order must be a constant integer")
    if n < 0:
        raise g.error(f"n: polygamma is not defined for negative n ({n})")
    x = float_in(g, self)
    if n == 0:
        psi = E(g, digamma_of(g, x.t))
        # torch: digamma(+-0) = -+inf
        return out(g, where(g, x.eq(0.0), -(1.0 / x), psi))
    if n == 1:
        return out(g, trigamma_of(g, x))
    factor = (-1.0 if n % 2 == 0 else 1.0) * float(math.factorial(n))
    return out(g, zeta_of(g, float(n + 1), x) * factor)


# --------------------------------------------------------------------------- nextafter
@aten("nextafter")
def nextafter(g, self, other):
    """The neighbouring float of x towards y, by arithmetic (tract has no bit casts):
    ulp = 2^(e - mantissa bits) with e = floor(log2 |x|) made exact by comparing with powers
    of two, half that when stepping down from a power of two; subnormals share the smallest
    exponent. For f32 the sum is formed in f64, where it is exact; for f64 it is the
    neighbour itself, also exact. Bit-exact against torch (tested on powers of two,
    subnormals, 0, +-max, inf and NaN)."""
    d = g.out_dtype()
    if d not in (torch.float32, torch.float64):
        raise g.error(f"self: nextafter on {d} is not supported (float32/float64 only)")
    fi = torch.finfo(d)
    mant = {torch.float32: 23, torch.float64: 52}[d]  # mantissa bits
    emin = math.frexp(fi.tiny)[1] - 1  # -126 / -1022
    x = E(g, g.cast(self, F64))
    y = E(g, g.cast(other, F64))
    ax = x.abs()
    e0 = (ax.log() * (1.0 / math.log(2.0))).floor()
    p = 2.0 ** e0
    e = e0 + where(g, (p * 2.0).le(ax), 1.0, 0.0) - where(g, p.gt(ax), 1.0, 0.0)
    e = E(g, g.binary("max", e.t, float(emin), F64))
    up = 2.0 ** (e - float(mant))
    to_zero = either(g, both(g, x.gt(0.0), y.lt(x)), both(g, x.lt(0.0), y.gt(x)))
    down_from_pow2 = both(g, both(g, to_zero, ax.eq(2.0 ** e)), e.gt(float(emin)))
    step = where(g, down_from_pow2, up * 0.5, up)
    toward = where(g, y.gt(x), 1.0, -1.0)
    r = x + toward * step
    # at 0, e is clamped to emin: up is the smallest subnormal (computed at run time: a
    # subnormal f64 literal does not survive as a constant)
    r = where(g, x.eq(0.0), toward * up, r)
    # stepping from -smallest to zero gives -0.0 (the sum is +0.0)
    r = where(g, both(g, r.eq(0.0), x.lt(0.0)), -r, r)
    r = where(g, x.isinf(), where(g, x.gt(0.0), fi.max, -fi.max), r)
    r = where(g, x.eq(y), y, r)
    r = where(g, either(g, x.isnan(), y.isnan()), NAN, r)
    return out(g, r, d)
