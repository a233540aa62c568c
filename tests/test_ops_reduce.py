"""Reductions: torch eager vs tract (dims lists, negative dims, keepdim, dtype, all-dims,
ties for argmax/argmin, values+indices of max/min along a dim)."""

import torch

from opcases import assert_cases


FLOAT = {
    "sum all": lambda x: x.sum(),
    "sum dim=1": lambda x: x.sum(1),
    "sum dims=(0,-1) keepdim": lambda x: x.sum((0, -1), keepdim=True),
    "sum dtype=f64": lambda x: x.sum(dtype=torch.float64),
    "sum dim dtype=f64": lambda x: torch.sum(x, -2, dtype=torch.float64),
    "mean all": lambda x: x.mean(),
    "mean dims list": lambda x: x.mean([1, 2]),
    "mean keepdim neg": lambda x: x.mean(-1, keepdim=True),
    "mean dtype f64": lambda x: x.mean((0, 2), dtype=torch.float64),
    "prod dim": lambda x: x.prod(1),
    "prod all": lambda x: (x * 0.5 + 1).prod(),
    "amax all": lambda x: x.amax(),
    "amax dims keepdim": lambda x: x.amax((0, 2), keepdim=True),
    "amin dim=-1": lambda x: x.amin(-1),
    "max all": lambda x: x.max(),
    "min all": lambda x: x.min(),
    "max dim values+indices": lambda x: x.max(1),
    "min dim=-1 keepdim": lambda x: torch.min(x, -1, keepdim=True),
    "argmax all": lambda x: x.argmax(),
    "argmax all keepdim": lambda x: torch.argmax(x, keepdim=True),
    "argmax dim=1": lambda x: x.argmax(1),
    "argmin dim=-1 keepdim": lambda x: x.argmin(-1, keepdim=True),
    "argmin all": lambda x: x.argmin(),
}


def test_reduce_float():
    assert_cases(FLOAT, (torch.randn(3, 4, 5),))


def test_argmax_argmin_ties_take_first_occurrence():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [0.0, -1.0, 5.0, -1.0]])
    assert_cases({
        "argmax/argmin dims": lambda x: (x.argmax(1), x.argmin(1), x.argmax(0), x.argmin(0)),
        "argmax/argmin all": lambda x: (x.argmax(), x.argmin()),
        "max/min indices": lambda x: (x.max(1)[1], x.min(0)[1]),
    }, (x,))


INT = {
    "sum int64": lambda x: x.sum(1),
    "sum int32 -> int64": lambda x: x.int().sum(),
    "sum bool -> int64": lambda x: (x > 0).sum(-1),
    "sum int dtype=f32": lambda x: x.sum(0, dtype=torch.float32),
    "mean int dtype=f32": lambda x: x.mean(1, dtype=torch.float32),
    "amax int": lambda x: x.amax(1),
    "amin int keepdim": lambda x: x.amin(0, keepdim=True),
    "max int dim": lambda x: x.max(1),
    "argmax int": lambda x: x.argmax(-1),
    "max bool dim": lambda x: (x > 0).max(1),
    "min bool dim keepdim": lambda x: (x > 2).min(0, keepdim=True),
    "amax bool": lambda x: (x > 0).amax(1),
    "amin bool": lambda x: (x > 0).amin(1),
    "all/any": lambda x: ((x > 0).all(1), (x > 0).any(), (x > -5).all()),
    "prod int": lambda x: (x.abs() + 1).prod(1),
}


def test_reduce_int_and_bool():
    x = torch.tensor([[3, -1, 4, 1, -5], [9, 2, -6, 5, 3], [5, 8, 9, 7, -9]])
    assert_cases(INT, (x,))


def test_reduce_rank0_and_size1():
    assert_cases({
        "rank 0 sum/mean": lambda x: (x.sum(), x.sum(0), x.mean(-1)),
        "rank 0 argmax": lambda x: (x.argmax(), x.argmax(0, keepdim=True)),
        "rank 0 amax/max": lambda x: (x.amax(), x.max()),
    }, (torch.tensor(2.5),))
    assert_cases({
        "size-1 axis": lambda x: (x.sum(0), x.argmax(0), x.max(0)),
    }, (torch.randn(1, 3),))
