"""Jacobi kernels for symmetric eigenvalues and singular values of small static matrices,
and the spectral/nuclear matrix norms built on them (shared by the spectral linear-algebra
family and ``statistics``' matrix norms).

tract has no eigen solver, so the Jacobi method is unrolled: a fixed number of cyclic sweeps
(``sweeps(n)``) of plane rotations in the parallel "round-robin" order, where each step
rotates ``n // 2`` disjoint index pairs at once with one rotation matrix ``J`` built from
whole vectors. The op count is ``O(sweeps * n)``, independent of the batch (any leading
axes, even symbolic) and of the data. Arithmetic is float64 (inputs are cast up, results
cast back), and the matrix is first divided by its largest ``|entry|`` so that squares
neither overflow nor underflow.

* Symmetric eigenvalues: two-sided Jacobi, ``A <- J^T A J``; the rotated pair entries are
  set to exactly 0 after each step (the matmul leaves ``eps * |A|`` there otherwise, a floor
  that stops the quadratic convergence).
* Singular values: one-sided Jacobi (Hestenes) on the columns (``A^T`` when it has more
  columns than rows), ``B <- B J``, the singular values being the final column norms, after
  a QR-of-QR preconditioning (``svd_sweeps``) that halves the sweeps. Small singular values
  keep an accuracy of ``eps * |A|`` that eigenvalues of ``A^T A`` (``sqrt(eps) * |A|``) lose.
"""

from __future__ import annotations

import math

import torch

from t2n.mappings.helpers import factorizations as F
from t2n.mappings.helpers import small_matrix as M
from t2n.mappings.helpers.elementwise import select
from t2n.mappings.helpers.matrix import matmul_nd

WORK = M.WORK


def sweeps(n: int) -> int:
    """Jacobi sweeps unrolled for an ``n x n`` problem.

    Measured with this exact algorithm (float64, 30 random matrices per kind and size:
    Gaussian, eigenvalues logspaced over 15 decades with and without alternating signs,
    graded ``10^-k``, clusters within 1e-9 and 1e-14, exactly repeated values, rank one),
    the off-diagonal Frobenius norm falls below ``2^-53 * |A|_F`` after at most
    1, 4, 5, 5, 6, 7, 8, 8, 8, 9, 10, 10, 11, 11, 12 sweeps for n = 2..16. By Weyl's
    inequality the diagonal then holds every eigenvalue to within ``eps * |A|``. The count
    below adds at least one sweep of margin (convergence is quadratic at that point, so one
    more sweep squares the residual)."""
    if n <= 2:
        return 1
    return math.ceil(n / 2) + 5


def svd_sweeps(n: int) -> int:
    """Sweeps of the preconditioned one-sided Jacobi (``one_sided_svd``) for n columns.

    Measured with this exact algorithm (float64, 8 random matrices per kind and size, m - n
    in 0..4, either orientation: Gaussian, singular values logspaced over 15 decades, within
    1e-9, repeated, graded ``10^-k``, rank one, half rank, columns scaled over 12 decades),
    the singular values agree with LAPACK's float64 ones to ``4e-15 * s_max`` after at most
    3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 6, 5 sweeps for n = 3..16 (without the QR
    preconditioning: up to 13). The count below keeps two sweeps of margin."""
    if n <= 2:
        return n
    return 5 if n <= 4 else 6 if n <= 8 else 8


