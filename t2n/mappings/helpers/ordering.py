"""PyTorch's stable order on ``tract_core_topk``: the one sorting primitive behind topk,
sort/argsort/msort, kthvalue, median and the quantiles.

tract's topk is a stable sort (equal values keep their positions; ``largest`` reverses the
comparison, not the sequence, so equal values stay lowest position first), which is
exactly PyTorch's ``sort(stable=True)`` order on numbers. On NaN it is not: tract's
comparison calls NaN "less" than everything in both directions, which is no order at all
(the result is neither sorted nor a function PyTorch computes). PyTorch's kernels order
NaN above every number (last ascending, first descending, NaNs among themselves by
position), so float keys are rewritten first:

- float16/float32: one topk on a float64 key, exact for every value of the narrower type:
  ``+inf`` becomes 1e300 (above every finite f32, below the key of NaN) and NaN ``+inf``;
- float64: two stable passes, by value with NaN as ``+inf``, then by the NaN flag (a stable
  sort by the flag of an already stably sorted sequence is the lexicographic order).

The values are gathered from the input by the indices (NaN payloads and the sign of zero
come through unchanged; ``-0.0`` and ``0.0`` are equal, as in PyTorch's comparisons).
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import is_nan, select

SORTABLE = (torch.float16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
            torch.int64, torch.uint8)

# above every finite float32 (3.4e38), below the float64 key of NaN (+inf)
_INF_KEY = 1e300


def _gather_along(g, t, idx, axis):
    return g.op("tract_core_gather_elements", t, idx, axis=axis, out_shape=list(idx.shape),
                out_dtype=t.dtype)


def raw_topk(g, x, k, axis, largest):
    """``tract_core_topk`` as it is (numbers without NaN), with a static or symbolic ``k``."""
    shape = list(x.shape)
    shape[axis] = k
    if isinstance(k, int):
        return g.op("tract_core_topk", x, k=k, axis=axis, largest=bool(largest),
                    outputs=2, out_dtypes=[x.dtype, torch.int64],
                    out_shapes=[shape, shape])
    # a symbolic k goes in as a run-time scalar (tract evaluates a symbolic literal without
    # the symbols), and tract then sizes the outputs by a fresh symbol of its own: a full
    # dyn_slice (0..k) names that axis k again, so the result meets tensors sized k (the
    # sorted batch of pack_padded_sequence meets its hidden states)
    n = g.dim_scalar(k)
    outs = g.op("tract_core_topk", x, k=n, axis=axis, largest=bool(largest), outputs=2,
                out_dtypes=[x.dtype, torch.int64], out_shapes=[shape, shape])
    zero = g.scalar(0, torch.int64)
    return tuple(g.op("tract_core_dyn_slice", o, zero, n, len=k, axis=axis, out_shape=shape,
                      out_dtype=o.dtype) for o in outs)


def stable_topk(g, x, k, axis, largest):
    """(values, int64 indices) of the ``k`` largest (smallest) entries along ``axis`` in
    PyTorch's stable order: NaN above every number, equal values lowest position first.
    ``k`` may be symbolic; ``k = x.shape[axis]`` is a full sort."""
    if x.dtype == torch.bool:  # tract sorts numbers: sort 0/1 and cast the values back
        v, i = stable_topk(g, g.cast(x, torch.uint8), k, axis, largest)
        return g.cast(v, torch.bool), i
    if x.dtype not in SORTABLE:
        raise g.error(f"self: dtype {x.dtype} cannot be sorted by tract_core_topk")
    if not x.dtype.is_floating_point:
        return raw_topk(g, x, k, axis, largest)
    nan = is_nan(g, x)
    f64 = torch.float64
    if x.dtype != f64:
        key = g.binary("min", g.cast(x, f64), _INF_KEY, f64)
        _, idx = raw_topk(g, select(g, nan, float("inf"), key, f64), k, axis, largest)
    else:
        n = x.shape[axis]
        _, by_value = raw_topk(g, select(g, nan, float("inf"), x, f64), n, axis, largest)
        flag = _gather_along(g, g.cast(nan, torch.uint8), by_value, axis)
        _, by_flag = raw_topk(g, flag, k, axis, largest)
        idx = _gather_along(g, by_value, by_flag, axis)
    return _gather_along(g, x, idx, axis), idx
