"""Symbolic sizes as tract reads them (t2n.write.nnef_text.dim_expr_text): each expression,
written into a graph and evaluated by tract at many sizes, equals sympy's value.

tract's division truncates toward zero, so ``floor(n/k)`` is written as a plain division only
when ``n`` is proven non-negative; a numerator whose sign changes with the size (``2 - S``,
``S - 3``) must still give the floor."""

import numpy as np
import pytest
import sympy

from t2n.check.tract_runner import run_sets_in_tract
from t2n.write.nnef_text import dim_expr_text

S = sympy.Symbol("S", integer=True, positive=True)
SIZES = list(range(1, 14))

# each non-negative at every size (a size), with a floor or ceiling whose numerator changes
# sign, or is negative, over SIZES
CASES = [
    2 * S + sympy.floor((2 - S) / sympy.Integer(3)) + 1,
    S + sympy.floor((S - 3) / sympy.Integer(2)) + 2,
    S - sympy.ceiling((S - 5) / sympy.Integer(4)) + 2,
    3 * S + 4 * sympy.floor((1 - S) / sympy.Integer(2)) + 3,
    S + sympy.floor(-S / sympy.Integer(4)) + 1,
    sympy.floor((S + 1) / sympy.Integer(2)),
]


def test_the_cases_change_sign_inside_the_floor():
    """Guards the check below: every case has a floor whose numerator is negative at some
    size and non-negative at another (or always negative), and every value is a size."""
    for ex in CASES:
        assert all(int(ex.subs(S, v)) >= 0 for v in SIZES), ex
    assert sum(1 for ex in CASES for f in ex.atoms(sympy.floor, sympy.ceiling)
               if min(f.args[0].subs(S, v) for v in SIZES) < 0) >= 5


def test_floors_of_either_sign_evaluate_as_sympy(tmp_path):
    texts = [dim_expr_text(ex) for ex in CASES]
    outs = ", ".join(f"y{i}" for i in range(len(texts)))
    body = "\n".join(f"  y{i} = tract_core_cast({t}, to = 'i64');" for i, t in enumerate(texts))
    (tmp_path / "graph.nnef").write_text(
        "version 1.0;\nextension tract_registry tract_core;\nextension tract_symbol S;\n"
        f"extension tract_assert S >= 1;\ngraph network(x) -> ({outs})\n{{\n"
        f"  x = external<scalar>(shape = [S]);\n{body}\n}}\n")
    results = run_sets_in_tract(str(tmp_path), [[np.zeros(v, np.float32)] for v in SIZES])
    wrong = [f"{ex} at S={v}: tract {int(np.asarray(r[i]))}, sympy {int(ex.subs(S, v))} "
             f"(written {texts[i]})"
             for v, r in zip(SIZES, results) for i, ex in enumerate(CASES)
             if int(np.asarray(r[i])) != int(ex.subs(S, v))]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("ex", [sympy.floor((S + 1) / sympy.Integer(2)),
                                sympy.floor((2 * S - 1) / sympy.Integer(3))])
def test_a_nonnegative_numerator_stays_one_division(ex):
    """Proven non-negative numerators keep tract's plain division (archives unchanged)."""
    assert "max(" not in dim_expr_text(ex)
