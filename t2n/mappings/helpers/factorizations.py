"""LAPACK-shaped kernels unrolled over a small static matrix side: LU with partial pivoting
(``getrf``), triangular and LU solves, the inverse, Householder QR (``geqrf``) and applying
its Q. Shared by the linear-algebra families (solvers, factorisations, spectral). Use as
``F.getrf(g, a)``; arithmetic is float64 (:data:`.small_matrix.WORK`)."""

from __future__ import annotations

import torch

from t2n.mappings.helpers import small_matrix as M
from t2n.mappings.helpers.elementwise import select
from t2n.mappings.helpers.matrix import matmul_nd
from t2n.walk.builder import broadcast_shapes

WORK = M.WORK


def getrf(g, a):
    """LAPACK ``getrf`` on ``a`` (float64 ``[..., m, n]``): (LU, 0-based pivots as i64
    ``[..., 1, 1]`` per step, info as i64 ``[..., 1, 1]``: 1-based first zero pivot or 0).
    Above ``MAX_N``, one ``tract_core_scan`` whose pivots are one ``[..., 1, k]`` tensor
    (``getrf_loop``)."""
    m, n = a.shape[-2:]
    if min(m, n) > M.MAX_N:
        from t2n.mappings.helpers.getrf_loop import getrf_scan

        return getrf_scan(g, a)
    r = a.rank - 2
    pivots, info = [], None
    for j in range(min(m, n)):
        col = M.cols(g, M.rows(g, a, j, m), j, j + 1)
        shape = list(col.shape[:-2]) + [1, 1]
        p = g.op("argmax_reduce", g.unary("abs", col), axes=[r], out_dtype=torch.int64,
                 out_shape=shape)
        if j:
            p = g.binary("add", p, j, torch.int64)
        pivots.append(p)
        a = M.swap_rows(g, a, j, p)
        row = M.rows(g, a, j, j + 1)
        d = M.cols(g, row, j, j + 1)
        zero = M.compare(g, "eq", d, g.scalar(0.0, WORK))
        step = select(g, zero, g.scalar(j + 1, torch.int64), g.scalar(0, torch.int64))
        info = step if info is None else select(
            g, M.compare(g, "eq", info, g.scalar(0, torch.int64)), step, info)
        if j + 1 < m:
            rest = M.rows(g, a, j + 1, m)
            colj = M.cols(g, rest, j, j + 1)
            # LAPACK scales by the reciprocal, and leaves a zero pivot's column as it is
            lcol = select(g, zero, colj, M.mul(g, colj, g.unary("recip", d)))
            right = M.cols(g, rest, j + 1, n)
            if j + 1 < n:
                right = M.sub(g, right, M.mul(g, lcol, M.cols(g, row, j + 1, n)))
            rest = M.hcat(g, [M.cols(g, rest, 0, j), lcol, right])
            a = M.vcat(g, [M.rows(g, a, 0, j), row, rest])
    return a, pivots, info


def lu_factor(g, A, pivot, any_size: bool = False):
    """getrf of ``A`` in float64; ``any_size`` for callers that take the scan's stacked
    pivots (a tensor, not a list) above ``MAX_N``."""
    if not pivot:
        raise g.error("pivot: LU without pivoting is not supported (PyTorch has it on CUDA only)")
    M.check(g, A, "A", any_size=any_size)
    return getrf(g, M.work(g, A))


def trsm(g, t, b, lower: bool, unit: bool):
    """Solve ``t @ x = b`` (float64; ``t`` triangular ``[..., n, n]``, only its ``lower`` or
    upper triangle read; ``b`` ``[..., n, k]``, already broadcast to the batch). Above
    ``MAX_N`` rows, one ``tract_core_scan`` (``trsm_loop``) instead of the unrolled rows."""
    n = t.shape[-1]
    if n > M.MAX_N:
        from t2n.mappings.helpers.trsm_loop import trsm_scan

        return trsm_scan(g, t, b, lower, unit)
    order = range(n) if lower else range(n - 1, -1, -1)
    done = None  # solved rows, in row order
    for i in order:
        bi = M.rows(g, b, i, i + 1)
        if done is not None:
            coef = M.cols(g, M.rows(g, t, i, i + 1), 0, i) if lower else \
                M.cols(g, M.rows(g, t, i, i + 1), i + 1, n)
            bi = M.sub(g, bi, matmul_nd(g, coef, done))
        if not unit:
            bi = M.div(g, bi, M.at(g, t, i, i))
        if done is None:
            done = bi
        else:
            done = M.vcat(g, [done, bi] if lower else [bi, done])
    return done


