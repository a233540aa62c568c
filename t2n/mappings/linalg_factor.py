"""Cholesky, Householder QR and LDL (Bunch-Kaufman) factorisations of small static matrices,
with the solves and products built on them: cholesky, cholesky_solve, cholesky_inverse,
geqrf, householder_product/orgqr, ormqr, qr, ldl_factor, ldl_solve.

Unrolled over the matrix side like the LU family (``linalg_small.py``), except Cholesky, QR
and their solves and products, which loop above 16 x 16 (``helpers/potrf_loop.py``,
``geqrf_loop.py``, ``trsm_loop.py``): float64 arithmetic,
whole-row/column steps, batch axes free. Householder reflectors follow LAPACK's
``geqrf``/``larfg`` (Q and R carry LAPACK's signs); LDL follows ``sytrf``'s partial
Bunch-Kaufman pivoting. The shared kernels are in ``helpers/factorizations.py``.
"""

from __future__ import annotations

import math

import torch

from t2n.mappings.helpers import factorizations as F
from t2n.mappings.helpers import small_matrix as M
from t2n.mappings.helpers.elementwise import select
from t2n.mappings.helpers.matrix import matmul_nd
from t2n.walk.builder import broadcast_shapes
from t2n.walk.registry import aten


# ---------------------------------------------------------------------------- Cholesky
def _potrf(g, a):
    """LAPACK ``potrf`` (lower) on float64 ``a``, reading its lower triangle: (L, info), info
    the 1-based order of the first leading minor that is not positive definite, or 0.
    Columns after a failure are not LAPACK's (PyTorch leaves them unspecified). Above
    ``MAX_N``, one ``tract_core_scan`` (``helpers/potrf_loop.py``)."""
    n = a.shape[-1]
    if n > M.MAX_N:
        from t2n.mappings.helpers.potrf_loop import potrf_scan

        return potrf_scan(g, a)
    zeros = g.zeros_like(M.cols(g, a, 0, 1))
    cols, info = [], None
    for j in range(n):
        c = M.rows(g, M.cols(g, a, j, j + 1), j, n)  # [..., n-j, 1]
        if cols:
            lp = M.hcat(g, cols)  # [..., n, j]
            c = M.sub(g, c, matmul_nd(g, M.rows(g, lp, j, n), M.rows(g, lp, j, j + 1),
                                     transpose_b=True))
        d = M.rows(g, c, 0, 1)
        bad = g.op("not", M.compare(g, "gt", d, g.scalar(0.0, M.WORK)), out_dtype=torch.bool)
        step = select(g, bad, g.scalar(j + 1, torch.int64), g.scalar(0, torch.int64))
        info = step if info is None else select(
            g, M.compare(g, "eq", info, g.scalar(0, torch.int64)), step, info)
        ljj = g.unary("sqrt", d)
        below = M.div(g, M.rows(g, c, 1, n - j), ljj) if j + 1 < n else None
        cols.append(M.vcat(g, [M.rows(g, zeros, 0, j), ljj, below]))
    return M.hcat(g, cols), info


def _cholesky(g, A, upper):
    """(L or U, info) in float64; ``upper`` reads the upper triangle (A = U^H U)."""
    a = M.work(g, A)
    if upper:
        ll, info = _potrf(g, M.mT(g, a))
        return M.mT(g, ll), info
    return _potrf(g, a)


@aten("linalg_cholesky_ex")
def linalg_cholesky_ex(g, A, upper=False, check_errors=False):
    M.check(g, A, "A", square=True, any_size=True)
    if M.empty(A.shape):
        return M.fill(g, 0), M.fill(g, 1)
    ll, info = _cholesky(g, A, upper)
    return g.cast(ll, A.dtype), F.info_out(g, info, A.shape[:-2])


@aten("linalg_cholesky", "cholesky")
def linalg_cholesky(g, A, upper=False):
    M.check(g, A, "A", square=True, any_size=True)
    if M.empty(A.shape):
        return M.fill(g, 0)
    return g.cast(_cholesky(g, A, upper)[0], A.dtype)


