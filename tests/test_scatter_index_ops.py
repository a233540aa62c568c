"""index_add, index_copy, index_fill: slab writes along any dim, runtime indices."""

import pytest
import torch

from t2n.testing import assert_exports
from t2n.testing import FunctionModule as Fn


X = torch.randn(4, 5, 3)

CASES = {
    "index_add_dim0_duplicates": (lambda x, i, s: x.index_add(0, i, s),
                                  (X, torch.tensor([3, 0, 3, 3]), torch.randn(4, 5, 3))),
    "index_add_dim1_alpha": (lambda x, i, s: x.index_add(1, i, s, alpha=-2.5),
                             (X, torch.tensor([4, 0, 4]), torch.randn(4, 3, 3))),
    "index_add_negative_dim": (lambda x, i, s: x.index_add(-1, i, s),
                               (X, torch.tensor([2, 2, 0, 1, 2]), torch.randn(4, 5, 5))),
    "index_add_int_alpha": (lambda x, i, s: x.index_add(0, i, s, alpha=3),
                            (torch.randint(-5, 5, (3, 2)), torch.tensor([1, 1]),
                             torch.randint(-5, 5, (2, 2)))),
    "index_add_rank1": (lambda x, i, s: x.index_add(0, i, s),
                        (torch.randn(6), torch.tensor([5, 5, 0]), torch.randn(3))),
    "index_add_0d_index": (lambda x, i, s: x.index_add(0, i, s),
                           (torch.randn(3, 2), torch.tensor([2]), torch.randn(1, 2))),
    "index_add_int32_index": (lambda x, i, s: x.index_add(1, i, s),
                              (torch.randn(2, 4), torch.tensor([3, 3], dtype=torch.int32),
                               torch.randn(2, 2))),
    "index_add_empty_index": (lambda x, i, s: x.index_add(0, i, s),
                              (torch.randn(3, 2), torch.zeros(0, dtype=torch.long),
                               torch.randn(0, 2))),
    "index_add_inplace": (lambda x, i, s: x.clone().index_add_(1, i, s),
                          (X, torch.tensor([1, 1]), torch.randn(4, 2, 3))),
    "index_copy_dim0": (lambda x, i, s: x.index_copy(0, i, s),
                        (X, torch.tensor([3, 1]), torch.randn(2, 5, 3))),
    "index_copy_dim2": (lambda x, i, s: x.index_copy(2, i, s),
                        (X, torch.tensor([2, 0]), torch.randn(4, 5, 2))),
    "index_copy_int": (lambda x, i, s: x.index_copy(-1, i, s),
                       (torch.randint(0, 9, (3, 4)), torch.tensor([0, 3]),
                        torch.randint(0, 9, (3, 2)))),
    "index_fill_negative_index": (lambda x, i: x.index_fill(1, i, -1.5),
                                  (X, torch.tensor([-1, 1, -5]))),
    "index_fill_dim_last": (lambda x, i: x.index_fill(-1, i, 2.0), (X, torch.tensor([0, 0]))),
    "index_fill_int_keeps_dtype": (lambda x, i: x.index_fill(0, i, 2.7),
                                   (torch.randint(0, 9, (3, 2), dtype=torch.int32),
                                    torch.tensor([1]))),
    "index_fill_0d_tensor_value": (lambda x, i, v: x.index_fill(1, i, v),
                                   (X, torch.tensor([3, -2]), torch.tensor(-4.25))),
    "index_fill_0d_tensor_value_int_self": (lambda x, i, v: x.index_fill(0, i, v),
                                            (torch.randint(0, 9, (3, 4)), torch.tensor([2]),
                                             torch.tensor(-7))),
    "index_fill_bool": (lambda x, i: x.index_fill(0, i, 1),
                        (torch.zeros(4, 2, dtype=torch.bool), torch.tensor([1, 3]))),
    "index_fill_const_index": (lambda x: x.index_fill(1, torch.tensor([-1, 0]), 9.0), (X,)),
    "index_fill_inplace": (lambda x, i: x.clone().index_fill_(2, i, 0.0),
                           (X, torch.tensor([-3]))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_slab_writes(case):
    fn, args = CASES[case]
    assert_exports(Fn(fn), args)


def test_index_fill_dynamic_axis_negative_index():
    fn = lambda x, i: x.index_fill(0, i, 5.0)  # noqa
    assert_exports(Fn(fn), (torch.randn(4, 3), torch.tensor([-1, 0])),
                   dynamic_axes={"input_0": {0: "N"}},
                   more_args=[(torch.randn(7, 3), torch.tensor([-1, -7]))])


def _count_case(op, n):
    """A model of ``op`` with ``n`` runtime indices (distinct for index_copy, whose result
    with duplicates is undefined)."""
    if op == "index_add":
        return (lambda x, i, s: x.index_add(0, i, s),
                (torch.randn(10, 4), torch.randint(0, 10, (n,)), torch.randn(n, 4)))
    if op == "index_copy":
        return (lambda x, i, s: x.index_copy(0, i, s),
                (torch.randn(400, 4), torch.randperm(400)[:n], torch.randn(n, 4)))
    return (lambda x, i: x.index_fill(0, i, 1.0),
            (torch.randn(10, 4), torch.randint(-10, 10, (n,))))


@pytest.mark.parametrize("op", ["index_add", "index_copy", "index_fill"])
def test_op_count_does_not_grow_with_the_number_of_indices(op):
    counts = []
    for n in (3, 300):
        fn, args = _count_case(op, n)
        counts.append(assert_exports(Fn(fn), args).op_count)
    assert counts[0] == counts[1], counts
