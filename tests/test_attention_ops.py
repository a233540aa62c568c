"""Differential tests: tril/triu, cumsum, rms_norm, topk, sort/argsort (static and with a
dynamic axis run at other sizes)."""

import pytest
import torch
import torch.nn.functional as F

from test_attention import check, r


# ------------------------------------------------------------------ tril / triu
TRILU = {
    "tril": (torch.tril, 0), "triu": (torch.triu, 0), "tril_k1": (torch.tril, 1),
    "triu_kneg2": (torch.triu, -2), "tril_kbig": (torch.tril, 9), "triu_kneg_big": (torch.triu, -9),
}


@pytest.mark.parametrize("fn,k", TRILU.values(), ids=TRILU.keys())
def test_trilu_static(fn, k):
    check(lambda x: fn(x, k), [r(2, 3, 5)])


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.float64], ids=str)
def test_trilu_dtypes(dtype):
    x = torch.randint(-3, 3, (4, 4)).to(dtype)
    check(lambda x: torch.triu(x, 1), [x])


def test_trilu_dynamic():
    check(lambda x: torch.tril(x, -1) + torch.triu(x, 2), [r(2, 8, 8)],
          {0: {0: "B", 1: "S", 2: "S"}}, more=[(r(3, 13, 13),), (r(1, 1, 1),)])


def test_causal_mask_from_tril_dynamic():
    """The usual causal mask: tril of a ones matrix of the sequence length, masked_fill."""
    def f(x):
        s = x.shape[-1]
        keep = torch.tril(torch.ones(s, s, dtype=torch.bool))
        return torch.softmax(x.masked_fill(~keep, float("-inf")), -1)

    check(f, [r(2, 8, 8)], {0: {0: "B", 1: "S", 2: "S"}}, more=[(r(1, 13, 13),)])


# ------------------------------------------------------------------ cumsum
CUMSUM = {
    "f32_last": (torch.float32, -1, None), "f32_first": (torch.float32, 0, None),
    "i64": (torch.int64, 1, None), "i32_promotes": (torch.int32, 1, None),
    "bool_promotes": (torch.bool, 1, None), "f32_to_f64": (torch.float32, 1, torch.float64),
}


@pytest.mark.parametrize("dtype,dim,out", CUMSUM.values(), ids=CUMSUM.keys())
def test_cumsum(dtype, dim, out):
    x = (torch.randn(3, 5) * 4).to(dtype)
    check(lambda x: torch.cumsum(x, dim, dtype=out), [x])


def test_cumsum_scalar_and_dynamic():
    check(lambda x: torch.cumsum(x, 0), [torch.tensor(2.5)])
    check(lambda x: torch.cumsum(x, 1) / x.shape[1], [r(2, 8)], {0: {0: "B", 1: "S"}},
          more=[(r(3, 13),)])


# ------------------------------------------------------------------ rms_norm
RMS = {
    "weight": (lambda x, w: F.rms_norm(x, (8,), w), True),
    "no_weight": (lambda x, w: F.rms_norm(x, (8,)), False),
    "eps": (lambda x, w: F.rms_norm(x, (8,), w, eps=1e-2), True),
    "two_axes": (lambda x, w: F.rms_norm(x, (5, 8)), False),
}


@pytest.mark.parametrize("fn,use_w", RMS.values(), ids=RMS.keys())
def test_rms_norm(fn, use_w):
    check(fn, [r(2, 5, 8), r(8)])


def test_rms_norm_module_dynamic():
    m = torch.nn.RMSNorm(8).requires_grad_(False)
    with torch.no_grad():
        m.weight.normal_()
    check(lambda x: m(x), [r(2, 5, 8)], {0: {0: "B", 1: "S"}}, more=[(r(3, 11, 8),)])


def test_rms_norm_f64():
    check(lambda x: F.rms_norm(x, (8,)), [r(2, 8, dtype=torch.float64)])


# ------------------------------------------------------------------ topk / sort / argsort
def distinct(*shape, dtype=torch.float32):
    return torch.randperm(int(torch.tensor(shape).prod())).reshape(shape).to(dtype)


TOPK = {
    "largest": dict(k=3), "smallest": dict(k=2, largest=False), "dim0": dict(k=2, dim=0),
    "neg_dim": dict(k=1, dim=-2), "k0": dict(k=0),
}


@pytest.mark.parametrize("kw", TOPK.values(), ids=TOPK.keys())
def test_topk(kw):
    check(lambda x: torch.topk(x, **kw), [distinct(4, 6)])


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float64], ids=str)
def test_topk_dtypes(dtype):
    check(lambda x: torch.topk(x, 2), [distinct(3, 5, dtype=dtype)])


def test_topk_dynamic():
    check(lambda x: torch.topk(x, 2, dim=1), [distinct(2, 8)], {0: {0: "B", 1: "S"}},
          more=[(distinct(3, 13),)])


SORT = {
    "asc": lambda x: torch.sort(x), "desc": lambda x: torch.sort(x, descending=True),
    "dim0": lambda x: torch.sort(x, dim=0),
    "stable": lambda x: torch.sort(x, stable=True, dim=1),
    "argsort": lambda x: torch.argsort(x, dim=-1, descending=True),
    "argsort_stable": lambda x: torch.argsort(x, stable=True),
}


@pytest.mark.parametrize("fn", SORT.values(), ids=SORT.keys())
def test_sort(fn):
    check(fn, [distinct(4, 6)])


@pytest.mark.parametrize("desc", [False, True], ids=["asc", "desc"])
def test_sort_stable_ties(desc):
    x = torch.tensor([[3., 1., 3., 2., 1., 3.], [0., 0., 0., 1., 1., 0.]])
    check(lambda x: torch.sort(x, stable=True, descending=desc), [x])


def test_sort_dynamic():
    check(lambda x: (torch.sort(x, dim=1, descending=True), torch.argsort(x, dim=1)),
          [distinct(2, 8)],
          {0: {0: "B", 1: "S"}}, more=[(distinct(3, 13),), (distinct(1, 1),)])