def _chol_solve(g, b, f, upper):
    """``(F F^H) x = b`` for lower ``F`` (or ``(F^H F) x = b`` for upper ``F``)."""
    ll = M.mT(g, f) if upper else f
    y = F.trsm(g, ll, b, lower=True, unit=False)
    return F.trsm(g, M.mT(g, ll), y, lower=False, unit=False)


@aten("cholesky_solve")
def cholesky_solve(g, self, input2, upper=False):
    M.check(g, input2, "input2", square=True, any_size=True)
    M.check(g, self, "self", any_size=True)
    if M.empty(g.out_shape(0)):
        return M.fill(g, 0)
    f, b, _ = F.broadcast_pair(g, M.work(g, input2), M.work(g, self))
    return g.cast(_chol_solve(g, b, f, upper), g.out_dtype(0))


@aten("cholesky_inverse")
def cholesky_inverse(g, self, upper=False):
    n, _ = M.check(g, self, "self", square=True, any_size=True)
    if M.empty(self.shape):
        return M.fill(g, 0)
    f = M.work(g, self)
    eye = M.batch_bcast(g, M.eye(g, n, n), self.shape[:-2])
    return g.cast(_chol_solve(g, eye, f, upper), self.dtype)


# ---------------------------------------------------------------------------- Householder QR


def _taus_in(g, tau, k):
    """Runtime taus ``[..., k]`` as ``[..., 1, 1]`` per reflector (one ``[..., 1, k]`` for
    the loops above ``MAX_N``)."""
    if k > M.MAX_N:
        return g.unsqueeze(tau, [tau.rank - 1])
    out = []
    for i in range(k):
        t = g.slice(tau, tau.rank - 1, i, i + 1)
        out.append(g.unsqueeze(t, [t.rank]))
    return out


@aten("geqrf")
def geqrf(g, self):
    M.check(g, self, "self", any_size=True)
    if M.empty(self.shape):
        return M.fill(g, 0), M.fill(g, 1)
    a, taus = F.geqrf(g, M.work(g, self))
    tau = g.concat([g.squeeze(t, [t.rank - 1]) for t in taus], taus[0].rank - 2) \
        if isinstance(taus, list) else g.squeeze(taus, [taus.rank - 2])
    return g.cast(a, self.dtype), g.cast(tau, self.dtype)


@aten("linalg_householder_product", "orgqr")
def linalg_householder_product(g, input, tau):
    m, n = M.check(g, input, "input", any_size=True)
    k = tau.shape[-1]
    if not isinstance(k, int):
        raise g.error("tau: its length must be static")
    if M.empty(g.out_shape(0)):
        return M.fill(g, 0)
    refl = M.work(g, input)
    batch = list(broadcast_shapes(input.shape[:-2], tau.shape[:-1]))
    q = M.batch_bcast(g, M.eye(g, m, n), batch)
    q = F.apply_q(g, refl, _taus_in(g, M.work(g, tau), k), q, transpose=False)
    return g.cast(q, g.out_dtype(0))


@aten("ormqr")
def ormqr(g, self, input2, input3, left=True, transpose=False):
    """``Q @ C``, ``Q^T @ C``, ``C @ Q`` or ``C @ Q^T`` with Q from geqrf's reflectors."""
    M.check(g, self, "self", any_size=True)
    M.check(g, input3, "input3", any_size=True)
    k = input2.shape[-1]
    if not isinstance(k, int):
        raise g.error("input2: tau's length must be static")
    if M.empty(g.out_shape(0)):
        return M.fill(g, 0)
    refl, c = M.work(g, self), M.work(g, input3)
    batch = list(broadcast_shapes(self.shape[:-2], input3.shape[:-2], input2.shape[:-1]))
    refl, c = M.batch_bcast(g, refl, batch), M.batch_bcast(g, c, batch)
    taus = _taus_in(g, M.work(g, input2), k)
    if left:
        out = F.apply_q(g, refl, taus, c, transpose)
    else:  # C Q = (Q^T C^T)^T
        out = M.mT(g, F.apply_q(g, refl, taus, M.mT(g, c), not transpose))
    return g.cast(out, g.out_dtype(0))


