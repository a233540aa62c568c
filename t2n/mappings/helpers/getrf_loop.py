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

from t2n.mappings.helpers.elementwise import select
from t2n.walk.loops import Loop


def runtime_ramp(g, src, k: int):
    """``0..k-1`` (i64) that tract cannot fold: plus the argmax of one element of ``src``
    (a run-time tensor) times 0. A loop runs over it, since tract folds a constant scan
    input into its body whole and drops an unused one."""
    corner = src
    for axis in range(src.rank):
        corner = g.slice(corner, axis, 0, 1)
    corner = g.reshape(corner, [1])
    first = g.op("argmax_reduce", corner, axes=[0], out_dtype=torch.int64, out_shape=[1])
    zero = g.binary("mul", first, g.scalar(0, torch.int64), torch.int64)
    return g.binary("add", g.const(torch.arange(k)), zero, torch.int64)


def counter(loop, tick, start: int, step: int):
    """(j, j + step) in the body: a state read through ``max``/``min`` with the scanned
    tick (equal to it): an op on the scanned input alone is pulled out of the loop by
    tract, which then fails to patch its broadcasts."""
    b = loop.body
    c = loop.state(loop.g.const(torch.tensor([start])))
    j = b.binary("max" if step > 0 else "min", c, tick, torch.int64)
    nxt = b.binary("add", j, b.scalar(step, torch.int64), torch.int64)
    loop.update(c, nxt)
    return j


def swap_rows(b, x, rows, j, p):
    """Rows ``j`` and ``p`` (``[1]`` / ``[..., 1, 1]`` i64, run time) of ``x`` swapped with
    select masks (exact, NaN-safe), as ``small_matrix.swap_rows`` does for a static ``j``."""
    r = x.rank - 2
    hit_p = b.binary("eq", rows, p, torch.int64, out_dtype=torch.bool)
    hit_j = b.binary("eq", rows, j, torch.int64, out_dtype=torch.bool)
    row_p = b.reduce("sum_reduce", select(b, hit_p, x, 0.0), [r], keepdim=True)
    return select(b, hit_j, row_p, select(b, hit_p, b.gather(x, j, r), x)), row_p


def apply_swaps_scan(g, x, pivots, reverse=False):
    """The row swaps of 0-based ``pivots [..., 1, k]`` applied to ``x [..., m, c]`` in order
    (in reverse order when ``reverse``), one per iteration."""
    k = pivots.shape[-1]
    m = x.shape[-2]
    r = x.rank - 2
    loop = Loop(g, "swaps")
    step = -1 if reverse else 1
    src = pivots if not pivots.is_const else x  # (a broadcast identity may fold)
    tick = loop.scan(runtime_ramp(g, src, k), axis=0, step=step)
    j = counter(loop, tick, k - 1 if reverse else 0, step)
    b = loop.body
    p = b.gather(loop.full(pivots), j, pivots.rank - 1)  # [..., 1, 1]
    held = loop.state(x)
    new, _ = swap_rows(b, held, b.const(torch.arange(m).reshape(m, 1)), j, p)
    loop.update(held, new)
    return loop.outputs([loop.last_output(new)])[0]


def getrf_scan(g, a):
    """(LU, 0-based pivots i64 ``[..., 1, k]``, info i64 ``[..., 1, 1]``) of float64
    ``a [..., m, n]``, k = min(m, n)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    r = a.rank - 2
    batch = list(a.shape[:-2])
    loop = Loop(g, "getrf")
    tick = loop.scan(runtime_ramp(g, a, k), axis=0)  # [1]
    held = loop.state(a)
    info = loop.state(g.broadcast_to(g.scalar(0, torch.int64), batch + [1, 1]))
    b = loop.body
    i64 = torch.int64
    j = counter(loop, tick, 0, 1)

    def cmp(kind, u, v):
        return b.binary(kind, u, v, i64, out_dtype=torch.bool)

    rows = b.const(torch.arange(m).reshape(m, 1))
    cols = b.const(torch.arange(n).reshape(1, n))
    x = held
    col = b.gather(x, j, r + 1)  # [..., m, 1]
    mag = select(b, cmp("lt", rows, j), -1.0, b.unary("abs", col))
    p = b.op("argmax_reduce", mag, axes=[r], out_dtype=i64, out_shape=batch + [1, 1])
    x, row_p = swap_rows(b, x, rows, j, p)  # row_p: the new row j, [..., 1, n]
    d = b.gather(row_p, j, r + 1)  # [..., 1, 1]
    zero = b.binary("eq", d, b.scalar(0.0, a.dtype), out_dtype=torch.bool)
    step = select(b, zero, b.binary("add", j, b.scalar(1, i64), i64), b.scalar(0, i64))
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
    lu, piv, out_info = loop.outputs([loop.last_output(new_x), loop.scan_output(p, axis=r + 1),
                                      loop.last_output(new_info)])
    return lu, piv, out_info
