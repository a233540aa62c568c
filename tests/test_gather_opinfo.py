"""PyTorch's own OpInfo samples (float32) for the gather/slicing/search family, in tract.

Each sample becomes a tiny module whose tensor arguments are runtime inputs and whose other
arguments are constants (``opinfo_harness.build_case``). Four samples per op, spread over the
op's sample list, plus ``__getitem__``'s boolean-mask sample (a runtime mask: the result
length depends on the data).
"""

import functools
import pytest
import torch

from opinfo_harness import build_case, samples_of
from test_gather_support import check

OPS = ["index_select", "take", "take_along_dim", "gather", "nn.functional.embedding",
       "masked_fill", "narrow", "narrow_copy", "select", "slice", "diagonal", "linalg.diagonal",
       "diagonal_copy", "bucketize", "searchsorted", "__getitem__"]
PER_OP = 4


@functools.lru_cache(maxsize=None)
def _samples(name):
    return samples_of(_op(name), 64)


def _op(name):
    from torch.testing._internal.common_methods_invocations import op_db

    return next(o for o in op_db if o.name == name and not o.variant_test_name)


def _spread(samples, k=PER_OP):
    """``k`` samples spread over the list (first and last included), in order."""
    if len(samples) <= k:
        return list(enumerate(samples))
    picks = sorted({round(i * (len(samples) - 1) / (k - 1)) for i in range(k)})
    return [(i, samples[i]) for i in picks]


def _cases():
    out = []
    for name in OPS:
        samples = _samples(name)
        for i, s in _spread(samples):
            out.append(pytest.param(name, i, id=f"{name}-sample{i}"))
        if name == "__getitem__":
            # the runtime boolean-mask sample, wherever it sits
            masks = [i for i, s in enumerate(samples) if _has_runtime_bool(s)]
            out += [pytest.param(name, i, id=f"{name}-sample{i}-bool_mask") for i in masks[:1]]
    return out


def _has_runtime_bool(sample):
    ts = [a for a in list(sample.args) if isinstance(a, torch.Tensor)]
    for a in sample.args:
        if isinstance(a, (list, tuple)):
            ts += [x for x in a if isinstance(x, torch.Tensor)]
    return any(t.dtype == torch.bool for t in ts)


@pytest.mark.parametrize("name,index", _cases())
def test_opinfo_sample(name, index):
    sample = _samples(name)[index]
    case = build_case(_op(name), sample)
    assert not isinstance(case, str), f"{name} sample {index}: {case}"
    module, tensors = case
    check(module, *tensors)