def _qr(g, A, mode):
    m, n = M.check(g, A, "A", any_size=True)
    if mode not in ("reduced", "complete", "r"):
        raise g.error(f"mode: unknown mode {mode!r}")
    k = min(m, n)
    q_cols = m if mode == "complete" else k
    r_rows = m if mode == "complete" else k
    if M.empty(A.shape):
        if mode == "r" or M.empty(g.out_shape(0)):
            q = M.fill(g, 0)
        else:  # no reflector: Q is the identity
            q = g.cast(M.batch_bcast(g, M.eye(g, m, q_cols), A.shape[:-2]), A.dtype)
        return q, M.fill(g, 1)
    a, taus = F.geqrf(g, M.work(g, A))
    rr = select(g, M.tri_mask(g, r_rows, n, upper=True),
                M.rows(g, a, 0, r_rows), 0.0)
    if mode == "r":
        return M.fill(g, 0), g.cast(rr, A.dtype)
    q = M.batch_bcast(g, M.eye(g, m, q_cols), A.shape[:-2])
    q = F.apply_q(g, a, taus, q, transpose=False)
    return g.cast(q, A.dtype), g.cast(rr, A.dtype)


@aten("linalg_qr")
def linalg_qr(g, A, mode="reduced"):
    return _qr(g, A, mode)


@aten("qr")
def qr(g, self, some=True):
    return _qr(g, self, "reduced" if some else "complete")


# ---------------------------------------------------------------------------- LDL (Bunch-Kaufman)
BK_ALPHA = (1.0 + math.sqrt(17.0)) / 8.0  # LAPACK sytf2's pivot threshold


def _sym_swap(g, t, a: int, p):
    """Symmetric interchange of rows and columns ``a`` (static) and ``p`` (runtime)."""
    return M.mT(g, M.swap_rows(g, M.mT(g, M.swap_rows(g, t, a, p)), a, p))


def _col_at(g, t, idx):
    """Column ``idx`` (runtime i64 ``[..., 1, 1]``) of ``t`` as ``[..., n, 1]``."""
    n = t.shape[-1]
    hit = g.binary("eq", g.const(torch.arange(n).reshape(1, n)), idx, torch.int64,
                   out_dtype=torch.bool)
    return g.reduce("sum_reduce", select(g, hit, t, 0.0), [t.rank - 1], keepdim=True)


def _and(g, a, b):
    return g.binary("and", a, b, torch.bool)


def _or(g, a, b):
    return g.binary("or", a, b, torch.bool)


def _not(g, a):
    return g.op("not", a, out_dtype=torch.bool)


def _ge(g, a, b):
    return M.compare(g, "ge", a, b)


def _i64(g, v):
    return g.scalar(v, torch.int64)


def _trail(g, t, k, block):
    """``t`` with its trailing block ``t[k:, k:]`` replaced by ``block``."""
    n = t.shape[-1]
    return M.vcat(g, [M.rows(g, t, 0, k), M.hcat(g, [M.cols(g, M.rows(g, t, k, n), 0, k), block])])


