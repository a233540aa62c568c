"""scatter, scatter_add, scatter_reduce: torch eager vs tract, every mode, with duplicates."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

from t2n.testing import assert_exports
from t2n.testing import FunctionModule as Fn


# index with duplicates in every column (rows 0 and 3 hit twice, row 2 never)
IDX = torch.tensor([[0, 1, 0, 3, 3], [3, 1, 0, 1, 0], [0, 3, 3, 0, 1]])


def _src(dtype, shape=(4, 6)):
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.randint(-9, 10, shape).to(dtype)


SCATTER_CASES = {
    "src": (lambda x, i, s: x.scatter(0, i, s), (torch.randn(4, 5), IDX[:, :4] % 4,
                                                    torch.randn(3, 4))),
    "src_larger_than_index": (lambda x, i, s: x.scatter(1, i, s),
                              (torch.randn(3, 6), torch.tensor([[5, 0], [2, 1]]),
                               torch.randn(4, 7))),
    "value": (lambda x, i: x.scatter(1, i, -2.5), (torch.randn(3, 5), torch.tensor([[4], [0]]))),
    "value_int_tensor": (lambda x, i: x.scatter(0, i, 7), (torch.randint(0, 5, (4, 3)),
                                                           torch.tensor([[3, 0, 1]]))),
    "negative_dim": (lambda x, i, s: x.scatter(-1, i, s),
                     (torch.randn(2, 3, 4), torch.tensor([[[3, 0]], [[1, 2]]]),
                      torch.randn(2, 1, 2))),
    "rank1": (lambda x, i, s: x.scatter(0, i, s), (torch.randn(6), torch.tensor([5, 0, 2]),
                                                   torch.randn(3))),
    "rank0": (lambda x, i, s: x.scatter(0, i, s), (torch.tensor(1.5), torch.tensor(0),
                                                   torch.tensor(-3.0))),
    "empty_index": (lambda x, i, s: x.scatter(1, i, s), (torch.randn(3, 4),
                                                         torch.zeros(3, 0, dtype=torch.long),
                                                         torch.randn(3, 2))),
    "int32_index": (lambda x, i, s: x.scatter(0, i.long(), s),
                    (torch.randn(4, 2), torch.tensor([[1, 0]], dtype=torch.int32),
                     torch.randn(1, 2))),
    "bool_tensor": (lambda x, i, s: x.scatter(0, i, s), (torch.zeros(5, dtype=torch.bool),
                                                         torch.tensor([1, 4]),
                                                         torch.tensor([True, True]))),
    "legacy_reduce_add": (lambda x, i, s: x.scatter(0, i, s, reduce="add"),
                          (torch.randn(4, 5), IDX, torch.randn(3, 5))),
    "legacy_reduce_multiply": (lambda x, i, s: x.scatter(0, i, s, reduce="multiply"),
                               (torch.randn(4, 5), IDX, torch.randn(3, 5))),
    "scatter_add": (lambda x, i, s: x.scatter_add(0, i, s), (torch.randn(4, 5), IDX,
                                                             torch.randn(3, 5))),
    "scatter_add_src_larger": (lambda x, i, s: x.scatter_add(1, i, s),
                               (torch.randn(4, 5), IDX[:2, :3] % 5, torch.randn(4, 6))),
    "scatter_add_int": (lambda x, i, s: x.scatter_add(0, i, s),
                        (torch.randint(-5, 5, (4, 5)), IDX, torch.randint(-5, 5, (3, 5)))),
    "scatter_add_inplace": (lambda x, i, s: x.clone().scatter_add_(0, i, s),
                            (torch.randn(4, 5), IDX, torch.randn(3, 5))),
}


@pytest.mark.parametrize("case", list(SCATTER_CASES), ids=lambda c: f"scatter-{c}")
def test_scatter(case):
    fn, args = SCATTER_CASES[case]
    assert_exports(Fn(fn), args)


@pytest.mark.parametrize("include_self", [True, False], ids=["include_self", "exclude_self"])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=["f32", "i64"])
def test_scatter_reduce_modes_with_duplicates(reduce, include_self, dtype):
    x = _src(dtype, (4, 5))
    src = _src(dtype, (4, 6))  # larger than the index: only its corner is used
    fn = lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self)  # noqa
    assert_exports(Fn(fn), (x, IDX, src))


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax"])
def test_scatter_reduce_inner_dim_and_3d(reduce):
    x = torch.randn(2, 3, 4)
    idx = torch.tensor([[[0, 0, 3], [1, 1, 1]], [[2, 3, 2], [0, 0, 0]]])
    fn = lambda x, i, s: x.scatter_reduce(-1, i, s, reduce, include_self=False)  # noqa
    assert_exports(Fn(fn), (x, idx, torch.randn(2, 2, 3)))


def test_scatter_reduce_mean_int_floors_negative_sums():
    """torch floors an integer mean: (-7 + 2 - 1 + 1) / 4 = -1.25 -> -2."""
    x = torch.tensor([5, 7, -7, 3])
    idx = torch.tensor([0, 0, 2, 2, 2])
    src = torch.tensor([2, 2, 2, -1, 1])
    for inc in (True, False):
        fn = lambda x, i, s, inc=inc: x.scatter_reduce(0, i, s, "mean", include_self=inc)  # noqa
        assert_exports(Fn(fn), (x, idx, src))


def test_scatter_reduce_f16_and_int32():
    fn = lambda x, i, s: x.scatter_reduce(0, i, s, "mean", include_self=False)  # noqa
    assert_exports(Fn(fn), (torch.randn(4, 5).half(), IDX, torch.randn(3, 5).half()),
                   rtol=1e-2, atol=1e-2)
    fn = lambda x, i, s: x.scatter_reduce(0, i, s, "amin", include_self=False)  # noqa
    assert_exports(Fn(fn), (torch.randint(-9, 9, (4, 5), dtype=torch.int32), IDX,
                            torch.randint(-9, 9, (3, 5), dtype=torch.int32)))


@settings(max_examples=10, deadline=None, derandomize=True)
@given(data=st.data(),
       reduce=st.sampled_from(["sum", "prod", "mean", "amax", "amin"]),
       include_self=st.booleans())
def test_scatter_reduce_property(data, reduce, include_self):
    rank = data.draw(st.integers(1, 3), label="rank")
    shape = data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank), label="shape")
    dim = data.draw(st.integers(-rank, rank - 1), label="dim")
    axis = dim % rank
    ishape = [data.draw(st.integers(0 if k == axis else 1, 5 if k == axis else shape[k]))
              for k in range(rank)]
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2 ** 16), label="seed"))
    index = torch.randint(0, shape[axis], ishape, generator=g)
    x = torch.randn(shape, generator=g)
    src = torch.randn([d + 1 for d in ishape], generator=g)
    fn = lambda x, i, s: x.scatter_reduce(dim, i, s, reduce, include_self=include_self)  # noqa
    assert_exports(Fn(fn), (x, index, src))


@pytest.mark.parametrize("op", ["scatter", "scatter_add", "scatter_reduce_mean_exclude"])
def test_op_count_does_not_grow_with_the_number_of_indices(op):
    fns = {"scatter": lambda x, i, s: x.scatter(0, i, s),
           "scatter_add": lambda x, i, s: x.scatter_add(0, i, s),
           "scatter_reduce_mean_exclude":
               lambda x, i, s: x.scatter_reduce(0, i, s, "mean", include_self=False)}
    counts = []
    for n in (3, 300):
        idx = torch.randint(0, 10, (n, 4))
        r = assert_exports(Fn(fns[op]), (torch.randn(10, 4), idx, torch.randn(n, 4)))
        counts.append(r.op_count)
    assert counts[0] == counts[1], counts


def test_overwrite_with_duplicates_keeps_the_last_write():
    """PyTorch leaves it undefined; t2n (tract) keeps the last write in index order, which is
    what PyTorch's CPU kernel does too."""
    fn = lambda x, i, s: x.scatter(0, i, s)  # noqa
    assert_exports(Fn(fn), (torch.zeros(3), torch.tensor([1, 1, 1, 2]),
                            torch.tensor([1.0, 2.0, 3.0, 4.0])))


@pytest.mark.parametrize("include_self", [True, False], ids=["include_self", "exclude_self"])
@pytest.mark.parametrize("reduce", ["amax", "amin", "sum", "mean"])
def test_scatter_reduce_nan_propagates(reduce, include_self):
    nan = float("nan")
    x = torch.tensor([nan, 9.0, 9.0, 9.0, 1.0])
    idx = torch.tensor([1, 1, 3, 0, 2])
    src = torch.tensor([nan, 6.0, nan, 2.0, -1.0])
    fn = lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self)  # noqa
    assert_exports(Fn(fn), (x, idx, src))


@pytest.mark.parametrize("reduce", ["mean", "amax"])
def test_scatter_reduce_dynamic_number_of_updates(reduce):
    fn = lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=False)  # noqa
    assert_exports(Fn(fn), (torch.randn(5, 3), torch.tensor([[0, 4, 4], [0, 0, 1]]),
                            torch.randn(2, 3)),
                   dynamic_axes={"input_1": {0: "N"}, "input_2": {0: "N"}},
                   more_args=[(torch.randn(5, 3), torch.randint(0, 5, (7, 3)),
                               torch.randn(7, 3))])
