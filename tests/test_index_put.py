"""index_put / index_put_ (``y[indices] = values``): any number of index tensors, None
entries, broadcasting, negative indices, accumulate, bool masks."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

from t2n.errors import T2NError
from t2n.testing import assert_exports
from t2n.testing import FunctionModule as Fn


def put(*index, accumulate=False):
    """``y = x.clone(); y[key] = v``, or ``index_put_(y, key, v, accumulate=True)``; ``index``
    spells the key: "t" takes the next tensor argument, ":" is a full slice (None)."""
    def fn(x, *rest):
        *tensors, v = rest
        it = iter(tensors)
        key = tuple(next(it) if k == "t" else slice(None) if k == ":" else k for k in index)
        y = x.clone()
        if accumulate:
            torch.ops.aten.index_put_(y, [None if isinstance(k, slice) else k for k in key],
                                      v, True)
        else:
            y[key] = v
        return y
    return fn


X = torch.randn(4, 5, 3)
L = torch.tensor

CASES = {
    "one_index": (put("t"), (X, L([3, 0]), torch.randn(2, 5, 3))),
    "one_index_negative": (put("t"), (X, L([-1, -4]), torch.randn(2, 5, 3))),
    "scalar_value": (put("t"), (X, L([1]), torch.tensor(2.5))),
    "row_value_broadcast": (put("t"), (X, L([0, 2]), torch.randn(3))),
    "two_indices": (put("t", "t"), (X, L([0, 3, -1]), L([4, -5, 2]), torch.randn(3, 3))),
    "two_indices_broadcast": (put("t", "t"), (X, L([[0], [2]]), L([1, 3, -1]),
                                              torch.randn(2, 3, 3))),
    "three_indices": (put("t", "t", "t"), (X, L([0, 1]), L([4, 4]), L([2, -3]),
                                           torch.randn(2))),
    "none_then_index": (put(":", "t"), (X, L([4, 0]), torch.randn(4, 2, 3))),
    "none_then_two": (put(":", "t", "t"), (X, L([4, 0]), L([2, 1]), torch.randn(4, 2))),
    "non_adjacent": (put("t", ":", "t"), (X, L([3, 0, 1]), L([2, 0, -1]),
                                         torch.randn(3, 5))),
    "non_adjacent_broadcast_value": (put("t", ":", "t"), (X, L([3, 0]), L([2, 0]),
                                                         torch.randn(5))),
    "index_0d": (lambda x, i, v: torch.index_put(x, (i,), v), (X, L(-2), torch.randn(5, 3))),
    "put_index_0d": (lambda x, i, v: (torch.put(x, i, v), torch.put(x, i, v, accumulate=True)),
                     (X, L(7), torch.randn(1))),
    "index_int32": (put(":", "t"), (X, L([1, 3], dtype=torch.int32), torch.randn(4, 2, 3))),
    "empty_index": (put("t"), (X, torch.zeros(0, dtype=torch.long), torch.randn(0, 5, 3))),
    "int_tensor": (put("t", "t"), (torch.randint(0, 9, (3, 4)), L([2, 0]), L([1, 3]),
                                   L([-7, 8]))),
    "accumulate_duplicates": (put("t", accumulate=True), (X, L([1, 1, 3, 1]),
                                                          torch.randn(4, 5, 3))),
    "accumulate_two_indices_duplicates": (put("t", "t", accumulate=True),
                                          (X, L([0, 0, 2]), L([1, 1, -1]), torch.randn(3))),
    "accumulate_int": (put("t", accumulate=True), (torch.randint(0, 9, (3, 4)), L([2, 2]),
                                                   torch.randint(0, 9, (2, 4)))),
    "runtime_mask_scalar": (put("t"), (X, torch.rand(4, 5, 3) > 0.5, torch.tensor(0.0))),
    "runtime_mask_rows_vector_value": (put("t"), (X, L([True, False, True, True]),
                                                  torch.randn(5, 3))),
    "runtime_mask_inner_axes": (put(":", "t"), (X, torch.rand(5, 3) > 0.4, torch.tensor(-1.))),
    "runtime_mask_accumulate": (put("t", accumulate=True), (X, torch.rand(4, 5) > 0.5,
                                                           torch.randn(3))),
    "runtime_mask_int_tensor": (put("t"), (torch.randint(0, 9, (3, 4)), torch.rand(3, 4) > 0.5,
                                           torch.tensor(-1))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_index_put(case):
    fn, args = CASES[case]
    assert_exports(Fn(fn), args)


class ConstMask(torch.nn.Module):
    """A mask known at export time (a buffer): becomes integer indices, so values may have
    one entry per selected element."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.tensor([[True, False, True], [False, False, True]]))

    def forward(self, x, v):
        y = x.clone()
        y[self.mask] = v
        y[:, self.mask[0]] += 1.0
        return y


