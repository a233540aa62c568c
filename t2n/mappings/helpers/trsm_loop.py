"""Triangular solves of any static size as one ``tract_core_scan`` (forward or back
substitution, one row per iteration), so the op count does not grow with the matrix side.

Unrolled substitution (``factorizations.trsm``) costs ~5 ops per row: fine up to
``MAX_N`` (16), but Qwen3-Next's gated delta layers solve 64 x 64 unit-triangular systems
per chunk. The scan carries the solution ``X [..., n, k]`` (zeros for the rows not solved
yet) and a row counter ``i``; at row ``i`` it reads row ``i`` of the strictly triangular
part of ``t``, of ``b`` and of the diagonal:

    x_i = (b_i - t_i @ X) / t_ii          # t_i is zero from column i on (forward)
    X   = where(arange(n) == i, x_i, X)

The masked coefficients meet only the zero rows of ``X`` not solved yet, so every product
``t_ij * x_j`` that the unrolled form computes is computed here, and no other (an
infinite or NaN ``x_j`` spreads exactly as it does there). Back substitution (upper) walks
the rows from the end (a scan step of -1).
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers import small_matrix as M
from t2n.mappings.helpers.elementwise import select
from t2n.walk.loops import Loop


def trsm_scan(g, t, b, lower: bool, unit: bool):
    """Solve ``t @ x = b`` like ``factorizations.trsm`` (float64; ``t [..., n, n]`` read in
    its ``lower`` or upper triangle, ``b [..., n, k]`` broadcast to the same batch)."""
    n = t.shape[-1]
    r = t.rank - 2
    strict = M.tri_mask(g, n, n, upper=not lower, diagonal=-1 if lower else 1)
    coef = select(g, strict, t, 0.0)
    eye = g.const(torch.eye(n, dtype=torch.bool))
    diag = None if unit else g.reduce("sum_reduce", select(g, eye, t, 0.0), [r + 1],
                                      keepdim=True)  # [..., n, 1]
    step = 1 if lower else -1
    loop = Loop(g, "trsm")
    # tract 0.23.9 folds a constant scan input into the body whole (its slices then fail
    # to load): scan a run-time operand, read the others' row i by the row counter
    scanned = b if not b.is_const else coef
    row = loop.scan(scanned, axis=r, step=step)
    i = loop.state(g.const(torch.tensor([0 if lower else n - 1])))
    body = loop.body

    def row_of(x):
        return row if x is scanned else body.gather(loop.full(x), i, r)

    x = loop.state(g.broadcast_to(g.scalar(0.0, t.dtype), b.shape))
    # t_i @ X as a product and a sum: a matmul there gets batch-merging reshapes from
    # tract, whose sizes (``(S+63)/64`` chunks) the body cannot evaluate (it learns its
    # symbols from its inputs' shapes, and cannot solve such an expression for S)
    t_col = body.transpose(row_of(coef), list(range(r)) + [r + 1, r])  # [..., n, 1]
    dot = body.reduce("sum_reduce", body.binary("mul", t_col, x), [r], keepdim=True)
    x_i = body.binary("sub", row_of(b), dot)  # [..., 1, k]
    if diag is not None:
        x_i = body.binary("div", x_i, body.gather(loop.full(diag), i, r))
    ramp = body.const(torch.arange(n).reshape(n, 1))
    here = body.binary("eq", ramp, i, torch.int64, out_dtype=torch.bool)  # [n, 1]
    new = select(body, here, x_i, x)
    loop.update(x, new)
    loop.update(i, body.binary("add", i, body.scalar(step, torch.int64), torch.int64))
    return loop.outputs([loop.last_output(new)])[0]
