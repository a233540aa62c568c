"""Are two size expressions of the dynamic axes equal for every size? A proof sympy misses;
and one form for each size, so that tract (which compares sizes by their form) sees equal
sizes as equal.

``ceil(S / 4)`` reaches the walker written several ways: ``-floor(-S/4)`` (torch's
``CeilDiv``), ``floor(S/4 + Mod(3*S, 4)/4)`` (``(S + 3) // 4`` after torch's
simplification), ``floor((S + 3)/4)``. ``sympy.simplify`` does not prove such forms equal,
since it knows nothing of ``floor`` of a symbol; their difference is 0 in every remainder
class of the symbols (:mod:`t2n.walk.dim_periodic`). Forms that reading does not cover
(``Max``, a floor of a product of symbols, too many classes) are not proven, and the
caller stays conservative.
"""

from __future__ import annotations

import math

from t2n.walk.dim_periodic import expand_floors, in_floors, period as _period, \
    residue_classes


def known_equal(a, b) -> bool:
    """True when the sizes ``a`` and ``b`` (ints or sympy expressions of integer symbols)
    are equal for every value of their symbols; False when that is not proven."""
    import sympy

    diff = sympy.sympify(a) - sympy.sympify(b)
    if diff == 0 or sympy.simplify(diff) == 0 or in_floors(diff) == 0:
        return True
    classes = residue_classes(diff)
    return classes is not None and all(sympy.simplify(v) == 0 for _, v in classes)


def canonical_floors(expr):
    """``expr`` with each part that holds floors of one symbol written in one form:
    ``q*s + b + m*floor((a*s + c)/L)`` (``L`` the least period, ``q`` the least in size),
    so that equal sizes written differently (``-4*floor(-S/4)``,
    ``4*floor(S/4 + Mod(3*S, 4)/4)``, ``4*(S - floor(3*S/4))``, all ``4*ceil(S/4)``) reach
    tract as one expression: tract compares a reshape's volumes by their form, and refuses
    two forms of one size. A part of another shape (not linear in ``s`` over each period)
    is left as it is."""
    import sympy

    if not isinstance(expr, sympy.Basic) or not expr.has(sympy.floor, sympy.ceiling,
                                                         sympy.Mod):
        return expr
    if len(expr.free_symbols) == 1:
        return _canonical_one(expr)
    if not expr.args:
        return expr
    return expr.func(*(canonical_floors(a) for a in expr.args))


def _canonical_one(expr):
    import sympy

    (s,) = expr.free_symbols
    e = in_floors(expr)
    period = _period(e, s)
    if period is None or period > 256:
        return expr
    k = sympy.Dummy("k", integer=True, nonnegative=True)
    slope, values = None, []
    for r in range(period):
        poly = sympy.expand(expand_floors(e.xreplace({s: period * k + r})))
        if poly.has(sympy.floor) or not poly.is_polynomial(k) or sympy.degree(poly, k) > 1:
            return expr
        a, b = poly.coeff(k, 1), poly.coeff(k, 0)
        if not (a.is_Integer and b.is_Integer) or slope not in (None, a):
            return expr
        slope = a
        values.append(int(b))
    slope = int(slope)
    for p in sorted(d for d in range(1, period + 1) if period % d == 0):
        if slope * p % period == 0 and all(
                values[r] - values[r % p] == (r // p) * (slope * p // period)
                for r in range(period)):
            period, slope, values = p, slope * p // period, values[:p]
            break
    for q in sorted(range(-period, period + 1), key=lambda q: (abs(q), q)):
        # E(s) - q*s of the form b0 + m*floor((a*s + c)/L): q = 0 first, the same search
        # for every form of one function, so one answer
        form = _floor_form(slope - q * period, [v - q * r for r, v in enumerate(values)],
                           period, s)
        if form is not None:
            return q * s + form
    return expr


def _floor_form(slope, values, period, s):
    """``b0 + m*floor((a*s + c)/L)`` taking ``values[r]`` at ``s = r`` and growing by
    ``slope`` per period ``L``, or None."""
    import sympy

    b0 = values[0]
    m = math.gcd(slope, *(v - b0 for v in values))
    if m == 0:
        return sympy.Integer(b0)
    if slope // m < 0:
        m = -m
    for c in range(period):
        if all((slope // m * r + c) // period == (values[r] - b0) // m
               for r in range(period)):
            return b0 + m * sympy.floor((slope // m * s + c) / sympy.Integer(period))
    return None


def tidy_size(expr):
    """A size expression as the walker keeps it: constant quotients folded
    (:func:`fold_constant_quotients`), floors of one symbol in one form
    (:func:`canonical_floors`)."""
    return canonical_floors(fold_constant_quotients(expr))


def fold_constant_quotients(expr):
    """``expr`` with each ``floor(n / d)`` whose divisor ``d`` holds a symbol and whose
    quotient is proven one number for every size replaced by that number: torch writes a
    chunk size back as ``(S + Mod(3*S, 4)) // ((S + 3) // 4)``, 4 at every ``S``, a division
    tract's dim expressions cannot spell. The candidate comes from a few sizes of the
    symbols, the proof from :func:`known_equal` or the bounds of a floor."""
    import sympy

    def quotient(fl):
        num, den = sympy.together(fl.args[0]).as_numer_denom()
        if not den.free_symbols:
            return fl
        c = _sampled_quotient(num, den)
        return c if c is not None and _proven_quotient(num, den, c) else fl

    return expr.replace(lambda e: isinstance(e, sympy.floor) and e.free_symbols, quotient)


def _sampled_quotient(num, den):
    """``floor(num / den)`` if it is one integer at a few sizes of the symbols, else None."""
    import sympy

    syms = sorted(num.free_symbols | den.free_symbols, key=sympy.default_sort_key)
    values = set()
    for v in (1, 2, 3, 5, 8, 13, 64):
        at = {s: v for s in syms}
        d = den.xreplace(at)
        if d != 0:
            values.add(sympy.floor(num.xreplace(at) / d))
    return values.pop() if len(values) == 1 and next(iter(values)).is_Integer else None


def _proven_quotient(num, den, c) -> bool:
    """``floor(num / den) == c`` at every size: ``num == c*den``, or ``c*den <= num <
    (c+1)*den`` with ``den`` positive."""
    from t2n.walk.dim_sign import known_nonnegative

    if known_equal(num, c * den):
        return True
    return known_nonnegative(den - 1) and known_nonnegative(num - c * den) \
        and known_nonnegative((c + 1) * den - num - 1)
