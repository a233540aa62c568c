"""Is a size expression of the dynamic axes never negative? A proof sympy's assumptions miss.

Sizes computed from a dynamic axis by floor division and remainder (``(4 - S % 4) % 4``, the
padding of S to whole chunks of 4, is ``-S - 4*floor(-S/4)``) are never negative, but sympy
knows nothing of ``floor`` beyond its argument's sign. Writing each ``floor(x)`` as
``x - f`` with ``0 <= f < 1`` makes the expression linear in the ``f``s (when it is a sum of
products, at most one power of each floor), so for any values of the symbols it is
smallest at a corner ``f in {0, 1}``: non-negative at every corner, for every value of the
symbols, means non-negative everywhere (1 is the fractions' supremum, not reached: a bound
that loses only the integrality, so the proof is conservative, never wrong).
"""

from __future__ import annotations

import itertools

_MAX_FLOORS = 6  # 2**6 corners at most; beyond, no proof (the caller stays conservative)


def known_nonnegative(expr) -> bool:
    """True when ``expr`` (an int or sympy expression of nonnegative integer symbols) is >= 0
    for every value of its symbols; False when that is not proven."""
    import sympy

    expr = sympy.sympify(expr)
    if _nonnegative_polynomial(expr):
        return True
    if _at_corners(expr):
        return True
    # the corners lose the floors' integrality (4*floor((S+3)/4) - S, the padding of S to
    # whole chunks of 4, is -1 at a corner): each remainder class of the symbols instead
    from t2n.walk.dim_periodic import residue_classes

    classes = residue_classes(expr)
    return classes is not None and all(_nonnegative_polynomial(v) for _, v in classes)


def _at_corners(expr) -> bool:
    """The corner argument of the module's docstring."""
    import sympy

    expr = expr.rewrite(sympy.floor)  # ceiling(x) = -floor(-x), Mod(a, k) = a - k*floor(a/k)
    floors = sorted(expr.atoms(sympy.floor), key=sympy.default_sort_key)
    if not floors or len(floors) > _MAX_FLOORS or expr.has(sympy.Max, sympy.Min) \
            or any(f.args[0].has(sympy.floor) for f in floors):
        return False  # no floor, or a form the corner argument does not cover
    fracs = [sympy.Dummy(f"f{i}", nonnegative=True) for i in range(len(floors))]
    linear = sympy.expand(expr.xreplace({fl: fl.args[0] - f for fl, f in zip(floors, fracs)}))
    if any(linear.diff(f).has(f) for f in fracs):
        return False  # a floor squared: the extremes need not be at the corners
    for corner in itertools.product((0, 1), repeat=len(fracs)):
        value = sympy.expand(linear.xreplace(dict(zip(fracs, corner))))
        if not _nonnegative_polynomial(value):
            return False
    return True


def _nonnegative_polynomial(expr) -> bool:
    """sympy's answer, else: with every positive symbol ``s`` written ``1 + t`` and every
    other ``t`` (``t >= 0``; t2n's symbols are positive, or nonnegative when their axis may
    be empty), a polynomial whose coefficients are all >= 0 (``3*S - 1``)."""
    import sympy

    if expr.is_nonnegative:
        return True
    syms = sorted(expr.free_symbols, key=sympy.default_sort_key)
    if not syms or not expr.is_polynomial(*syms):
        return False
    if not all(s.is_nonnegative for s in syms):
        return False  # a symbol of unknown sign: no proof
    shifted = sympy.expand(expr.xreplace({s: (1 if s.is_positive else 0) +
                                          sympy.Dummy(nonnegative=True) for s in syms}))
    return all(c.is_nonnegative for c in sympy.Poly(shifted, *shifted.free_symbols).coeffs()) \
        if shifted.free_symbols else bool(shifted >= 0)