def _sytf2_step(g, t, k):
    """One position of LAPACK ``sytf2`` (lower) on the full symmetric ``t``: both the 1x1
    and the 2x2 outcome, and the decision between them."""
    n = t.shape[-1]
    r = t.rank - 2
    akk = M.at(g, t, k, k)
    absakk = g.unary("abs", akk)
    out = {}
    if k == n - 1:
        out["zero"] = M.compare(g, "eq", absakk, g.scalar(0.0, M.WORK))
        out["two"], kp1 = None, None
    else:
        below = g.unary("abs", M.rows(g, M.cols(g, t, k, k + 1), k + 1, n))
        imax = g.binary("add", g.op("argmax_reduce", below, axes=[r], out_dtype=torch.int64,
                                    out_shape=list(below.shape[:-2]) + [1, 1]), k + 1,
                        torch.int64)
        colmax = g.reduce("max_reduce", below, [r], keepdim=True)
        cim = g.unary("abs", _col_at(g, t, imax))
        ar = g.const(torch.arange(n).reshape(n, 1))
        at_imax = g.binary("eq", ar, imax, torch.int64, out_dtype=torch.bool)
        skip = _or(g, g.const(torch.arange(n).reshape(n, 1) < k), at_imax)
        rowmax = g.reduce("max_reduce", select(g, skip, 0.0, cim, dtype=M.WORK), [r], keepdim=True)
        aimax = g.reduce("sum_reduce", select(g, at_imax, cim, 0.0), [r], keepdim=True)
        zero = M.compare(g, "eq", g.binary("max", absakk, colmax, M.WORK), g.scalar(0.0, M.WORK))
        c1 = _ge(g, absakk, M.mul(g, colmax, BK_ALPHA))
        c2 = _ge(g, absakk, M.mul(g, M.mul(g, colmax, BK_ALPHA), M.div(g, colmax, rowmax)))
        c3 = _ge(g, aimax, M.mul(g, rowmax, BK_ALPHA))
        keep = _or(g, _or(g, zero, c1), c2)
        out["zero"], out["two"] = zero, _not(g, _or(g, keep, c3))
        kp1 = select(g, keep, _i64(g, k), imax)
        out["imax"] = imax
    # 1x1 pivot at k after swapping k <-> kp1
    ta = _sym_swap(g, t, k, kp1) if kp1 is not None else t
    d = M.at(g, ta, k, k)
    x = M.rows(g, M.cols(g, ta, k, k + 1), k + 1, n)
    if k + 1 < n:
        d11 = g.unary("recip", d)
        trail = M.rows(g, M.cols(g, ta, k + 1, n), k + 1, n)
        upd = M.sub(g, trail, M.mul(g, x, M.mT(g, M.mul(g, d11, x))))
        ta = _trail(g, ta, k + 1, select(g, out["zero"], trail, upd))
        x = select(g, out["zero"], x, M.mul(g, x, d11))
    out["ta"], out["col_a"] = ta, M.vcat(g, [d, x])
    out["piv_a"] = g.binary("add", kp1, 1, torch.int64) if kp1 is not None else _i64(g, k + 1)
    if out["two"] is None:
        return out
    # 2x2 pivot at (k, k+1) after swapping k+1 <-> imax
    tb = _sym_swap(g, t, k + 1, out["imax"])
    d21 = M.at(g, tb, k + 1, k)
    e11 = M.div(g, M.at(g, tb, k + 1, k + 1), d21)
    e22 = M.div(g, M.at(g, tb, k, k), d21)
    tt = g.unary("recip", M.sub(g, M.mul(g, e11, e22), 1.0))
    f21 = M.div(g, tt, d21)
    col_k = [M.at(g, tb, k, k), d21]
    col_k1 = [M.at(g, tb, k + 1, k + 1)]
    if k + 2 < n:
        ck = M.rows(g, M.cols(g, tb, k, k + 1), k + 2, n)
        ck1 = M.rows(g, M.cols(g, tb, k + 1, k + 2), k + 2, n)
        wk = M.mul(g, f21, M.sub(g, M.mul(g, e11, ck), ck1))
        wkp1 = M.mul(g, f21, M.sub(g, M.mul(g, e22, ck1), ck))
        trail = M.rows(g, M.cols(g, tb, k + 2, n), k + 2, n)
        upd = M.sub(g, M.sub(g, trail, M.mul(g, ck, M.mT(g, wk))), M.mul(g, ck1, M.mT(g, wkp1)))
        tb = _trail(g, tb, k + 2, upd)
        col_k.append(wk)
        col_k1.append(wkp1)
    out["tb"], out["col_b"], out["col_b1"] = tb, M.vcat(g, col_k), M.vcat(g, col_k1)
    out["piv_b"] = g.binary("sub", _i64(g, -1), out["imax"], torch.int64)
    return out