def broadcast_pair(g, a, b):
    """Broadcast the batch axes of two matrices against each other."""
    batch = list(broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    return M.batch_bcast(g, a, batch), M.batch_bcast(g, b, batch), batch


def apply_swaps(g, x, pivots, reverse=False):
    if not isinstance(pivots, list):  # the loop's [..., 1, k] (above MAX_N)
        from t2n.mappings.helpers.getrf_loop import apply_swaps_scan

        return apply_swaps_scan(g, x, pivots, reverse)
    steps = list(enumerate(pivots))
    for j, p in (reversed(steps) if reverse else steps):
        x = M.swap_rows(g, x, j, p)
    return x


def lu_solve(g, lu, pivots, b, adjoint=False):
    """``A x = b`` (or ``A^T x = b``) for ``A = P L U`` (float64, batch broadcast)."""
    if not adjoint:
        y = apply_swaps(g, b, pivots)
        y = trsm(g, lu, y, lower=True, unit=True)
        return trsm(g, lu, y, lower=False, unit=False)
    lt = M.mT(g, lu)
    y = trsm(g, lt, b, lower=True, unit=False)
    y = trsm(g, lt, y, lower=False, unit=True)
    return apply_swaps(g, y, pivots, reverse=True)


def solve(g, A, B, left=True):
    """(x, info) of ``A x = B`` with B a matrix ``[..., n, k]`` (float64)."""
    a, b, batch = broadcast_pair(g, M.work(g, A), M.work(g, B))
    if not left:
        a, b = M.mT(g, a), M.mT(g, b)
    lu, piv, info = getrf(g, a)
    x = lu_solve(g, lu, piv, b)
    return (x if left else M.mT(g, x)), info, batch


def inv(g, A):
    n, _ = M.check(g, A, "A", square=True, any_size=True)
    eye = M.batch_bcast(g, M.eye(g, n, n), A.shape[:-2])
    x, info, _ = solve(g, A, eye)
    return g.cast(x, A.dtype), info


def geqrf(g, a):
    """LAPACK ``geqrf`` (unblocked ``geqr2``/``larfg``) on float64 ``a``: (reflectors and R
    packed as LAPACK does, taus as ``[..., 1, 1]`` per step; above ``MAX_N``, one scan
    whose taus are one ``[..., 1, k]``: ``geqrf_loop``)."""
    m, n = a.shape[-2:]
    if min(m, n) > M.MAX_N:
        from t2n.mappings.helpers.geqrf_loop import geqrf_scan

        return geqrf_scan(g, a)
    r = a.rank - 2
    taus = []
    for j in range(min(m, n)):
        x = M.rows(g, M.cols(g, a, j, j + 1), j, m)
        if m - j == 1:  # larfg on one element: H = I
            taus.append(g.zeros_like(x))
            continue
        alpha, v = M.rows(g, x, 0, 1), M.rows(g, x, 1, m - j)
        xn2 = g.reduce("sum_reduce", M.mul(g, v, v), [r], keepdim=True)
        norm = g.unary("sqrt", g.binary("add", M.mul(g, alpha, alpha), xn2, WORK))
        nonneg = M.compare(g, "ge", alpha, g.scalar(0.0, WORK))
        beta = select(g, nonneg, g.unary("neg", norm), norm)
        moved = M.compare(g, "ne", xn2, g.scalar(0.0, WORK))  # xnorm = 0: tau = 0, H = I
        tau = select(g, moved, M.div(g, M.sub(g, beta, alpha), beta), 0.0)
        v = select(g, moved, M.mul(g, v, g.unary("recip", M.sub(g, alpha, beta))), v)
        taus.append(tau)
        col = M.vcat(g, [select(g, moved, beta, alpha), v])
        right = M.rows(g, M.cols(g, a, j + 1, n), j, m)
        if j + 1 < n:
            right = reflect(g, right, M.vcat(g, [g.zeros_like(alpha), v]), tau, 0)
        rest = M.hcat(g, [M.rows(g, M.cols(g, a, 0, j), j, m), col, right])
        a = M.vcat(g, [M.rows(g, a, 0, j), rest])
    return a, taus


def reflect(g, c, w, tau, i):
    """``H @ c`` for ``H = I - tau w w^T`` with ``w = [0 .. 0, 1, w[i+1:]]`` (rows >= i
    only; ``w[i]`` is taken as 1 whatever it holds)."""
    m = c.shape[-2]
    r = c.rank - 2
    ci = M.rows(g, c, i, m)
    wi = M.rows(g, w, i, m)
    first = g.const(torch.arange(m - i).reshape(m - i, 1) == 0)
    wi = select(g, first, 1.0, wi, dtype=WORK)
    wtc = g.reduce("sum_reduce", M.mul(g, wi, ci), [r], keepdim=True)
    ci = M.sub(g, ci, M.mul(g, M.mul(g, tau, wi), wtc))
    return M.vcat(g, [M.rows(g, c, 0, i), ci])


def apply_q(g, refl, taus, c, transpose):
    """``Q @ c`` (or ``Q^T @ c``) for ``Q = H_0 H_1 ... H_{k-1}`` held as reflectors
    (``taus`` a list, or the loop's ``[..., 1, k]``)."""
    if not isinstance(taus, list):
        from t2n.mappings.helpers.geqrf_loop import apply_q_scan

        return apply_q_scan(g, refl, taus, c, transpose)
    order = list(range(len(taus)))
    for i in (order if transpose else reversed(order)):
        c = reflect(g, c, M.cols(g, refl, i, i + 1), taus[i], i)
    return c


def info_out(g, info, batch):
    """PyTorch's int32 ``info`` of shape ``batch`` from a kernel's ``[..., 1, 1]`` (0: none).

    ``batch`` is the factored matrix's own batch shape: a kernel run on batch axes
    broadcast against another operand's (``solve_ex`` of one ``A`` and a batch of ``B``)
    holds the same info along them, and PyTorch reports one per matrix of ``A``, so those
    axes are cut to their first entry."""
    if info is None:
        return g.broadcast_to(g.scalar(0, torch.int32), list(batch))
    batch = list(batch)
    extra = info.rank - 2 - len(batch)
    for axis in range(info.rank - 2):
        own = batch[axis - extra] if axis >= extra else None
        if (own is None or own == 1) and info.shape[axis] != 1:
            info = g.slice(info, axis, 0, 1)
    info = g.reshape(info, list(info.shape[extra:]))
    return g.cast(g.squeeze(info, [info.rank - 2, info.rank - 1]), torch.int32)
