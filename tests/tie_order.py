"""Where PyTorch's CPU kernels leave the index of equal values to their selection
algorithm's internals, and the check the OpInfo harness applies there.

torch 2.13's CPU kernels, read in the source and probed on every dtype (int64/int32/uint8/
bool/f16/f32/f64, ties, NaN, sizes 1..40000; tests/test_tie_order.py pins the decided
cases):

- ``sort``/``argsort`` with ``stable=True``: stable (``std::stable_sort``) -- decided.
- ``sort``/``argsort``/``msort`` with ``stable=False``: ``std::sort`` on (value, index)
  pairs compared by value; libstdc++ insertion-sorts 16 elements or fewer (stable), and
  introsorts longer slices (ties in the order its partitions leave them). A 1-D ascending
  sort of a non-bool integer tensor of at least 32768 elements goes to fbgemm's radix sort
  instead: stable. Decided for n <= 16 and that radix case; internals otherwise.
- ``topk``: ``std::nth_element`` then ``std::sort`` of the first k-1 (``64 k > n``), or
  ``std::partial_sort`` (a heap; ``64 k <= n``). Decided for n <= 3 (insertion sort) and
  for k = 1 with n >= 64 (the heap keeps the first of equal extremes); internals otherwise.
- ``kthvalue``: TH's quickselect (median-of-three, Hoare partition): decided for n <= 2.
- ``mode``: ``std::sort`` of (value, index) by value, then the index at the end of the
  longest run: the last position for n <= 16, internals beyond (and on NaN, which that
  comparison does not order).
- ``nanmedian`` of an all-NaN slice: ``nth_element`` among equivalent NaNs (index 0 for
  n <= 3, internals beyond). Every other median/nanmedian index is decided
  (``nth_element`` with ties broken by position: the stable rank).
- ``max``/``min`` with dim, ``argmax``/``argmin``: first position of the extreme (first NaN);
  ``cummax``/``cummin``: last position of the running extreme (``>=``), after a NaN the
  last NaN so far. Decided.

t2n returns the stable order everywhere (NaN above every number, equal values by
position), which is PyTorch's result in every decided case. In the others, an index that
differs from PyTorch's only among equal values is accepted, nothing else.
"""

from __future__ import annotations

import torch

# op -> (index output, parameter names after the input in schema order)
_PARAMS = {
    "sort": (1, ("dim", "descending", "stable")),
    "argsort": (0, ("dim", "descending", "stable")),
    "topk": (1, ("k", "dim", "largest", "sorted")),
    "kthvalue": (1, ("k", "dim", "keepdim")),
    "mode": (1, ("dim", "keepdim")),
    "nanmedian": (1, ("dim", "keepdim")),
}
_DEFAULTS = {"dim": -1, "descending": False, "stable": False, "largest": True,
             "keepdim": False}
RADIX_MIN = 32768  # at::internal::GRAIN_SIZE: fbgemm's radix sort from this size


def _params(name, sample):
    names = _PARAMS[name][1]
    p = dict(_DEFAULTS)
    p.update(zip(names, sample.args))
    p.update(sample.kwargs)
    return p


def left_to_internals(name, x: torch.Tensor, p: dict) -> bool:
    """Whether PyTorch's CPU kernel orders ties of op ``name`` on ``x`` (parameters ``p``)
    by its selection algorithm's internals, not by a rule of the input."""
    if x.dim() == 0:
        return False
    n = x.shape[p["dim"] % x.dim()]
    if name in ("sort", "argsort"):
        if p["stable"]:
            return False
        radix = (x.dim() == 1 and not p["descending"] and x.numel() >= RADIX_MIN
                 and not x.is_floating_point() and x.dtype != torch.bool)
        return n > 16 and not radix
    if name == "topk":
        return n > 3 and not (p["k"] == 1 and n >= 64)
    if name == "kthvalue":
        return n > 2
    if name == "mode":
        return n > 16 or (x.is_floating_point() and bool(x.isnan().any()))
    if name == "nanmedian":
        return n > 3 and x.is_floating_point() and bool(x.isnan().all(p["dim"]).any())
    return False


def equivalent_tie_indices(name, sample, i, expected, got) -> bool:
    """True when output ``i`` of op ``name`` is an index output whose ties PyTorch's kernel
    leaves to its internals on this sample, and ``got`` differs from ``expected`` only in
    which of equal values it points at (a permutation of the same positions for sorts,
    distinct positions for topk)."""
    spec = _PARAMS.get(name)
    x = sample.input
    if spec is None or spec[0] != i or not isinstance(x, torch.Tensor):
        return False
    if name == "nanmedian" and not sample.args and "dim" not in sample.kwargs:
        return False  # no dim: a value only
    p = _params(name, sample)
    if not left_to_internals(name, x, p):
        return False
    dim = p["dim"] % x.dim()
    e_idx = torch.as_tensor(expected).long()
    g_idx = torch.as_tensor(got).long()
    if e_idx.shape != g_idx.shape:
        return False
    if name in ("kthvalue", "mode", "nanmedian") and not p["keepdim"]:
        e_idx, g_idx = e_idx.unsqueeze(dim), g_idx.unsqueeze(dim)
    n = x.shape[dim]
    if bool(((g_idx < 0) | (g_idx >= n)).any()):
        return False
    if name in ("sort", "argsort") and not torch.equal(g_idx.sort(dim)[0], e_idx.sort(dim)[0]):
        return False  # not a permutation of the same positions
    if name == "topk" and g_idx.shape[dim] > 1:
        s = g_idx.sort(dim)[0]
        if bool((s.narrow(dim, 1, s.shape[dim] - 1) == s.narrow(dim, 0, s.shape[dim] - 1))
                .any()):
            return False  # a position twice
    a, b = x.gather(dim, e_idx), x.gather(dim, g_idx)
    same = a == b
    if a.is_floating_point():
        same |= a.isnan() & b.isnan()
    return bool(same.all())