def _schedule(n: int):
    """The round-robin pairing: ``N - 1`` steps (``N`` = n rounded up to even), every pair
    ``(p, q)``, ``p < q``, exactly once per sweep. Per step and per index i: its pair
    ``P[i], Q[i]``, whether it is paired (``act``) and its role (+1 for p, -1 for q)."""
    big = n + n % 2
    players = list(range(big))
    steps = []
    for _ in range(big - 1):
        P, Q, act, role = list(range(n)), list(range(n)), [0.0] * n, [0.0] * n
        for i in range(big // 2):
            p, q = sorted((players[i], players[big - 1 - i]))
            if q >= n:
                continue
            P[p], Q[p], P[q], Q[q] = p, q, p, q
            act[p] = act[q] = 1.0
            role[p], role[q] = 1.0, -1.0
        if any(act):
            steps.append((P, Q, act, role))
        players = [players[0], players[-1]] + players[1:-1]
    return steps


def _partner_matrix(P, Q, role):
    """``R[i, partner(i)] = role[i]``: the off-diagonal part of the rotation, per unit sine."""
    n = len(P)
    r = torch.zeros(n, n, dtype=WORK)
    for i in range(n):
        if P[i] != Q[i]:
            r[i, Q[i] if role[i] > 0 else P[i]] = role[i]
    return r


def _tangent(g, app, aqq, apq):
    """(cos, sin) of the Jacobi rotation annihilating ``apq`` (Rutishauser's smaller angle):
    ``t = 2 apq sgn(d) / (|d| + sqrt(d^2 + 4 apq^2))``, ``d = aqq - app``, sgn(0) = 1. It is
    ``tan`` of the angle with ``cot 2phi = d / (2 apq)``, and 0 when ``apq`` is 0."""
    d = M.sub(g, aqq, app)
    two = M.mul(g, apq, 2.0)
    den = g.binary("add", g.unary("abs", d),
                   g.unary("sqrt", g.binary("add", M.mul(g, d, d), M.mul(g, two, two), WORK)),
                   WORK)
    den = g.binary("max", den, g.scalar(1e-300, WORK), WORK)
    num = select(g, M.compare(g, "ge", d, g.scalar(0.0, WORK)), two, g.unary("neg", two))
    t = M.div(g, num, den)
    c = g.unary("rsqrt", g.binary("add", M.mul(g, t, t), 1.0, WORK))
    return c, M.mul(g, t, c)


def _rotation(g, c, s, n, P, Q, role):
    """``J = diag(c) + R * s``; ``c``, ``s`` per index (a pair shares both), as columns
    ``[..., n, 1]`` or rows ``[..., 1, n]`` (``R`` is nonzero only inside pairs, where the
    row's and the column's values agree)."""
    eye = M.eye(g, n, n)
    r = g.const(_partner_matrix(P, Q, role))
    return g.binary("add", M.mul(g, eye, c), M.mul(g, r, s), WORK)


def _idx(g, v):
    return g.const(torch.tensor(v, dtype=torch.int64))


def _sym_jacobi(g, a):
    """Two-sided Jacobi on the symmetric float64 ``a`` (already scaled): the unsorted
    eigenvalues as a column ``[..., n, 1]``."""
    n = a.shape[-1]
    r = a.rank - 2
    eye = M.eye(g, n, n)
    for _ in range(sweeps(n)):
        for P, Q, act, role in _schedule(n):
            d = g.reduce("sum_reduce", M.mul(g, a, eye), [r + 1], keepdim=True)
            onehot_q = torch.zeros(n, n, dtype=WORK)
            for i in range(n):
                onehot_q[i, Q[i]] = act[i]
            apq = g.reduce("sum_reduce", M.mul(g, g.gather(a, _idx(g, P), r), g.const(onehot_q)),
                           [r + 1], keepdim=True)
            c, s = _tangent(g, g.gather(d, _idx(g, P), r), g.gather(d, _idx(g, Q), r), apq)
            j = _rotation(g, c, s, n, P, Q, role)
            ja = g.op("matmul", j, a, transposeA=True, transposeB=False, out_shape=list(a.shape))
            a = matmul_nd(g, ja, j)
            keep = torch.ones(n, n, dtype=WORK)
            for i in range(n):
                if act[i]:
                    keep[P[i], Q[i]] = keep[Q[i], P[i]] = 0.0
            a = M.mul(g, a, g.const(keep))
    return g.reduce("sum_reduce", M.mul(g, a, eye), [r + 1], keepdim=True)


def _one_sided(g, b, with_v: bool = False):
    """One-sided Jacobi on the columns of float64 ``b`` ``[..., m, n]`` (``svd_sweeps``, so
    ``b`` should be preconditioned): (the squared column norms ``[..., 1, n]``, the
    orthogonalised ``b = A V``, ``V`` or None)."""
    n = b.shape[-1]
    r = b.rank - 2
    v = None  # the product of the rotations so far (the first one is V itself)
    for _ in range(svd_sweeps(n)):
        for P, Q, act, role in _schedule(n):
            bp, bq = g.gather(b, _idx(g, P), r + 1), g.gather(b, _idx(g, Q), r + 1)
            app = g.reduce("sum_reduce", M.mul(g, bp, bp), [r], keepdim=True)
            aqq = g.reduce("sum_reduce", M.mul(g, bq, bq), [r], keepdim=True)
            apq = g.reduce("sum_reduce", M.mul(g, bp, bq), [r], keepdim=True)
            apq = M.mul(g, apq, g.const(torch.tensor([act], dtype=WORK)))
            c, s = _tangent(g, app, aqq, apq)
            j = _rotation(g, c, s, n, P, Q, role)
            b = matmul_nd(g, b, j)
            if with_v:
                v = j if v is None else matmul_nd(g, v, j)
    norms2 = g.reduce("sum_reduce", M.mul(g, b, b), [r], keepdim=True)
    if with_v and v is None:  # n == 1: no rotation
        v = M.batch_bcast(g, M.eye(g, n, n), b.shape[:-2])
    return norms2, b, v


def max_abs_scale(g, a):
    """``max |a|`` over the matrix (``[..., 1, 1]``), 1 where the matrix is all zeros, NaN
    where it holds an inf or NaN (PyTorch raises there; every result scaled by it is NaN,
    so callers multiply by the scale after sorting or reducing)."""
    r = a.rank - 2
    m = g.reduce("max_reduce", g.unary("abs", a), [r, r + 1], keepdim=True)
    m = select(g, M.compare(g, "eq", m, g.scalar(0.0, WORK)), g.scalar(1.0, WORK), m)
    nonfinite = g.reduce("sum_reduce", M.sub(g, a, a), [r, r + 1], keepdim=True)  # 0 or NaN
    return g.binary("add", m, nonfinite, WORK)


def _sort_last(g, v, descending: bool):
    """Sort the last axis of ``v`` ``[..., 1, n]`` (stable ranks, one-hot placement)."""
    n = v.shape[-1]
    col = M.mT(g, v)  # [..., n, 1]: v_i down the rows, v_j along the columns
    before = M.compare(g, "gt" if descending else "lt", v, col)
    ties = g.binary("and", M.compare(g, "eq", v, col),
                    g.const(torch.tril(torch.ones(n, n, dtype=torch.bool), -1)), torch.bool)
    rank = g.reduce("sum_reduce", g.cast(g.binary("or", before, ties, torch.bool), WORK),
                    [v.rank - 1], keepdim=True)  # [..., n, 1]
    place = M.compare(g, "eq", rank, g.const(torch.arange(n, dtype=WORK).reshape(1, n)))
    return g.reduce("sum_reduce", select(g, place, col, 0.0), [v.rank - 2], keepdim=True)


def lower_symmetric(g, a, lower: bool = True):
    """The symmetric matrix read from the lower (or upper) triangle of ``a``, as LAPACK does."""
    n = a.shape[-1]
    if not lower:
        a = M.mT(g, a)
    low = select(g, M.tri_mask(g, n, n, upper=False), a, 0.0)
    strict = select(g, M.tri_mask(g, n, n, upper=False, diagonal=-1), a, 0.0)
    return g.binary("add", low, M.mT(g, strict), WORK)


def eigvalsh_of(g, x, lower: bool = True, what: str = "self"):
    """Ascending eigenvalues of the symmetric matrices in ``x`` (read from one triangle),
    float64 ``[..., n]``."""
    M.check(g, x, what, square=True)
    a = lower_symmetric(g, M.work(g, x), lower)
    scale = max_abs_scale(g, a)
    ev = _sym_jacobi(g, M.div(g, a, scale))
    ev = _sort_last(g, M.mT(g, ev), descending=False)
    return g.squeeze(M.mul(g, ev, scale), [ev.rank - 2])


def check_rect(g, x, what):
    """The static sides (m, n) of ``x``: the one-sided Jacobi is unrolled over the shorter
    side only (at most ``MAX_N``); the longer one costs only matmul width."""
    return M.check(g, x, what, shorter_side=True, unrolled="the Jacobi sweeps")


def oriented(g, x, what):
    """float64 ``x`` (or its transpose) with no more columns than rows, and the flag."""
    m, n = check_rect(g, x, what)
    a = M.work(g, x)
    return (M.mT(g, a), True) if n > m else (a, False)


def _qr_r(g, a):
    """(reflectors, taus, R ``[..., n, n]``) of LAPACK's QR of float64 ``a`` (m >= n)."""
    n = a.shape[-1]
    packed, taus = F.geqrf(g, a)
    r = select(g, M.tri_mask(g, n, n, upper=True), M.rows(g, packed, 0, n), 0.0)
    return packed, taus, r


def one_sided_svd(g, a, with_v: bool = False):
    """One-sided Jacobi on float64 ``a`` (m >= n, scaled), preconditioned as Drmac and
    Veselic do: ``a = Q1 R1``, ``R1^T = Q2 R2``, Jacobi on the lower triangular ``L = R2^T``
    (same singular values, ``a = Q1 L Q2^T``). ``L`` is close to diagonal-times-orthogonal,
    so the sweeps needed for float64 accuracy at n = 16 drop from 13 to about 5 (measured,
    see ``svd_sweeps``) for the price of two QRs. Returns (squared column norms
    ``[..., 1, n]``, B = L V, V, (Q1 reflectors, taus, Q2 reflectors, taus))."""
    p1, t1, r1 = _qr_r(g, a)
    p2, t2, r2 = _qr_r(g, M.mT(g, r1))
    norms2, b, v = _one_sided(g, M.mT(g, r2), with_v)
    return norms2, b, v, (p1, t1, p2, t2)


def scaled_svdvals(g, x, what: str = "self"):
    """(singular values of ``x / scale`` in Jacobi order ``[..., 1, k]``, ``scale``
    ``[..., 1, 1]``): reductions run on the first and multiply by the second."""
    a, _ = oriented(g, x, what)
    scale = max_abs_scale(g, a)
    norms2, _, _, _ = one_sided_svd(g, M.div(g, a, scale))
    return g.unary("sqrt", norms2), scale


def svdvals_of(g, x, what: str = "self"):
    """Singular values of ``x`` ``[..., m, n]``, float64 ``[..., min(m, n)]``, descending."""
    s, scale = scaled_svdvals(g, x, what)
    s = M.mul(g, _sort_last(g, s, descending=True), scale)
    return g.squeeze(s, [s.rank - 2])


def reduce_last(g, kind, s, scale):
    """A max/min/sum of the scaled values, times the scale, as ``[...]``."""
    out = M.mul(g, g.reduce(kind, s, [s.rank - 1], keepdim=True), scale)
    return M.squeeze2(g, out)


def spectral_matrix_norm(g, x, ord, axes, keepdim):
    """``ord`` in ('nuc', 2, -2) over ``axes`` (two distinct axes) of the float ``x``; result
    in ``x.dtype``. Called by statistics.linalg_matrix_norm."""
    r, c = axes
    perm = [d for d in range(x.rank) if d not in (r, c)] + [r, c]
    xm = g.transpose(x, perm) if perm != list(range(x.rank)) else x
    check_rect(g, xm, "self")
    if M.empty(xm.shape):
        if ord != "nuc":
            raise g.error(f"ord={ord!r}: the spectral norm of an empty matrix is undefined")
        out = g.broadcast_to(g.scalar(0.0, x.dtype), list(xm.shape[:-2]))
    else:
        s, scale = scaled_svdvals(g, xm, "self")
        kind = {"nuc": "sum_reduce", 2: "max_reduce", -2: "min_reduce"}[ord]
        out = g.cast(reduce_last(g, kind, s, scale), x.dtype)
    return g.unsqueeze(out, sorted((r, c))) if keepdim else out
