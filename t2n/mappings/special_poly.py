"""torch.special orthogonal polynomials P_n(x) with a tensor (or scalar) degree n.

torch runs the three-term recurrence n times per element, a loop whose length is data. Here:

* Chebyshev T/U/V/W and their shifted versions take any runtime n: the closed forms
  cos/cosh of n*acos(x)/n*acosh(|x|) (f64), with torch's special cases (n < 0 -> 0, n = 0, 1,
  |x| = 1, infinite x) and its float overflow behaviour (once two consecutive recurrence
  values overflow, torch's loop produces inf - inf = NaN).
* Hermite H/He, Laguerre L and Legendre P have no such closed form: they need n to be a
  constant (a Python number or a constant tensor) of at most 64, and the recurrence is
  unrolled in torch's own operation order and dtype. A runtime n is refused.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.special_expr import F64, E, both, out, where
from t2n.walk.registry import aten

INF = float("inf")
NAN = float("nan")
_I64_LIMIT = 9.223372036854775807e18
MAX_UNROLLED_DEGREE = 64


def _expr(g, v, dtype):
    return E(g, g.as_tensor(v, dtype))


def _degree(g, n: E):
    """(trunc(n), valid, sign=(-1)^n) as torch's static_cast<int64_t>(n): NaN, +-inf and
    values out of int64 become INT64_MIN on x86, i.e. a negative degree (result 0)."""
    nt = where(g, n.lt(0.0), n.f("ceil"), n.floor())
    valid = both(g, nt.ge(0.0), nt.lt(_I64_LIMIT))
    odd = nt - (nt * 0.5).floor() * 2.0
    return nt, valid, 1.0 - odd * 2.0


class _Kind:
    """One Chebyshev kind: the closed form for |x| < 1 (in theta = acos x) and for |x| > 1
    (in phi = acosh |x|, with the parity sign for x < -1), the values at x = +-1 and the
    degree-1 polynomial."""

    def __init__(self, inner, outer_pos, outer_neg, at_one, at_minus_one, first):
        self.inner, self.outer_pos, self.outer_neg = inner, outer_pos, outer_neg
        self.at_one, self.at_minus_one, self.first = at_one, at_minus_one, first


def _half(nt):
    return nt + 0.5


_T = _Kind(lambda nt, th: (nt * th).cos(),
           lambda nt, ph: (nt * ph).f("cosh"),
           lambda nt, ph: (nt * ph).f("cosh"),
           lambda nt, s: 1.0, lambda nt, s: s,
           lambda x: x)
_U = _Kind(lambda nt, th: ((nt + 1.0) * th).sin() / th.sin(),
           lambda nt, ph: ((nt + 1.0) * ph).f("sinh") / ph.f("sinh"),
           lambda nt, ph: ((nt + 1.0) * ph).f("sinh") / ph.f("sinh"),
           lambda nt, s: nt + 1.0, lambda nt, s: s * (nt + 1.0),
           lambda x: x + x)
_V = _Kind(lambda nt, th: (_half(nt) * th).cos() / (th * 0.5).cos(),
           lambda nt, ph: (_half(nt) * ph).f("cosh") / (ph * 0.5).f("cosh"),
           lambda nt, ph: (_half(nt) * ph).f("sinh") / (ph * 0.5).f("sinh"),
           lambda nt, s: 1.0, lambda nt, s: s * (nt * 2.0 + 1.0),
           lambda x: x + x - 1.0)
_W = _Kind(lambda nt, th: (_half(nt) * th).sin() / (th * 0.5).sin(),
           lambda nt, ph: (_half(nt) * ph).f("sinh") / (ph * 0.5).f("sinh"),
           lambda nt, ph: (_half(nt) * ph).f("cosh") / (ph * 0.5).f("cosh"),
           lambda nt, s: nt * 2.0 + 1.0, lambda nt, s: s,
           lambda x: x + x + 1.0)


def _closed(g, kind, x: E, nt: E, sign: E) -> E:
    """P_nt(x) for finite x by the trigonometric / hyperbolic closed form."""
    ax = x.abs()
    th = x.f("acos")
    ph = ax.f("acosh")
    outer = where(g, x.lt(0.0), kind.outer_neg(nt, ph) * sign, kind.outer_pos(nt, ph))
    r = where(g, ax.lt(1.0), kind.inner(nt, th), outer)
    r = where(g, x.eq(1.0), kind.at_one(nt, sign), r)
    return where(g, x.eq(-1.0), kind.at_minus_one(nt, sign), r)


def chebyshev(g, kind, x, n, shifted: bool):
    d = g.out_dtype()
    x = _expr(g, x, F64)
    if shifted:
        x = x + x - 1.0
    n = _expr(g, n, F64)
    nt, valid, sign = _degree(g, n)
    r = _closed(g, kind, x, nt, sign)
    # torch's recurrence in the output dtype: NaN once P_{n-2} overflowed, +-inf once P_n did
    fmax = torch.finfo(d).max
    before = _closed(g, kind, x, nt - 2.0, sign)
    r = where(g, r.abs().gt(fmax), r * INF, r)
    r = where(g, both(g, nt.ge(2.0), before.abs().gt(fmax)), NAN, r)
    # infinite x: P_2 = +inf, NaN beyond (inf - inf in the recurrence)
    r = where(g, x.isinf(), where(g, nt.eq(2.0), INF, NAN), r)
    r = where(g, nt.eq(1.0), kind.first(x), r)
    r = where(g, nt.eq(0.0), 1.0, r)
    return out(g, where(g, valid, r, 0.0), d)


def _register(name, kind, shifted):
    @aten(name)
    def mapping(g, x, n):
        return chebyshev(g, kind, x, n, shifted)
    mapping.__name__ = name
    return mapping


for _name, _kind in (("t", _T), ("u", _U), ("v", _V), ("w", _W)):
    _register(f"special_chebyshev_polynomial_{_name}", _kind, False)
    _register(f"special_shifted_chebyshev_polynomial_{_name}", _kind, True)


# --------------------------------------------------------------------------- constant n
def _const_degrees(g, n):
    """Integer degrees of a constant n (torch's int64 conversion; -1 for invalid), or
    refuse a runtime n."""
    if isinstance(n, (int, float)):
        values = torch.tensor([float(n)], dtype=F64)
        scalar = True
    elif n.is_const:
        values = n.value.to(F64).reshape(-1)
        scalar = False
    else:
        raise g.error("n: the degree is a run-time tensor; this polynomial has no closed "
                      "form, so t2n needs n as a constant (Python number or constant tensor) "
                      f"of at most {MAX_UNROLLED_DEGREE}")
    ok = torch.isfinite(values) & (values > -1) & (values < _I64_LIMIT)
    ints = torch.where(ok, values.trunc(), torch.full_like(values, -1.0))
    return ints, scalar


def _unrolled(g, x, n, start, step, limit=None, special=None):
    """Evaluate a recurrence polynomial for a constant degree: P_0, P_1 = start(x), then
    P_{k+1} = step(k, x, P_k, P_{k-1}) in the output dtype, in torch's operation order;
    each element picks P_m by its (constant) degree. Degrees above ``limit`` give NaN
    (torch's Hermite guard), invalid degrees 0."""
    d = g.out_dtype()
    degrees, scalar = _const_degrees(g, n)
    if limit is not None:
        degrees = torch.where(degrees > limit, torch.full_like(degrees, -2.0), degrees)
    top = int(degrees.max().item()) if degrees.numel() else -1
    if top > MAX_UNROLLED_DEGREE:
        raise g.error(f"n: degree {top} is above {MAX_UNROLLED_DEGREE}; the unrolled "
                      "recurrence would be too large")
    xe = _expr(g, x, d)
    values = list(start(xe))
    for k in range(1, top):
        values.append(step(k, xe, values[k], values[k - 1]))

    def pick(m):
        if m < 0:
            return NAN if m == -2 else 0.0
        return special(xe, m, values[m]) if special is not None else values[m]

    if scalar:
        v = pick(int(degrees[0].item()))
        if isinstance(v, E):
            return out(g, v * 1.0, d)
        return g.broadcast_to(g.scalar(v, d), g.out_shape())
    codes = E(g, g.const(degrees.reshape(n.value.shape), F64))
    r = E(g, g.broadcast_to(g.scalar(0.0, d), g.out_shape()))
    for m in sorted(set(int(v) for v in degrees.tolist()) - {-1}):
        r = where(g, codes.eq(float(m)), pick(m), r, d)
    return out(g, r, d)


@aten("special_hermite_polynomial_h")
def special_hermite_polynomial_h(g, x, n):
    limit = 128 if g.out_dtype() != F64 else 512
    return _unrolled(g, x, n, lambda x: (1.0, x + x),
                     lambda k, x, q, p: (x + x) * q - p * float(2 * k), limit=limit)


@aten("special_hermite_polynomial_he")
def special_hermite_polynomial_he(g, x, n):
    limit = 128 if g.out_dtype() != F64 else 512
    return _unrolled(g, x, n, lambda x: (1.0, x),
                     lambda k, x, q, p: x * q - p * float(k), limit=limit)


def _laguerre_special(x: E, m, v):
    # torch: L_n(0) = 1 for every n >= 0 (checked before the recurrence)
    return where(x.g, x.abs().eq(0.0), 1.0, v, x.dtype) if m >= 1 else v


@aten("special_laguerre_polynomial_l")
def special_laguerre_polynomial_l(g, x, n):
    return _unrolled(g, x, n, lambda x: (1.0, 1.0 - x),
                     lambda k, x, q, p: ((float(k + k) + (1.0 - x)) * q - p * float(k))
                     / float(k + 1), special=_laguerre_special)


def _legendre_special(x: E, m, v):
    # torch: P_n(1) = 1, P_n(-1) = (-1)^n, checked before the recurrence
    if m < 1:
        return v
    r = where(x.g, x.eq(1.0), 1.0, v, x.dtype)
    return where(x.g, x.eq(-1.0), 1.0 if m % 2 == 0 else -1.0, r, x.dtype)


@aten("special_legendre_polynomial_p")
def special_legendre_polynomial_p(g, x, n):
    return _unrolled(g, x, n, lambda x: (1.0, x),
                     lambda k, x, q, p: (x * float(k + k + 1) * q - p * float(k))
                     / float(k + 1), special=_legendre_special)

