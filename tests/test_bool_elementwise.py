"""Bool max/min/mul (maximum, clamp, fmax, outer, addr, ``prod(dtype=torch.bool)``, ...):
tract's Max/Min/Mul kernels and its product reduction take numbers only, so the builder emits
or/and for bools; results are exact."""

import pytest
import torch

from t2n.testing import assert_exports

A = torch.tensor([[True, False, True], [False, False, True]])
B = torch.tensor([True, True, False])

CASES = {
    "maximum": lambda a, b: torch.maximum(a, b),
    "minimum": lambda a, b: torch.minimum(a, b),
    "fmax": lambda a, b: torch.fmax(a, b),
    "fmin": lambda a, b: torch.fmin(a, b),
    "mul": lambda a, b: a * b,
    "clamp_min": lambda a, b: torch.clamp_min(a, b),
    "clamp_max": lambda a, b: torch.clamp_max(a, b),
    "outer": lambda a, b: torch.outer(a[0], b),
    "addr": lambda a, b: torch.addr(a[:, :1].expand(2, 2).contiguous(), a[0, :2], b[:2]),
    "prod bool": lambda a, b: (a.prod(1, dtype=torch.bool), (a * 3).prod(0, keepdim=True,
                                                                        dtype=torch.bool)),
}


class _Binary(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, a, b):
        return self.fn(a, b)


@pytest.mark.parametrize("op", list(CASES))
def test_bool_max_min_mul_are_exact(op):
    assert_exports(_Binary(CASES[op]), (A, B))
