"""Cholesky (LAPACK ``potrf``, lower) of any static size as one ``tract_core_scan``: a
column per iteration, so the op count does not grow with the matrix side (the unrolled
form in ``linalg_factor._potrf`` costs ~12 ops per column up to ``MAX_N``).

The state is ``L [..., n, n]`` (zeros in the columns not computed yet), ``info [..., 1, 1]``
and the column counter ``j``. Column ``j`` is computed as the unrolled form computes it:

    c    = a[:, j] - L @ L[j, :]^T       # L's columns >= j are still 0
    info = info or (j + 1 where not c_j > 0)
    L[:, j] = 0 above j, sqrt(c_j) at j, c_i / sqrt(c_j) below

``a`` is scanned row by row of its transpose (it is never a constant here: a constant input
is folded before any mapping runs), and the product is a mul+sum, not a matmul, whose
batch-merging reshapes a scan body cannot size on symbolic axes (see ``trsm_loop``).
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import select
from t2n.walk.loops import Loop


def potrf_scan(g, a):
    """(L, info) like ``linalg_factor._potrf``: float64 ``a [..., n, n]``, lower triangle
    read; info the 1-based order of the first minor not positive definite, or 0."""
    n = a.shape[-1]
    r = a.rank - 2
    batch = list(a.shape[:-2])
    loop = Loop(g, "potrf")
    perm = list(range(r)) + [r + 1, r]
    a_col = loop.scan(g.transpose(a, perm), axis=r)  # row j of a^T: column j of a, [..., 1, n]
    j = loop.state(g.const(torch.tensor([0])))
    ll = loop.state(g.zeros_like(a))
    info = loop.state(g.broadcast_to(g.scalar(0, torch.int64), batch + [1, 1]))
    body = loop.body
    a_col = body.transpose(a_col, perm)  # [..., n, 1]
    l_row = body.gather(ll, j, r)  # [..., 1, n]
    c = body.binary("sub", a_col, body.reduce("sum_reduce", body.binary("mul", ll, l_row),
                                               [r + 1], keepdim=True))
    d = body.gather(c, j, r)  # [..., 1, 1]
    bad = body.op("not", body.binary("gt", d, body.scalar(0.0, a.dtype), out_dtype=torch.bool),
                  out_dtype=torch.bool)
    step = select(body, bad, body.binary("add", j, body.scalar(1, torch.int64), torch.int64),
                  body.scalar(0, torch.int64))
    new_info = select(body, body.binary("eq", info, body.scalar(0, torch.int64),
                                        out_dtype=torch.bool), step, info)
    ljj = body.unary("sqrt", d)
    rows = body.const(torch.arange(n).reshape(n, 1))
    col = select(body, body.binary("eq", rows, j, torch.int64, out_dtype=torch.bool), ljj,
                 select(body, body.binary("gt", rows, j, torch.int64, out_dtype=torch.bool),
                        body.binary("div", c, ljj), 0.0))
    cols = body.const(torch.arange(n).reshape(1, n))
    new_ll = select(body, body.binary("eq", cols, j, torch.int64, out_dtype=torch.bool), col, ll)
    loop.update(ll, new_ll)
    loop.update(info, new_info)
    loop.update(j, body.binary("add", j, body.scalar(1, torch.int64), torch.int64))
    out_ll, out_info = loop.outputs([loop.last_output(new_ll), loop.last_output(new_info)])
    return out_ll, out_info
