"""Tensor creation: torch eager vs tract. ``_like``/``new_*`` forms take their shape from a
tensor; plain ``zeros/ones/full/arange`` reach the mappings only with symbolic sizes, so
those are exported with a dynamic batch axis and checked at two batch sizes."""

import pytest
import torch
import torch.nn as nn

from t2n.testing import assert_exports


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


LIKE = {
    "zeros_like": lambda x: torch.zeros_like(x),
    "ones_like int dtype": lambda x: torch.ones_like(x, dtype=torch.int32),
    "full_like float": lambda x: torch.full_like(x, -2.5),
    "full_like bool": lambda x: torch.full_like(x, 1, dtype=torch.bool),
    "new_zeros": lambda x: x.new_zeros(2, 3),
    "new_ones int64": lambda x: x.new_ones((4,), dtype=torch.int64),
    "new_full": lambda x: x.new_full((3, 1), 7.0),
    "zeros_like + x": lambda x: torch.zeros_like(x) + x,
}


@pytest.mark.parametrize("name", list(LIKE))
def test_like_forms(name):
    assert_exports(Fn(LIKE[name]), (torch.randn(2, 3, 4),))


def test_like_forms_of_int_tensor():
    m = Fn(lambda i: (torch.zeros_like(i), torch.full_like(i, 3), torch.ones_like(i, dtype=torch.float32),
                      i.new_full((2,), 5)))
    assert_exports(m, (torch.arange(6).reshape(2, 3),))


DYNAMIC = {
    "zeros(B, 3)": lambda x: torch.zeros(x.shape[0], 3),
    "ones(B) int64": lambda x: torch.ones(x.shape[0], dtype=torch.int64),
    "full(B, 2) float": lambda x: torch.full((x.shape[0], 2), 1.5),
    "new_zeros(B, 4)": lambda x: x.new_zeros(x.shape[0], 4) + x[:, :1],
    "arange(B)": lambda x: torch.arange(x.shape[0]),
    "arange(B) float": lambda x: torch.arange(x.shape[0], dtype=torch.float32),
    "arange(1, B, 2)": lambda x: torch.arange(1, x.shape[0], 2),
    "arange(B, 0, -1)": lambda x: torch.arange(x.shape[0], 0, -1),
    "arange(B+1, -2, -3) float": lambda x: torch.arange(x.shape[0] + 1, -2, -3.0),
    "arange(0, B*2, 3) float": lambda x: torch.arange(0, x.shape[0] * 2, 3, dtype=torch.float32),
}


@pytest.mark.parametrize("name", list(DYNAMIC))
def test_creation_with_symbolic_size(name):
    assert_exports(Fn(DYNAMIC[name]), (torch.randn(5, 4),), more_args=[(torch.randn(8, 4),)],
                   dynamic_axes={"input_0": {0: "B"}})


def test_static_creation_is_folded_to_constants():
    m = Fn(lambda x: (x + torch.arange(4), torch.arange(10, 0, -3) + x.sum().int(),
                      torch.arange(0.0, 1.0, 0.25) * x, torch.full((2, 4), 3) * x))
    r = assert_exports(m, (torch.randn(2, 4),))
    assert "tract_core_range" not in r.op_histogram