def _sytrf(g, a):
    """LAPACK ``sytrf`` (lower, Bunch-Kaufman) on float64 ``a``, reading its lower triangle:
    (LD, pivots as LAPACK's 1-based signed i64 ``[..., 1, 1]`` per position, info). Whether a
    position starts a 2x2 block is known at run time only, so every position computes both
    outcomes and selects; a position taken by the previous 2x2 block keeps its results."""
    n = a.shape[-1]
    low = select(g, M.tri_mask(g, n, n, upper=False), a, 0.0)
    t = g.binary("add", low, M.mT(g, select(g, M.tri_mask(g, n, n, upper=False, diagonal=-1),
                                           a, 0.0)), M.WORK)
    zeros = g.zeros_like(M.cols(g, a, 0, 1))
    cols, pivs, info = [], [], None
    consumed, pending_col, pending_piv = None, None, None
    for k in range(n):
        s = _sytf2_step(g, t, k)
        two = s["two"]
        active = _not(g, consumed) if consumed is not None else None
        if two is not None and active is not None:
            two = _and(g, two, active)
        col, piv, tn = s["col_a"], s["piv_a"], s["ta"]
        if two is not None:
            col = select(g, two, s["col_b"], col)
            piv = select(g, two, s["piv_b"], piv)
            tn = select(g, two, s["tb"], tn)
        zero = s["zero"]
        if consumed is not None:
            col = select(g, consumed, pending_col, col)
            piv = select(g, consumed, pending_piv, piv)
            tn = select(g, consumed, t, tn)
            zero = _and(g, zero, active)
        step = select(g, zero, _i64(g, k + 1), _i64(g, 0))
        info = step if info is None else select(g, M.compare(g, "eq", info, _i64(g, 0)), step, info)
        cols.append(M.vcat(g, [M.rows(g, zeros, 0, k), col]))
        pivs.append(g.broadcast_to(piv, list(a.shape[:-2]) + [1, 1]))
        t = tn
        consumed = two
        if two is not None:
            pending_col, pending_piv = s["col_b1"], s["piv_b"]
    return M.hcat(g, cols), pivs, g.broadcast_to(info, list(a.shape[:-2]) + [1, 1])


def _ldl_factor(g, A, hermitian):
    M.check(g, A, "A", square=True)
    ld, pivs, info = _sytrf(g, M.work(g, A))
    piv = g.concat([g.squeeze(p, [p.rank - 1]) for p in pivs], pivs[0].rank - 2)
    return g.cast(ld, A.dtype), g.cast(piv, torch.int32), info


@aten("linalg_ldl_factor_ex")
def linalg_ldl_factor_ex(g, self, hermitian=False, check_errors=False):
    if M.empty(self.shape):
        return M.fill(g, 0), M.fill(g, 1), M.fill(g, 2)
    ld, piv, info = _ldl_factor(g, self, hermitian)
    return ld, piv, F.info_out(g, info, self.shape[:-2])


@aten("linalg_ldl_factor")
def linalg_ldl_factor(g, self, hermitian=False):
    if M.empty(self.shape):
        return M.fill(g, 0), M.fill(g, 1)
    return _ldl_factor(g, self, hermitian)[:2]


def _rowdot(g, col, rows):
    """``col^T @ rows`` as ``[..., 1, c]`` (``col`` ``[..., m, 1]``, ``rows`` ``[..., m, c]``)."""
    return g.reduce("sum_reduce", M.mul(g, col, rows), [rows.rank - 2], keepdim=True)


def _set_row(g, b, i, row):
    return M.vcat(g, [M.rows(g, b, 0, i), row, M.rows(g, b, i + 1, b.shape[-2])])


