"""Sums with one floor, folded into it: ``P + c*floor(N/q)``, for a polynomial ``P`` with
integer coefficients, written ``k*floor(M/q) + R`` with ``k = |c|``, ``P = k*P1 + R`` (the
coefficients of ``R`` in ``[0, k)``) and ``M = q*P1 + N`` (``q*P1 - N + q - 1`` when
``c < 0``, as ``-floor(x) = floor(-x + (q-1)/q)`` on multiples of ``1/q``).

Why: tract 0.23.9 simplifies ``S - S/2`` to ``S/2`` (and ``S - (2*S+3)/3 + 1`` likewise, as
if its division were exact), which is wrong for odd ``S``: the start of a circular pad's
slice, ``S - S // 2``, then reads one element too many. One division of a numerator known
to be non-negative, beside no term of the same symbols, gives that rule nothing to combine.
"""

from __future__ import annotations


def fold_single_floor(expr):
    """``expr`` with its one ``c*floor`` term folded in, or ``expr`` unchanged when it has
    no such term, several, or a numerator not known to be non-negative."""
    import sympy

    from t2n.walk.dim_sign import known_nonnegative

    if not isinstance(expr, sympy.Add):
        return expr
    floors = [t for t in expr.args if t.has(sympy.floor)]
    if len(floors) != 1:
        return expr
    c, fl = floors[0].as_coeff_Mul()
    if not (isinstance(fl, sympy.floor) and c.is_Integer and c != 0):
        return expr
    rest = expr - floors[0]
    syms = sorted(rest.free_symbols, key=sympy.default_sort_key)
    if rest.has(sympy.ceiling, sympy.Max, sympy.Min, sympy.Mod) or not rest.is_polynomial():
        return expr
    poly = sympy.Poly(rest, *(syms or [sympy.Dummy()]))
    if not all(v.is_Integer for v in poly.coeffs()):
        return expr
    k = abs(int(c))
    p1 = sum((int(v) // k) * sympy.Mul(*[s ** e for s, e in zip(poly.gens, m)])
             for m, v in zip(poly.monoms(), poly.coeffs()))
    r = sympy.expand(rest - k * p1)
    num, den = sympy.together(fl.args[0]).as_numer_denom()
    if not (den.is_Integer and int(den) > 0):
        return expr
    q = int(den)
    m = sympy.expand(q * p1 + num) if c > 0 else sympy.expand(q * p1 - num + q - 1)
    if not known_nonnegative(m) or (r != 0 and r.free_symbols & m.free_symbols):
        return expr
    return k * sympy.floor(m / q, evaluate=False) + r
