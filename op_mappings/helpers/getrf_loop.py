"""LU with partial pivoting (LAPACK ``getrf``) of any static size as one ``tract_core_scan``:
a column per iteration, so the op count does not grow with the matrix side (the unrolled
``factorizations.getrf`` serves up to ``MAX_N``).

The state is the working matrix ``a [..., m, n]`` and ``info [..., 1, 1]``; the column
``j`` a counter; step ``j`` does what the unrolled step does, with masks in place of slices:

    p    = j + argmax |a[j:, j]|          # rows above j masked to -1 (never chosen)
    swap rows j and p                     # select masks, exact and NaN-safe
    info = info or (j + 1 where a[j, j] == 0)
    a[j+1:, j]    = a[j+1:, j] / a[j, j]  # as a product by the reciprocal; a zero pivot's
    a[j+1:, j+1:] -= a[j+1:, j] a[j, j+1:]  # column is left as it is

and emits ``p`` (0-based) as a scan output: the pivots come out as one ``[..., 1, k]``
tensor. The product is element-wise (no matmul: see ``trsm_loop``).
"""

from __future__ import annotations

import torch

from op_mappings.helpers.elementwise import select
from t2n.loops import Loop


def getrf_scan(g, a):
    """(LU, 0-based pivots i64 ``[..., 1, k]``, info i64 ``[..., 1, 1]``) of float64
    ``a [..., m, n]``, k = min(m, n)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    r = a.rank - 2
    batch = list(a.shape[:-2])
    loop = Loop(g, "getrf")
    # k iterations: a scan over 0..k-1 plus a run-time zero (the argmax of one entry per
    # batch matrix, times 0), since tract folds a constant scan input and drops an unused one
    corner = g.reshape(g.slice(g.slice(a, r, 0, 1), r + 1, 0, 1), [-1]) if r else \
        g.reshape(g.slice(g.slice(a, 0, 0, 1), 1, 0, 1), [1])
    first = g.op("argmax_reduce", corner, axes=[0], out_dtype=torch.int64, out_shape=[1])
    zero = g.binary("mul", first, g.scalar(0, torch.int64), torch.int64)
    ramp = g.binary("add", g.const(torch.arange(k)), zero, torch.int64)
    tick = loop.scan(ramp, axis=0)  # [1]
    counter = loop.state(g.const(torch.tensor([0])))
    held = loop.state(a)
    info = loop.state(g.broadcast_to(g.scalar(0, torch.int64), batch + [1, 1]))
    b = loop.body
    i64 = torch.int64
    # j is the counter, read through max(counter, tick) (equal): an op on the scanned input
    # alone is pulled out of the loop by tract, which then fails to patch its broadcasts
    j = b.binary("max", counter, tick, i64)

    def cmp(kind, u, v):
        return b.binary(kind, u, v, i64, out_dtype=torch.bool)

    rows = b.const(torch.arange(m).reshape(m, 1))
    cols = b.const(torch.arange(n).reshape(1, n))
    x = held
    col = b.gather(x, j, r + 1)  # [..., m, 1]
    mag = select(b, cmp("lt", rows, j), -1.0, b.unary("abs", col))
    p = b.op("argmax_reduce", mag, axes=[r], out_dtype=i64, out_shape=batch + [1, 1])
    hit_p, hit_j = cmp("eq", rows, p), cmp("eq", rows, j)
    row_p = b.reduce("sum_reduce", select(b, hit_p, x, 0.0), [r], keepdim=True)  # [..., 1, n]
    x = select(b, hit_j, row_p, select(b, hit_p, b.gather(x, j, r), x))
    d = b.gather(row_p, j, r + 1)  # [..., 1, 1]
    zero = b.binary("eq", d, b.scalar(0.0, a.dtype), out_dtype=torch.bool)
    j1 = b.binary("add", j, b.scalar(1, i64), i64)
    step = select(b, zero, j1, b.scalar(0, i64))
    new_info = select(b, b.binary("eq", info, b.scalar(0, i64), out_dtype=torch.bool), step,
                      info)
    colj = b.gather(x, j, r + 1)
    lcol = select(b, zero, colj, b.binary("mul", colj, b.unary("recip", d)))
    below = cmp("gt", rows, j)
    upd = b.binary("sub", x, b.binary("mul", lcol, row_p))
    new_x = select(b, b.binary("and", below, cmp("gt", cols, j), out_dtype=torch.bool), upd,
                   select(b, b.binary("and", below, cmp("eq", cols, j), out_dtype=torch.bool),
                          lcol, x))
    loop.update(held, new_x)
    loop.update(info, new_info)
    loop.update(counter, j1)
    lu, piv, out_info = loop.outputs([loop.last_output(new_x), loop.scan_output(p, axis=r + 1),
                                      loop.last_output(new_info)])
    return lu, piv, out_info