def _sytrs(g, ld, piv, b):
    """LAPACK ``sytrs`` (lower): solve with ``sytrf``'s factors; the block structure comes
    from the runtime pivots (negative: a 2x2 block starting at the first such position)."""
    n = ld.shape[-1]
    p = g.cast(piv, torch.int64)
    pk = [g.unsqueeze(g.slice(p, p.rank - 1, k, k + 1), [p.rank]) for k in range(n)]
    one, start, second = [], [], []
    prev_start = None
    for k in range(n):
        neg = g.binary("lt", pk[k], 0, torch.int64, out_dtype=torch.bool)
        st = neg if prev_start is None else _and(g, neg, _not(g, prev_start))
        if k == n - 1:
            st = None  # a 2x2 block cannot start at the last position
        one.append(_not(g, neg))
        start.append(st)
        second.append(prev_start)
        prev_start = st
    minus1 = [g.binary("sub", q, 1, torch.int64) for q in pk]
    flipped = [g.binary("sub", _i64(g, -1), q, torch.int64) for q in pk]
    for k in range(n):  # L D y = b
        col = M.rows(g, M.cols(g, ld, k, k + 1), k + 1, n)
        ba = M.swap_rows(g, b, k, minus1[k])
        bk = M.div(g, M.rows(g, ba, k, k + 1), M.at(g, ld, k, k))
        below = M.sub(g, M.rows(g, ba, k + 1, n), M.mul(g, col, M.rows(g, ba, k, k + 1)))
        ba = M.vcat(g, [M.rows(g, ba, 0, k), bk, below])
        if start[k] is None:
            b = select(g, one[k], ba, b)
            continue
        bb = M.swap_rows(g, b, k + 1, flipped[k])
        r0, r1 = M.rows(g, bb, k, k + 1), M.rows(g, bb, k + 1, k + 2)
        if k + 2 < n:
            c0 = M.rows(g, col, 1, n - k - 1)
            c1 = M.rows(g, M.cols(g, ld, k + 1, k + 2), k + 2, n)
            rest = M.sub(g, M.sub(g, M.rows(g, bb, k + 2, n), M.mul(g, c0, r0)), M.mul(g, c1, r1))
        else:
            rest = None
        akm1k = M.at(g, ld, k + 1, k)
        akm1 = M.div(g, M.at(g, ld, k, k), akm1k)
        ak = M.div(g, M.at(g, ld, k + 1, k + 1), akm1k)
        denom = M.sub(g, M.mul(g, akm1, ak), 1.0)
        bkm1, bk = M.div(g, r0, akm1k), M.div(g, r1, akm1k)
        x0 = M.div(g, M.sub(g, M.mul(g, ak, bkm1), bk), denom)
        x1 = M.div(g, M.sub(g, M.mul(g, akm1, bk), bkm1), denom)
        bb = M.vcat(g, [M.rows(g, bb, 0, k), x0, x1, rest])
        b = select(g, one[k], ba, select(g, start[k], bb, b))
    for k in range(n - 1, -1, -1):  # L^T x = y
        if k + 1 < n:
            tail = M.rows(g, b, k + 1, n)
            rk = M.sub(g, M.rows(g, b, k, k + 1),
                      _rowdot(g, M.rows(g, M.cols(g, ld, k, k + 1), k + 1, n), tail))
            ba = _set_row(g, b, k, rk)
        else:
            ba = b
        bsingle = M.swap_rows(g, ba, k, minus1[k])
        if second[k] is None:
            b = select(g, one[k], bsingle, b)
            continue
        if k + 1 < n:
            rkm1 = M.sub(g, M.rows(g, ba, k - 1, k),
                        _rowdot(g, M.rows(g, M.cols(g, ld, k - 1, k), k + 1, n), tail))
            bb = _set_row(g, ba, k - 1, rkm1)
        else:
            bb = ba
        bb = M.swap_rows(g, bb, k, flipped[k])
        b = select(g, one[k], bsingle, select(g, second[k], bb, b))
    return b


@aten("linalg_ldl_solve")
def linalg_ldl_solve(g, LD, pivots, B, hermitian=False):
    M.check(g, LD, "LD", square=True)
    M.check(g, B, "B")
    if M.empty(g.out_shape(0)):
        return M.fill(g, 0)
    ld, b, batch = F.broadcast_pair(g, M.work(g, LD), M.work(g, B))
    piv = g.broadcast_to(pivots, batch + [pivots.shape[-1]])
    return g.cast(_sytrs(g, ld, piv, b), g.out_dtype(0))
