"""Axes that may be empty: a symbol declared ``("P", 0, ...)`` is nonnegative, not positive.

t2n proves facts about sizes before writing them (a slice bound below the length, a floor
division of a nonnegative numerator). With every symbol positive, ``P - 1 >= 0`` was
"proven" and ``x[:, 1:]`` written as the slice ``1..P``, which tract cannot run at P = 0
(PyTorch returns an empty tensor). These exports run in tract at P = 0, 1 and more.
"""

import pytest
import sympy
import torch

from t2n.testing import FunctionModule as Fn, assert_exports
from t2n.walk.dim_sign import known_nonnegative
from t2n.walk.dynamic import symbol

pytestmark = pytest.mark.usefixtures("capture")

CASES = {
    "drop_first": lambda x: x[:, 1:] * 2,
    "drop_last": lambda x: x[:, : x.shape[1] - 1] + 1,
    "window": lambda x: torch.cat([x[:, 1:], x[:, :1] * 3], 1),  # a sliding cache
}


@pytest.mark.parametrize("case", CASES)
def test_an_empty_cache_runs_in_tract(case):
    assert_exports(Fn(CASES[case]), (torch.randn(2, 5, 4),), input_names=["x"],
                   dynamic_axes={"x": {1: ("P", 0, 512)}},
                   more_args=[(torch.randn(2, 0, 4),), (torch.randn(2, 1, 4),),
                              (torch.randn(2, 9, 4),)])


def test_symbols_of_least_size_zero_prove_less():
    p, s = symbol("P", 0), symbol("S")
    assert not known_nonnegative(p - 1) and known_nonnegative(s - 1)
    assert known_nonnegative(p) and known_nonnegative(2 * p + s - 1)
    assert not known_nonnegative(p + s - 2)
    # a floor of a nonnegative numerator is proven for either kind
    assert known_nonnegative(-p - 4 * sympy.floor(-p / 4))