def test_constant_mask_becomes_integer_indices():
    assert_exports(ConstMask(), (torch.randn(2, 3), torch.randn(3)))


def test_runtime_mask_with_per_element_values_is_refused():
    def fn(x, m, v):
        y = x.clone()
        y[m] = v
        return y
    with pytest.raises(T2NError, match="values"):
        assert_exports(Fn(fn), (torch.randn(4), torch.tensor([True, False, True, False]),
                                torch.randn(2)))


def test_dynamic_number_of_indices():
    fn = put("t", accumulate=True)
    assert_exports(Fn(fn), (torch.randn(6, 2), L([0, -1, 0]), torch.randn(3, 2)),
                   dynamic_axes={"input_1": {0: "K"}, "input_2": {0: "K"}},
                   more_args=[(torch.randn(6, 2), L([5, -6, 2, 2, 0]), torch.randn(5, 2))])


@pytest.mark.parametrize("accumulate", [False, True], ids=["overwrite", "accumulate"])
def test_op_count_does_not_grow_with_the_number_of_indices(accumulate):
    counts = []
    for n in (3, 300):
        pos = torch.randperm(400 * 3)[:n]
        args = (torch.randn(400, 3), pos // 3, pos % 3 - 3, torch.randn(n))
        counts.append(assert_exports(Fn(put("t", "t", accumulate=accumulate)), args).op_count)
    assert counts[0] == counts[1], counts


@settings(max_examples=12, deadline=None, derandomize=True)
@given(data=st.data(), accumulate=st.booleans())
def test_index_put_property(data, accumulate):
    rank = data.draw(st.integers(1, 3), label="rank")
    shape = data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank), label="shape")
    kinds = data.draw(st.lists(st.sampled_from(["t", ":"]), min_size=1, max_size=rank)
                      .filter(lambda k: "t" in k), label="index kinds")
    axes = [a for a, k in enumerate(kinds) if k == "t"]
    sizes = [shape[a] for a in axes]
    total = 1
    for s in sizes:
        total *= s
    n = data.draw(st.integers(0, total), label="n")
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2 ** 16), label="seed"))
    flat = torch.randperm(total, generator=g)[:n]  # distinct: overwrite is well defined
    if accumulate and n:
        flat = torch.cat([flat, flat[:1]])  # a duplicate accumulates
    idx = []
    for s in reversed(sizes):
        idx.append(flat % s)
        flat = flat // s
    idx = idx[::-1]
    idx = [torch.where(torch.rand(i.shape, generator=g) < 0.5, i - s, i)
           for i, s in zip(idx, sizes)]
    x = torch.randn(shape, generator=g)
    indexed = _indexed_shape(x, kinds, idx)
    full = data.draw(st.booleans(), label="full values")
    vshape = list(indexed) if full or not indexed else list(indexed[-1:])
    v = torch.randn(vshape, generator=g)
    assert_exports(Fn(put(*kinds, accumulate=accumulate)), (x, *idx, v))


def _indexed_shape(x, kinds, idx):
    it = iter(idx)
    key = tuple(next(it) if k == "t" else slice(None) for k in kinds)
    return tuple(x[key].shape)
