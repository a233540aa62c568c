"""Float ``fmod``/``remainder``, floor and trunc division and integer ``linspace`` give
PyTorch's exact results, where tract's division (a multiplication by the reciprocal, one
ulp off on half the quotients) puts an exact multiple just below its integer quotient:
``fmod(7 * 0.3, 0.3)`` would be ``0.3`` instead of ``0`` and ``trunc(7 * 0.3 / 0.3)`` 6.
The operands mix exact multiples, huge quotients (up to 1e30 / 3), zeros, infinities and
NaN, in every float dtype; results must match bit for bit.
"""

from __future__ import annotations

import pytest
import torch

from t2n.testing import FunctionModule, assert_exports


def _operands(dtype):
    torch.manual_seed(0)
    n = 600
    b = torch.randint(1, 100, (n,)).double() * 0.1 * (torch.randint(0, 2, (n,)) * 2 - 1)
    a = b * torch.randint(-50, 50, (n,)).double()  # exact multiples (as rounded)
    a[:150] = torch.randn(150).double() * 100
    a[150:200] *= 1e7
    special = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 3.0, -3.0,
                            5.5, 1e30, -2.5])
    a = torch.cat([a, special.repeat_interleave(10)])
    b = torch.cat([b, special.repeat(10)])
    return a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
def test_float_remainders_and_rounded_quotients_are_exact(dtype):
    a, b = _operands(dtype)
    assert_exports(FunctionModule(lambda a, b: (
        torch.fmod(a, b), torch.remainder(a, b), torch.floor_divide(a, b),
        torch.div(a, b, rounding_mode="floor"), torch.div(a, b, rounding_mode="trunc"),
        torch.fmod(a, 0.3), torch.remainder(2.0, b))), (a, b), rtol=0, atol=0)


def test_integer_linspace_with_whole_steps():
    """(1 - 50) / 49 must be -1 exactly: 50, 49, ..., 1 (tract's quotient truncated some
    values to one less)."""
    assert_exports(FunctionModule(lambda s, e: (
        torch.linspace(s, e, 50, dtype=torch.int64), torch.linspace(e, s, 50, dtype=torch.int64),
        torch.linspace(s, e * 7, 99, dtype=torch.int32))), (torch.tensor(50), torch.tensor(1)))
