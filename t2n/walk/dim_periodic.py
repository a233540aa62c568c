"""Size expressions with floors of the dynamic axes, read one remainder class at a time.

``floor``, ``ceiling`` and ``Mod`` of integer multiples of the symbols (``ceil(S/4)``,
``(4 - S % 4) % 4``) are periodic: writing each symbol ``s = L*k + r`` (``L`` the least
common multiple of the denominators its floors divide it by, ``k`` a nonnegative integer,
``r`` each remainder in ``0 .. L-1``, ``1 .. L`` for a symbol known positive) turns every
floor into a polynomial in ``k`` (``floor(k + r/4) = k + floor(r/4)``). A property of the
polynomials of every class is a property of the expression at every size of the symbols: a
proof, not a sample. The equality (:mod:`t2n.walk.dim_equal`) and sign
(:mod:`t2n.walk.dim_sign`) proofs read these classes.
"""

from __future__ import annotations

import itertools
import math

# remainder classes at most (product over the symbols; each costs a sympy expansion, about
# a millisecond); beyond: no proof
MAX_CLASSES = 512


def in_floors(expr):
    """``expr`` with ``ceiling(x)`` as ``-floor(-x)`` and ``Mod(a, k)`` as
    ``a - k*floor(a/k)``."""
    import sympy

    return expr.replace(
        lambda e: isinstance(e, (sympy.ceiling, sympy.Mod)),
        lambda e: (-sympy.floor(-e.args[0]) if isinstance(e, sympy.ceiling)
                   else e.args[0] - e.args[1] * sympy.floor(e.args[0] / e.args[1])))


def expand_floors(expr):
    """``expr`` with every floor's argument expanded, innermost first, so that sympy splits
    off its integer part (``floor(k + 3/4)`` -> ``k``)."""
    import sympy

    return expr.replace(lambda e: isinstance(e, sympy.floor),
                        lambda e: sympy.floor(sympy.expand(e.args[0])))


def residue_classes(expr):
    """``[(substitution, polynomial)]``: for each remainder class of the symbols, ``{s:
    L*k + r}`` and ``expr`` there, free of floors (``k`` nonnegative integer Dummies); None
    when ``expr`` holds no floor, a form this does not cover (``Max``, ``floor(S*T/4)``)
    or too many classes."""
    import sympy

    expr = in_floors(sympy.sympify(expr))
    if not expr.has(sympy.floor) or expr.has(sympy.Max, sympy.Min):
        return None
    periods = {}
    for s in sorted(expr.free_symbols, key=sympy.default_sort_key):
        p = period(expr, s)
        if p is None:
            return None
        periods[s] = p
    if math.prod(periods.values()) > MAX_CLASSES:
        return None
    ks = {s: sympy.Dummy(f"k_{s}", integer=True, nonnegative=True) for s in periods}
    out = []
    # a positive symbol (an axis of at least 1) from 1 on: remainders 1 .. L
    for rems in itertools.product(*(range(int(bool(s.is_positive)), p + int(bool(s.is_positive)))
                                    for s, p in periods.items())):
        at = {s: p * ks[s] + r for (s, p), r in zip(periods.items(), rems)}
        value = sympy.expand(expand_floors(expr.xreplace(at)))
        if value.has(sympy.floor):
            return None
        out.append((at, value))
    return out


def period(expr, s):
    """The period in ``s`` of every floor in ``expr`` (each floor's argument a sum of
    rational multiples of ``s``, of other symbols and of inner floors), or None when a
    floor's argument has another form (``floor(S*T/4)``, ``floor(sqrt(S))``)."""
    import sympy

    floors = expr.atoms(sympy.floor)
    out = 1
    for fl in floors:
        if any(f != fl and f.args[0].has(fl) for f in floors):
            continue  # an inner floor: its outer one reads it
        p = _floor_period(fl, s)
        if p is None:
            return None
        out = math.lcm(out, p)
    return out


def _floor_period(fl, s):
    """The period in ``s`` of ``floor(arg)``: ``arg``'s coefficients' denominators, times
    the period of each inner floor for its coefficient."""
    import sympy

    out = 1
    for term in sympy.Add.make_args(sympy.expand(fl.args[0])):
        coeff, rest = term.as_coeff_Mul()
        if not coeff.is_Rational:
            return None
        if rest == 1 or not rest.has(s):
            continue
        if rest == s:
            out = math.lcm(out, int(coeff.q))
        elif isinstance(rest, sympy.floor):
            inner = _floor_period(rest, s)
            if inner is None:
                return None
            out = math.lcm(out, int(coeff.q) * inner)
        else:
            return None  # s squared, s times another symbol, s inside another function
    return out
