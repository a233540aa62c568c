"""Matrix factorisations and solvers for small static matrices (LU, Cholesky, QR, LDL, triangular
solves, det/slogdet, inverse, matrix_exp).

tract has no linear-algebra primitives, so each factorisation is unrolled over the matrix
size ``n`` (static, at most ``MAX_N``). Every step works on whole rows or columns of the
last two axes (slice/concat/matmul), so leading batch axes of any size, even symbolic, cost
nothing extra and the op count grows linearly with ``n``. The arithmetic runs in float64
(f16/f32 inputs are cast up and the results cast back): LAPACK's f32 results agree with the
exact ones to ~1e-6 on the well-conditioned matrices PyTorch's results are defined for, and
an f32 lowering with another operation order would not.

Pivoting follows LAPACK's ``getrf``: the row with the largest ``|value|`` in the column,
the first on ties; a zero pivot leaves its column unscaled and sets ``info``. Householder
reflectors follow ``geqrf``/``larfg`` (``beta = -sign(alpha) * norm``), so Q and R carry
LAPACK's signs. Rows are swapped with ``select`` masks (exact, NaN-safe), never with a
permutation-matrix product.
"""

from __future__ import annotations

import math

import torch

from op_mappings.linalg import matmul_nd
from op_mappings.math_unary import select
from t2n.builder import broadcast_shapes
from t2n.registry import aten

MAX_N = 16  # largest matrix side unrolled (op count ~ 10-20 ops per row/column step)
WORK = torch.float64


# ---------------------------------------------------------------------------- checks/helpers
def _check(g, x, what: str = "self", square: bool = False, shorter_side: bool = False,
           unrolled: str = "the factorisation"):
    """The static matrix sides of ``x`` (m, n), or a clear refusal. The limit applies to
    the longer side, or to the shorter one when only that is unrolled."""
    if x.rank < 2:
        raise g.error(f"{what}: expected a matrix (rank >= 2), got rank {x.rank}")
    if not x.dtype.is_floating_point:
        raise g.error(f"{what}: {x.dtype} matrices are not supported (floating point only)")
    m, n = x.shape[-2], x.shape[-1]
    if not (isinstance(m, int) and isinstance(n, int)):
        raise g.error(f"{what}: the matrix sides must be static (got {m} x {n}); "
                      f"{unrolled} is unrolled over them")
    if shorter_side and min(m, n) > MAX_N:
        raise g.error(f"{what}: matrices whose shorter side exceeds {MAX_N} are not "
                      f"supported (got {m} x {n}): {unrolled} is unrolled over it")
    if not shorter_side and max(m, n) > MAX_N:
        raise g.error(f"{what}: matrices larger than {MAX_N} x {MAX_N} are not supported "
                      f"(got {m} x {n}): {unrolled} is unrolled over the matrix size")
    if square and m != n:
        raise g.error(f"{what}: expected square matrices, got {m} x {n}")
    return m, n


def _empty(shape) -> bool:
    return any(isinstance(d, int) and d == 0 for d in shape)


def _fill(g, i: int, value=0):
    """Output ``i`` of the node filled with ``value`` (for empty results)."""
    shape, dtype = list(g.out_shape(i)), g.out_dtype(i)
    return g.broadcast_to(g.scalar(value, dtype), shape)


def _work(g, x):
    return g.cast(x, WORK)


def _rows(g, x, a, b):
    return g.slice(x, x.rank - 2, a, b)


def _cols(g, x, a, b):
    return g.slice(x, x.rank - 1, a, b)


def _at(g, x, i, j):
    """``x[..., i:i+1, j:j+1]``."""
    return _cols(g, _rows(g, x, i, i + 1), j, j + 1)


def _vcat(g, parts):
    parts = [p for p in parts if p is not None and p.shape[-2] != 0]
    return g.concat(parts, parts[0].rank - 2)


def _hcat(g, parts):
    parts = [p for p in parts if p is not None and p.shape[-1] != 0]
    return g.concat(parts, parts[0].rank - 1)


def _mT(g, x):
    perm = list(range(x.rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return g.transpose(x, perm)


def _bool(g, kind, a, b):
    return g.binary(kind, a, b, a.dtype if hasattr(a, "dtype") else WORK, out_dtype=torch.bool)


def _mul(g, a, b):
    return g.binary("mul", a, b, WORK)


def _sub(g, a, b):
    return g.binary("sub", a, b, WORK)


def _div(g, a, b):
    return g.binary("div", a, b, WORK)


def _eye(g, m, n):
    return g.const(torch.eye(m, n, dtype=WORK))


def _batch_bcast(g, x, batch):
    return g.broadcast_to(x, list(batch) + list(x.shape[-2:]))


def _tri_mask(g, m, n, upper: bool, diagonal: int = 0):
    ones = torch.ones(m, n, dtype=torch.bool)
    return g.const(torch.triu(ones, diagonal) if upper else torch.tril(ones, diagonal))


def _swap_rows(g, x, i: int, p):
    """``x`` with rows ``i`` and ``p`` swapped (``p``: i64 ``[..., 1, 1]``, runtime)."""
    m = x.shape[-2]
    r = x.rank - 2
    ar = g.const(torch.arange(m).reshape(m, 1))
    hit = g.binary("eq", ar, p, torch.int64, out_dtype=torch.bool)
    row_p = g.reduce("sum_reduce", select(g, hit, x, 0.0), [r], keepdim=True)
    row_i = _rows(g, x, i, i + 1)
    x = select(g, hit, row_i, x)
    return _vcat(g, [_rows(g, x, 0, i), row_p, _rows(g, x, i + 1, m)])


# ---------------------------------------------------------------------------- LU (getrf)
def _getrf(g, a):
    """LAPACK ``getrf`` on ``a`` (float64 ``[..., m, n]``): (LU, 0-based pivots as i64
    ``[..., 1, 1]`` per step, info as i64 ``[..., 1, 1]``: 1-based first zero pivot or 0)."""
    m, n = a.shape[-2:]
    r = a.rank - 2
    pivots, info = [], None
    for j in range(min(m, n)):
        col = _cols(g, _rows(g, a, j, m), j, j + 1)
        shape = list(col.shape[:-2]) + [1, 1]
        p = g.op("argmax_reduce", g.unary("abs", col), axes=[r], out_dtype=torch.int64,
                 out_shape=shape)
        if j:
            p = g.binary("add", p, j, torch.int64)
        pivots.append(p)
        a = _swap_rows(g, a, j, p)
        row = _rows(g, a, j, j + 1)
        d = _cols(g, row, j, j + 1)
        zero = _bool(g, "eq", d, g.scalar(0.0, WORK))
        step = select(g, zero, g.scalar(j + 1, torch.int64), g.scalar(0, torch.int64))
        info = step if info is None else select(
            g, _bool(g, "eq", info, g.scalar(0, torch.int64)), step, info)
        if j + 1 < m:
            rest = _rows(g, a, j + 1, m)
            colj = _cols(g, rest, j, j + 1)
            # LAPACK scales by the reciprocal, and leaves a zero pivot's column as it is
            lcol = select(g, zero, colj, _mul(g, colj, g.unary("recip", d)))
            right = _cols(g, rest, j + 1, n)
            if j + 1 < n:
                right = _sub(g, right, _mul(g, lcol, _cols(g, row, j + 1, n)))
            rest = _hcat(g, [_cols(g, rest, 0, j), lcol, right])
            a = _vcat(g, [_rows(g, a, 0, j), row, rest])
    return a, pivots, info


def _pivots_out(g, pivots):
    """The 0-based per-step pivots as PyTorch's 1-based int32 ``[..., k]``."""
    one_based = [g.binary("add", g.squeeze(p, [p.rank - 1]), 1, torch.int64) for p in pivots]
    v = g.concat(one_based, one_based[0].rank - 1)
    return g.cast(v, torch.int32)


def _pivots_in(g, pivots, k):
    """Runtime 1-based pivots ``[..., k]`` as 0-based i64 ``[..., 1, 1]`` per step."""
    p = g.binary("sub", g.cast(pivots, torch.int64), 1, torch.int64)
    out = []
    for j in range(k):
        pj = g.slice(p, p.rank - 1, j, j + 1)
        out.append(g.unsqueeze(pj, [pj.rank]))
    return out


def _permutation(g, pivots, m, batch):
    """P with ``A = P @ L @ U`` (the row swaps applied to the identity, transposed)."""
    e = _batch_bcast(g, _eye(g, m, m), batch)
    for j, p in enumerate(pivots):
        e = _swap_rows(g, e, j, p)
    return _mT(g, e)


def _info_out(g, info, batch):
    if info is None:
        return g.broadcast_to(g.scalar(0, torch.int32), list(batch))
    return g.cast(g.squeeze(info, [info.rank - 2, info.rank - 1]), torch.int32)


def _lu_factor(g, A, pivot):
    if not pivot:
        raise g.error("pivot: LU without pivoting is not supported (PyTorch has it on CUDA only)")
    _check(g, A, "A")
    return _getrf(g, _work(g, A))


@aten("linalg_lu_factor")
def linalg_lu_factor(g, A, pivot=True):
    _check(g, A, "A")
    if _empty(A.shape):
        return _fill(g, 0), _fill(g, 1, 1)
    lu, piv, _ = _lu_factor(g, A, pivot)
    return g.cast(lu, A.dtype), _pivots_out(g, piv)


@aten("linalg_lu_factor_ex", "_lu_with_info")
def linalg_lu_factor_ex(g, A, pivot=True, check_errors=False):
    """``check_errors`` raises in PyTorch on a singular input: the exported graph returns
    the factorisation and ``info`` instead (it cannot raise)."""
    _check(g, A, "A")
    if _empty(A.shape):
        return _fill(g, 0), _fill(g, 1, 1), _fill(g, 2)
    lu, piv, info = _lu_factor(g, A, pivot)
    return g.cast(lu, A.dtype), _pivots_out(g, piv), _info_out(g, info, A.shape[:-2])


def _unpack_lu(g, lu, m, n):
    k = min(m, n)
    ll = select(g, _tri_mask(g, m, k, upper=False, diagonal=-1), _cols(g, lu, 0, k), 0.0)
    ll = g.binary("add", ll, _eye(g, m, k), lu.dtype)
    uu = select(g, _tri_mask(g, k, n, upper=True), _rows(g, lu, 0, k), 0.0)
    return ll, uu


@aten("linalg_lu")
def linalg_lu(g, A, pivot=True):
    m, n = _check(g, A, "A")
    if _empty(A.shape):
        return tuple(_fill(g, i) if i else _batch_eye_out(g, A, m) for i in range(3))
    lu, piv, _ = _lu_factor(g, A, pivot)
    ll, uu = _unpack_lu(g, lu, m, n)
    p = _permutation(g, piv, m, A.shape[:-2])
    return g.cast(p, A.dtype), g.cast(ll, A.dtype), g.cast(uu, A.dtype)


def _batch_eye_out(g, A, m):
    """P of an LU with no steps: the identity (or empty)."""
    if _empty(g.out_shape(0)):
        return _fill(g, 0)
    return g.cast(_batch_bcast(g, _eye(g, m, m), A.shape[:-2]), A.dtype)


@aten("lu_unpack")
def lu_unpack(g, LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    m, n = _check(g, LU_data, "LU_data")
    k = min(m, n)
    outs = [None, None, None]
    if unpack_pivots:
        if _empty(g.out_shape(0)):
            outs[0] = _fill(g, 0)
        else:
            piv = _pivots_in(g, LU_pivots, k) if k else []
            outs[0] = g.cast(_permutation(g, piv, m, LU_data.shape[:-2]), LU_data.dtype)
    else:
        outs[0] = _fill(g, 0)
    if unpack_data and not _empty(LU_data.shape):
        ll, uu = _unpack_lu(g, LU_data, m, n)
        outs[1], outs[2] = ll, uu
    else:
        outs[1], outs[2] = _fill(g, 1), _fill(g, 2)
    return tuple(outs)


# ---------------------------------------------------------------------------- determinants
def _diag_and_sign(g, A):
    """The LU diagonal entries (``[..., 1, 1]`` each) and the permutation's sign (+-1.)."""
    n, _ = _check(g, A, "A", square=True)
    lu, piv, _ = _getrf(g, _work(g, A))
    diag = [_at(g, lu, j, j) for j in range(n)]
    sign = None
    for j, p in enumerate(piv):
        s = select(g, _bool(g, "eq", p, g.scalar(j, torch.int64)), g.scalar(1.0, WORK),
                   g.scalar(-1.0, WORK))
        sign = s if sign is None else _mul(g, sign, s)
    return diag, sign


def _squeeze2(g, x):
    return g.squeeze(x, [x.rank - 2, x.rank - 1])


@aten("linalg_det", "det", "_linalg_det")
def linalg_det(g, A):
    _check(g, A, "A", square=True)
    if _empty(A.shape):
        return _fill(g, 0, 1.0)
    diag, sign = _diag_and_sign(g, A)
    det = sign
    for d in diag:
        det = _mul(g, det, d)
    return g.cast(_squeeze2(g, det), A.dtype)


def _slogdet(g, A):
    diag, sign = _diag_and_sign(g, A)
    logabs = None
    for d in diag:
        sign = _mul(g, sign, g.unary("sign", d))
        la = g.unary("log", g.unary("abs", d))
        logabs = la if logabs is None else g.binary("add", logabs, la, WORK)
    return _squeeze2(g, sign), _squeeze2(g, logabs)


@aten("linalg_slogdet", "slogdet")
def linalg_slogdet(g, A):
    _check(g, A, "A", square=True)
    if _empty(A.shape):
        return _fill(g, 0, 1.0), _fill(g, 1, 0.0)
    sign, logabs = _slogdet(g, A)
    return g.cast(sign, A.dtype), g.cast(logabs, A.dtype)


@aten("logdet")
def logdet(g, self):
    """PyTorch: NaN for a negative determinant, -inf for a singular matrix."""
    _check(g, self, "self", square=True)
    if _empty(self.shape):
        return _fill(g, 0, 0.0)
    sign, logabs = _slogdet(g, self)
    neg = _bool(g, "lt", sign, g.scalar(0.0, WORK))
    return g.cast(select(g, neg, g.scalar(float("nan"), WORK), logabs), self.dtype)


# ---------------------------------------------------------------------------- triangular
def _trsm(g, t, b, lower: bool, unit: bool):
    """Solve ``t @ x = b`` (float64; ``t`` triangular ``[..., n, n]``, only its ``lower`` or
    upper triangle read; ``b`` ``[..., n, k]``, already broadcast to the batch)."""
    n = t.shape[-1]
    order = range(n) if lower else range(n - 1, -1, -1)
    done = None  # solved rows, in row order
    for i in order:
        bi = _rows(g, b, i, i + 1)
        if done is not None:
            coef = _cols(g, _rows(g, t, i, i + 1), 0, i) if lower else \
                _cols(g, _rows(g, t, i, i + 1), i + 1, n)
            bi = _sub(g, bi, matmul_nd(g, coef, done))
        if not unit:
            bi = _div(g, bi, _at(g, t, i, i))
        if done is None:
            done = bi
        else:
            done = _vcat(g, [done, bi] if lower else [bi, done])
    return done


def _broadcast_pair(g, a, b):
    """Broadcast the batch axes of two matrices against each other."""
    batch = list(broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    return _batch_bcast(g, a, batch), _batch_bcast(g, b, batch), batch


def _solve_tri(g, a, b, upper, left, unit):
    """``a @ x = b`` (left) or ``x @ a = b``, float64, batch broadcast."""
    a, b, _ = _broadcast_pair(g, a, b)
    if left:
        return _trsm(g, a, b, lower=not upper, unit=unit)
    x = _trsm(g, _mT(g, a), _mT(g, b), lower=upper, unit=unit)
    return _mT(g, x)


@aten("linalg_solve_triangular")
def linalg_solve_triangular(g, self, B, upper, left=True, unitriangular=False):
    _check(g, self, "A", square=True)
    _check(g, B, "B")
    if _empty(g.out_shape(0)):
        return _fill(g, 0)
    x = _solve_tri(g, _work(g, self), _work(g, B), upper, left, unitriangular)
    return g.cast(x, g.out_dtype(0))


@aten("triangular_solve")
def triangular_solve(g, self, A, upper=True, transpose=False, unitriangular=False):
    """``A @ X = self`` (or ``A^T @ X = self``); returns (X, a copy of A)."""
    _check(g, A, "A", square=True)
    _check(g, self, "self")
    batch = list(broadcast_shapes(A.shape[:-2], self.shape[:-2]))
    coefficient = _fill(g, 1) if _empty(g.out_shape(1)) else _batch_bcast(g, A, batch)
    if _empty(g.out_shape(0)):
        return _fill(g, 0), coefficient
    a = _work(g, A)
    if transpose:
        a, upper = _mT(g, a), not upper
    x = _solve_tri(g, a, _work(g, self), upper, True, unitriangular)
    return g.cast(x, g.out_dtype(0)), coefficient


# ---------------------------------------------------------------------------- LU solves
def _apply_swaps(g, x, pivots, reverse=False):
    steps = list(enumerate(pivots))
    for j, p in (reversed(steps) if reverse else steps):
        x = _swap_rows(g, x, j, p)
    return x


def _lu_solve(g, lu, pivots, b, adjoint=False):
    """``A x = b`` (or ``A^T x = b``) for ``A = P L U`` (float64, batch broadcast)."""
    if not adjoint:
        y = _apply_swaps(g, b, pivots)
        y = _trsm(g, lu, y, lower=True, unit=True)
        return _trsm(g, lu, y, lower=False, unit=False)
    lt = _mT(g, lu)
    y = _trsm(g, lt, b, lower=True, unit=False)
    y = _trsm(g, lt, y, lower=False, unit=True)
    return _apply_swaps(g, y, pivots, reverse=True)


@aten("linalg_lu_solve")
def linalg_lu_solve(g, LU, pivots, B, left=True, adjoint=False):
    n, _ = _check(g, LU, "LU", square=True)
    _check(g, B, "B")
    if _empty(g.out_shape(0)):
        return _fill(g, 0)
    lu, b = _work(g, LU), _work(g, B)
    batch = list(broadcast_shapes(LU.shape[:-2], B.shape[:-2]))
    lu, b = _batch_bcast(g, lu, batch), _batch_bcast(g, b, batch)
    piv = _pivots_in(g, pivots, n)
    if left:
        x = _lu_solve(g, lu, piv, b, adjoint)
    else:  # x A = b  <=>  A^T x^T = b^T
        x = _mT(g, _lu_solve(g, lu, piv, _mT(g, b), not adjoint))
    return g.cast(x, g.out_dtype(0))


@aten("lu_solve")
def lu_solve(g, self, LU_data, LU_pivots):
    return linalg_lu_solve(g, LU_data, LU_pivots, self)


def _solve(g, A, B, left=True):
    """(x, info) of ``A x = B`` with B a matrix ``[..., n, k]`` (float64)."""
    a, b, batch = _broadcast_pair(g, _work(g, A), _work(g, B))
    if not left:
        a, b = _mT(g, a), _mT(g, b)
    lu, piv, info = _getrf(g, a)
    x = _lu_solve(g, lu, piv, b)
    return (x if left else _mT(g, x)), info, batch


def _is_vector_rhs(A, B):
    return B.rank == 1 or (B.rank == A.rank - 1 and list(B.shape) == list(A.shape[:-1]))


def _linalg_solve(g, A, B, left, with_info):
    _check(g, A, "A", square=True)
    vector = _is_vector_rhs(A, B)
    if vector:
        B = g.unsqueeze(B, [B.rank])
    _check(g, B, "B")
    if _empty(g.out_shape(0)):
        return _fill(g, 0), (_fill(g, 1) if with_info else None)
    x, info, _ = _solve(g, A, B, left)
    if vector:
        x = g.squeeze(x, [x.rank - 1])
    return g.cast(x, g.out_dtype(0)), _info_out(g, info, list(A.shape[:-2]))


@aten("linalg_solve")
def linalg_solve(g, A, B, left=True):
    return _linalg_solve(g, A, B, left, False)[0]


@aten("linalg_solve_ex")
def linalg_solve_ex(g, A, B, left=True, check_errors=False):
    return _linalg_solve(g, A, B, left, True)


def _inv(g, A):
    n, _ = _check(g, A, "A", square=True)
    eye = _batch_bcast(g, _eye(g, n, n), A.shape[:-2])
    x, info, _ = _solve(g, A, eye)
    return g.cast(x, A.dtype), info


@aten("linalg_inv_ex")
def linalg_inv_ex(g, A, check_errors=False):
    _check(g, A, "A", square=True)
    if _empty(A.shape):
        return _fill(g, 0), _fill(g, 1)
    x, info = _inv(g, A)
    return x, _info_out(g, info, A.shape[:-2])


@aten("linalg_inv", "inverse")
def linalg_inv(g, A):
    _check(g, A, "A", square=True)
    if _empty(A.shape):
        return _fill(g, 0)
    return _inv(g, A)[0]


# ---------------------------------------------------------------------------- Cholesky
def _potrf(g, a):
    """LAPACK ``potrf`` (lower) on float64 ``a``, reading its lower triangle: (L, info), info
    the 1-based order of the first leading minor that is not positive definite, or 0.
    Columns after a failure are not LAPACK's (PyTorch leaves them unspecified)."""
    n = a.shape[-1]
    zeros = g.zeros_like(_cols(g, a, 0, 1))
    cols, info = [], None
    for j in range(n):
        c = _rows(g, _cols(g, a, j, j + 1), j, n)  # [..., n-j, 1]
        if cols:
            lp = _hcat(g, cols)  # [..., n, j]
            c = _sub(g, c, matmul_nd(g, _rows(g, lp, j, n), _rows(g, lp, j, j + 1),
                                     transpose_b=True))
        d = _rows(g, c, 0, 1)
        bad = g.op("not", _bool(g, "gt", d, g.scalar(0.0, WORK)), out_dtype=torch.bool)
        step = select(g, bad, g.scalar(j + 1, torch.int64), g.scalar(0, torch.int64))
        info = step if info is None else select(
            g, _bool(g, "eq", info, g.scalar(0, torch.int64)), step, info)
        ljj = g.unary("sqrt", d)
        below = _div(g, _rows(g, c, 1, n - j), ljj) if j + 1 < n else None
        cols.append(_vcat(g, [_rows(g, zeros, 0, j), ljj, below]))
    return _hcat(g, cols), info


def _cholesky(g, A, upper):
    """(L or U, info) in float64; ``upper`` reads the upper triangle (A = U^H U)."""
    a = _work(g, A)
    if upper:
        ll, info = _potrf(g, _mT(g, a))
        return _mT(g, ll), info
    return _potrf(g, a)


@aten("linalg_cholesky_ex")
def linalg_cholesky_ex(g, A, upper=False, check_errors=False):
    _check(g, A, "A", square=True)
    if _empty(A.shape):
        return _fill(g, 0), _fill(g, 1)
    ll, info = _cholesky(g, A, upper)
    return g.cast(ll, A.dtype), _info_out(g, info, A.shape[:-2])


@aten("linalg_cholesky", "cholesky")
def linalg_cholesky(g, A, upper=False):
    _check(g, A, "A", square=True)
    if _empty(A.shape):
        return _fill(g, 0)
    return g.cast(_cholesky(g, A, upper)[0], A.dtype)


def _chol_solve(g, b, f, upper):
    """``(F F^H) x = b`` for lower ``F`` (or ``(F^H F) x = b`` for upper ``F``)."""
    ll = _mT(g, f) if upper else f
    y = _trsm(g, ll, b, lower=True, unit=False)
    return _trsm(g, _mT(g, ll), y, lower=False, unit=False)


@aten("cholesky_solve")
def cholesky_solve(g, self, input2, upper=False):
    _check(g, input2, "input2", square=True)
    _check(g, self, "self")
    if _empty(g.out_shape(0)):
        return _fill(g, 0)
    f, b, _ = _broadcast_pair(g, _work(g, input2), _work(g, self))
    return g.cast(_chol_solve(g, b, f, upper), g.out_dtype(0))


@aten("cholesky_inverse")
def cholesky_inverse(g, self, upper=False):
    n, _ = _check(g, self, "self", square=True)
    if _empty(self.shape):
        return _fill(g, 0)
    f = _work(g, self)
    eye = _batch_bcast(g, _eye(g, n, n), self.shape[:-2])
    return g.cast(_chol_solve(g, eye, f, upper), self.dtype)


# ---------------------------------------------------------------------------- Householder QR
def _geqrf(g, a):
    """LAPACK ``geqrf`` (unblocked ``geqr2``/``larfg``) on float64 ``a``: (reflectors and R
    packed as LAPACK does, taus as ``[..., 1, 1]`` per step)."""
    m, n = a.shape[-2:]
    r = a.rank - 2
    taus = []
    for j in range(min(m, n)):
        x = _rows(g, _cols(g, a, j, j + 1), j, m)
        if m - j == 1:  # larfg on one element: H = I
            taus.append(g.zeros_like(x))
            continue
        alpha, v = _rows(g, x, 0, 1), _rows(g, x, 1, m - j)
        xn2 = g.reduce("sum_reduce", _mul(g, v, v), [r], keepdim=True)
        norm = g.unary("sqrt", g.binary("add", _mul(g, alpha, alpha), xn2, WORK))
        nonneg = _bool(g, "ge", alpha, g.scalar(0.0, WORK))
        beta = select(g, nonneg, g.unary("neg", norm), norm)
        moved = _bool(g, "ne", xn2, g.scalar(0.0, WORK))  # xnorm = 0: tau = 0, H = I
        tau = select(g, moved, _div(g, _sub(g, beta, alpha), beta), 0.0)
        v = select(g, moved, _mul(g, v, g.unary("recip", _sub(g, alpha, beta))), v)
        taus.append(tau)
        col = _vcat(g, [select(g, moved, beta, alpha), v])
        right = _rows(g, _cols(g, a, j + 1, n), j, m)
        if j + 1 < n:
            right = _reflect(g, right, _vcat(g, [g.zeros_like(alpha), v]), tau, 0)
        rest = _hcat(g, [_rows(g, _cols(g, a, 0, j), j, m), col, right])
        a = _vcat(g, [_rows(g, a, 0, j), rest])
    return a, taus


def _reflect(g, c, w, tau, i):
    """``H @ c`` for ``H = I - tau w w^T`` with ``w = [0 .. 0, 1, w[i+1:]]`` (rows >= i
    only; ``w[i]`` is taken as 1 whatever it holds)."""
    m = c.shape[-2]
    r = c.rank - 2
    ci = _rows(g, c, i, m)
    wi = _rows(g, w, i, m)
    first = g.const(torch.arange(m - i).reshape(m - i, 1) == 0)
    wi = select(g, first, 1.0, wi, dtype=WORK)
    wtc = g.reduce("sum_reduce", _mul(g, wi, ci), [r], keepdim=True)
    ci = _sub(g, ci, _mul(g, _mul(g, tau, wi), wtc))
    return _vcat(g, [_rows(g, c, 0, i), ci])


def _apply_q(g, refl, taus, c, transpose):
    """``Q @ c`` (or ``Q^T @ c``) for ``Q = H_0 H_1 ... H_{k-1}`` held as reflectors."""
    order = list(range(len(taus)))
    for i in (order if transpose else reversed(order)):
        c = _reflect(g, c, _cols(g, refl, i, i + 1), taus[i], i)
    return c


def _taus_in(g, tau, k):
    out = []
    for i in range(k):
        t = g.slice(tau, tau.rank - 1, i, i + 1)
        out.append(g.unsqueeze(t, [t.rank]))
    return out


@aten("geqrf")
def geqrf(g, self):
    _check(g, self, "self")
    if _empty(self.shape):
        return _fill(g, 0), _fill(g, 1)
    a, taus = _geqrf(g, _work(g, self))
    tau = g.concat([g.squeeze(t, [t.rank - 1]) for t in taus], taus[0].rank - 2)
    return g.cast(a, self.dtype), g.cast(tau, self.dtype)


@aten("linalg_householder_product", "orgqr")
def linalg_householder_product(g, input, tau):
    m, n = _check(g, input, "input")
    k = tau.shape[-1]
    if not isinstance(k, int):
        raise g.error("tau: its length must be static")
    if _empty(g.out_shape(0)):
        return _fill(g, 0)
    refl = _work(g, input)
    batch = list(broadcast_shapes(input.shape[:-2], tau.shape[:-1]))
    q = _batch_bcast(g, _eye(g, m, n), batch)
    q = _apply_q(g, refl, _taus_in(g, _work(g, tau), k), q, transpose=False)
    return g.cast(q, g.out_dtype(0))


@aten("ormqr")
def ormqr(g, self, input2, input3, left=True, transpose=False):
    """``Q @ C``, ``Q^T @ C``, ``C @ Q`` or ``C @ Q^T`` with Q from geqrf's reflectors."""
    _check(g, self, "self")
    _check(g, input3, "input3")
    k = input2.shape[-1]
    if not isinstance(k, int):
        raise g.error("input2: tau's length must be static")
    if _empty(g.out_shape(0)):
        return _fill(g, 0)
    refl, c = _work(g, self), _work(g, input3)
    batch = list(broadcast_shapes(self.shape[:-2], input3.shape[:-2], input2.shape[:-1]))
    refl, c = _batch_bcast(g, refl, batch), _batch_bcast(g, c, batch)
    taus = _taus_in(g, _work(g, input2), k)
    if left:
        out = _apply_q(g, refl, taus, c, transpose)
    else:  # C Q = (Q^T C^T)^T
        out = _mT(g, _apply_q(g, refl, taus, _mT(g, c), not transpose))
    return g.cast(out, g.out_dtype(0))


def _qr(g, A, mode):
    m, n = _check(g, A, "A")
    if mode not in ("reduced", "complete", "r"):
        raise g.error(f"mode: unknown mode {mode!r}")
    k = min(m, n)
    q_cols = m if mode == "complete" else k
    r_rows = m if mode == "complete" else k
    if _empty(A.shape):
        if mode == "r" or _empty(g.out_shape(0)):
            q = _fill(g, 0)
        else:  # no reflector: Q is the identity
            q = g.cast(_batch_bcast(g, _eye(g, m, q_cols), A.shape[:-2]), A.dtype)
        return q, _fill(g, 1)
    a, taus = _geqrf(g, _work(g, A))
    rr = select(g, _tri_mask(g, r_rows, n, upper=True),
                _rows(g, a, 0, r_rows), 0.0)
    if mode == "r":
        return _fill(g, 0), g.cast(rr, A.dtype)
    q = _batch_bcast(g, _eye(g, m, q_cols), A.shape[:-2])
    q = _apply_q(g, a, taus, q, transpose=False)
    return g.cast(q, A.dtype), g.cast(rr, A.dtype)


@aten("linalg_qr")
def linalg_qr(g, A, mode="reduced"):
    return _qr(g, A, mode)


@aten("qr")
def qr(g, self, some=True):
    return _qr(g, self, "reduced" if some else "complete")


# ---------------------------------------------------------------------------- tensor inverse/solve
def _static_shape(g, x, what):
    if not all(isinstance(d, int) for d in x.shape):
        raise g.error(f"{what}: the shape must be static (got {list(x.shape)})")
    return list(x.shape)


@aten("linalg_tensorinv")
def linalg_tensorinv(g, self, ind=2):
    shape = _static_shape(g, self, "self")
    if ind <= 0:
        raise g.error(f"ind: expected a positive integer, got {ind}")
    n = math.prod(shape[:ind])
    if math.prod(shape[ind:]) != n:
        raise g.error(f"self: prod(shape[:ind]) != prod(shape[ind:]) for shape {shape}")
    if n == 0:
        return _fill(g, 0)
    a = g.reshape(self, [n, n])
    _check(g, a, "self (as an n x n matrix)", square=True)
    return g.reshape(_inv(g, a)[0], shape[ind:] + shape[:ind])


@aten("linalg_tensorsolve")
def linalg_tensorsolve(g, self, other, dims=None):
    shape = _static_shape(g, self, "self")
    bshape = _static_shape(g, other, "other")
    a = self
    if dims:
        dims = [d % self.rank for d in dims]
        perm = [d for d in range(self.rank) if d not in dims] + dims
        a = g.transpose(a, perm)
        shape = [shape[p] for p in perm]
    rshape = shape[other.rank:]
    n, nb = math.prod(rshape), math.prod(bshape)
    if n != nb:
        raise g.error(f"self: prod(result shape {rshape}) != prod(other.shape {bshape})")
    if n == 0:
        return _fill(g, 0)
    a = g.reshape(a, [nb, n])
    _check(g, a, "self (as an n x n matrix)", square=True)
    x, _, _ = _solve(g, a, g.reshape(other, [nb, 1]))
    return g.cast(g.reshape(x, rshape), g.out_dtype(0))


# ---------------------------------------------------------------------------- matrix exponential
TAYLOR_ORDER = 18  # on a matrix of 1-norm <= 1: truncation error < 1/19! ~ 1e-17
MAX_SQUARINGS = 64  # 1-norms up to 2^64; beyond, the result is NaN (never a wrong number)


@aten("linalg_matrix_exp", "matrix_exp")
def linalg_matrix_exp(g, self):
    """float64 only. Scaling and squaring: ``s = ceil(log2(|A|_1))`` chosen at run time,
    a Taylor polynomial of order 18 of ``A / 2^s``, then ``s`` squarings, each applied
    through ``select(k < s, ...)`` so that the graph stays static."""
    n, _ = _check(g, self, "self", square=True)
    if self.dtype != torch.float64:
        raise g.error(f"self: {self.dtype} is not supported, only float64: PyTorch's "
                      "reduced-precision result carries rounding errors of about "
                      "eps * |exp(A)| that another evaluation order does not reproduce on the "
                      "small entries (export the model in float64)")
    if _empty(self.shape):
        return _fill(g, 0)
    a = _work(g, self)
    r = a.rank - 2
    colsum = g.reduce("sum_reduce", g.unary("abs", a), [r], keepdim=True)
    norm = g.reduce("max_reduce", colsum, [r + 1], keepdim=True)  # [..., 1, 1]
    tiny = g.scalar(2.0 ** -60, WORK)
    s = g.unary("ceil", g.binary("div", g.unary("log", g.binary("max", norm, tiny, WORK)),
                                 g.scalar(math.log(2.0), WORK), WORK))
    s = g.binary("max", g.binary("min", s, g.scalar(float(MAX_SQUARINGS), WORK), WORK),
                 g.scalar(0.0, WORK), WORK)
    x = _mul(g, a, g.binary("pow", g.scalar(2.0, WORK), g.unary("neg", s), WORK))
    eye = _eye(g, n, n)
    p = g.binary("add", eye, _mul(g, x, 1.0 / TAYLOR_ORDER), WORK)
    for k in range(TAYLOR_ORDER - 1, 0, -1):
        p = g.binary("add", eye, _mul(g, matmul_nd(g, x, p), 1.0 / k), WORK)
    for k in range(MAX_SQUARINGS):
        p = select(g, _bool(g, "lt", g.scalar(float(k), WORK), s), matmul_nd(g, p, p), p)
    too_big = _bool(g, "gt", norm, g.scalar(2.0 ** MAX_SQUARINGS, WORK))
    p = select(g, too_big, g.scalar(float("nan"), WORK), p)
    return g.cast(p, self.dtype)


# ---------------------------------------------------------------------------- LDL (Bunch-Kaufman)
BK_ALPHA = (1.0 + math.sqrt(17.0)) / 8.0  # LAPACK sytf2's pivot threshold


def _sym_swap(g, t, a: int, p):
    """Symmetric interchange of rows and columns ``a`` (static) and ``p`` (runtime)."""
    return _mT(g, _swap_rows(g, _mT(g, _swap_rows(g, t, a, p)), a, p))


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
    return _bool(g, "ge", a, b)


def _i64(g, v):
    return g.scalar(v, torch.int64)


def _trail(g, t, k, block):
    """``t`` with its trailing block ``t[k:, k:]`` replaced by ``block``."""
    n = t.shape[-1]
    return _vcat(g, [_rows(g, t, 0, k), _hcat(g, [_cols(g, _rows(g, t, k, n), 0, k), block])])


def _sytf2_step(g, t, k):
    """One position of LAPACK ``sytf2`` (lower) on the full symmetric ``t``: both the 1x1
    and the 2x2 outcome, and the decision between them."""
    n = t.shape[-1]
    r = t.rank - 2
    akk = _at(g, t, k, k)
    absakk = g.unary("abs", akk)
    out = {}
    if k == n - 1:
        out["zero"] = _bool(g, "eq", absakk, g.scalar(0.0, WORK))
        out["two"], kp1 = None, None
    else:
        below = g.unary("abs", _rows(g, _cols(g, t, k, k + 1), k + 1, n))
        imax = g.binary("add", g.op("argmax_reduce", below, axes=[r], out_dtype=torch.int64,
                                    out_shape=list(below.shape[:-2]) + [1, 1]), k + 1,
                        torch.int64)
        colmax = g.reduce("max_reduce", below, [r], keepdim=True)
        cim = g.unary("abs", _col_at(g, t, imax))
        ar = g.const(torch.arange(n).reshape(n, 1))
        at_imax = g.binary("eq", ar, imax, torch.int64, out_dtype=torch.bool)
        skip = _or(g, g.const(torch.arange(n).reshape(n, 1) < k), at_imax)
        rowmax = g.reduce("max_reduce", select(g, skip, 0.0, cim, dtype=WORK), [r], keepdim=True)
        aimax = g.reduce("sum_reduce", select(g, at_imax, cim, 0.0), [r], keepdim=True)
        zero = _bool(g, "eq", g.binary("max", absakk, colmax, WORK), g.scalar(0.0, WORK))
        c1 = _ge(g, absakk, _mul(g, colmax, BK_ALPHA))
        c2 = _ge(g, absakk, _mul(g, _mul(g, colmax, BK_ALPHA), _div(g, colmax, rowmax)))
        c3 = _ge(g, aimax, _mul(g, rowmax, BK_ALPHA))
        keep = _or(g, _or(g, zero, c1), c2)
        out["zero"], out["two"] = zero, _not(g, _or(g, keep, c3))
        kp1 = select(g, keep, _i64(g, k), imax)
        out["imax"] = imax
    # 1x1 pivot at k after swapping k <-> kp1
    ta = _sym_swap(g, t, k, kp1) if kp1 is not None else t
    d = _at(g, ta, k, k)
    x = _rows(g, _cols(g, ta, k, k + 1), k + 1, n)
    if k + 1 < n:
        d11 = g.unary("recip", d)
        trail = _rows(g, _cols(g, ta, k + 1, n), k + 1, n)
        upd = _sub(g, trail, _mul(g, x, _mT(g, _mul(g, d11, x))))
        ta = _trail(g, ta, k + 1, select(g, out["zero"], trail, upd))
        x = select(g, out["zero"], x, _mul(g, x, d11))
    out["ta"], out["col_a"] = ta, _vcat(g, [d, x])
    out["piv_a"] = g.binary("add", kp1, 1, torch.int64) if kp1 is not None else _i64(g, k + 1)
    if out["two"] is None:
        return out
    # 2x2 pivot at (k, k+1) after swapping k+1 <-> imax
    tb = _sym_swap(g, t, k + 1, out["imax"])
    d21 = _at(g, tb, k + 1, k)
    e11 = _div(g, _at(g, tb, k + 1, k + 1), d21)
    e22 = _div(g, _at(g, tb, k, k), d21)
    tt = g.unary("recip", _sub(g, _mul(g, e11, e22), 1.0))
    f21 = _div(g, tt, d21)
    col_k = [_at(g, tb, k, k), d21]
    col_k1 = [_at(g, tb, k + 1, k + 1)]
    if k + 2 < n:
        ck = _rows(g, _cols(g, tb, k, k + 1), k + 2, n)
        ck1 = _rows(g, _cols(g, tb, k + 1, k + 2), k + 2, n)
        wk = _mul(g, f21, _sub(g, _mul(g, e11, ck), ck1))
        wkp1 = _mul(g, f21, _sub(g, _mul(g, e22, ck1), ck))
        trail = _rows(g, _cols(g, tb, k + 2, n), k + 2, n)
        upd = _sub(g, _sub(g, trail, _mul(g, ck, _mT(g, wk))), _mul(g, ck1, _mT(g, wkp1)))
        tb = _trail(g, tb, k + 2, upd)
        col_k.append(wk)
        col_k1.append(wkp1)
    out["tb"], out["col_b"], out["col_b1"] = tb, _vcat(g, col_k), _vcat(g, col_k1)
    out["piv_b"] = g.binary("sub", _i64(g, -1), out["imax"], torch.int64)
    return out


def _sytrf(g, a):
    """LAPACK ``sytrf`` (lower, Bunch-Kaufman) on float64 ``a``, reading its lower triangle:
    (LD, pivots as LAPACK's 1-based signed i64 ``[..., 1, 1]`` per position, info). Whether a
    position starts a 2x2 block is known at run time only, so every position computes both
    outcomes and selects; a position taken by the previous 2x2 block keeps its results."""
    n = a.shape[-1]
    low = select(g, _tri_mask(g, n, n, upper=False), a, 0.0)
    t = g.binary("add", low, _mT(g, select(g, _tri_mask(g, n, n, upper=False, diagonal=-1),
                                           a, 0.0)), WORK)
    zeros = g.zeros_like(_cols(g, a, 0, 1))
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
        info = step if info is None else select(g, _bool(g, "eq", info, _i64(g, 0)), step, info)
        cols.append(_vcat(g, [_rows(g, zeros, 0, k), col]))
        pivs.append(g.broadcast_to(piv, list(a.shape[:-2]) + [1, 1]))
        t = tn
        consumed = two
        if two is not None:
            pending_col, pending_piv = s["col_b1"], s["piv_b"]
    return _hcat(g, cols), pivs, g.broadcast_to(info, list(a.shape[:-2]) + [1, 1])


def _ldl_factor(g, A, hermitian):
    _check(g, A, "A", square=True)
    ld, pivs, info = _sytrf(g, _work(g, A))
    piv = g.concat([g.squeeze(p, [p.rank - 1]) for p in pivs], pivs[0].rank - 2)
    return g.cast(ld, A.dtype), g.cast(piv, torch.int32), info


@aten("linalg_ldl_factor_ex")
def linalg_ldl_factor_ex(g, self, hermitian=False, check_errors=False):
    if _empty(self.shape):
        return _fill(g, 0), _fill(g, 1), _fill(g, 2)
    ld, piv, info = _ldl_factor(g, self, hermitian)
    return ld, piv, _info_out(g, info, self.shape[:-2])


@aten("linalg_ldl_factor")
def linalg_ldl_factor(g, self, hermitian=False):
    if _empty(self.shape):
        return _fill(g, 0), _fill(g, 1)
    return _ldl_factor(g, self, hermitian)[:2]


def _rowdot(g, col, rows):
    """``col^T @ rows`` as ``[..., 1, c]`` (``col`` ``[..., m, 1]``, ``rows`` ``[..., m, c]``)."""
    return g.reduce("sum_reduce", _mul(g, col, rows), [rows.rank - 2], keepdim=True)


def _set_row(g, b, i, row):
    return _vcat(g, [_rows(g, b, 0, i), row, _rows(g, b, i + 1, b.shape[-2])])


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
        col = _rows(g, _cols(g, ld, k, k + 1), k + 1, n)
        ba = _swap_rows(g, b, k, minus1[k])
        bk = _div(g, _rows(g, ba, k, k + 1), _at(g, ld, k, k))
        below = _sub(g, _rows(g, ba, k + 1, n), _mul(g, col, _rows(g, ba, k, k + 1)))
        ba = _vcat(g, [_rows(g, ba, 0, k), bk, below])
        if start[k] is None:
            b = select(g, one[k], ba, b)
            continue
        bb = _swap_rows(g, b, k + 1, flipped[k])
        r0, r1 = _rows(g, bb, k, k + 1), _rows(g, bb, k + 1, k + 2)
        if k + 2 < n:
            c0 = _rows(g, col, 1, n - k - 1)
            c1 = _rows(g, _cols(g, ld, k + 1, k + 2), k + 2, n)
            rest = _sub(g, _sub(g, _rows(g, bb, k + 2, n), _mul(g, c0, r0)), _mul(g, c1, r1))
        else:
            rest = None
        akm1k = _at(g, ld, k + 1, k)
        akm1 = _div(g, _at(g, ld, k, k), akm1k)
        ak = _div(g, _at(g, ld, k + 1, k + 1), akm1k)
        denom = _sub(g, _mul(g, akm1, ak), 1.0)
        bkm1, bk = _div(g, r0, akm1k), _div(g, r1, akm1k)
        x0 = _div(g, _sub(g, _mul(g, ak, bkm1), bk), denom)
        x1 = _div(g, _sub(g, _mul(g, akm1, bk), bkm1), denom)
        bb = _vcat(g, [_rows(g, bb, 0, k), x0, x1, rest])
        b = select(g, one[k], ba, select(g, start[k], bb, b))
    for k in range(n - 1, -1, -1):  # L^T x = y
        if k + 1 < n:
            tail = _rows(g, b, k + 1, n)
            rk = _sub(g, _rows(g, b, k, k + 1),
                      _rowdot(g, _rows(g, _cols(g, ld, k, k + 1), k + 1, n), tail))
            ba = _set_row(g, b, k, rk)
        else:
            ba = b
        bsingle = _swap_rows(g, ba, k, minus1[k])
        if second[k] is None:
            b = select(g, one[k], bsingle, b)
            continue
        if k + 1 < n:
            rkm1 = _sub(g, _rows(g, ba, k - 1, k),
                        _rowdot(g, _rows(g, _cols(g, ld, k - 1, k), k + 1, n), tail))
            bb = _set_row(g, ba, k - 1, rkm1)
        else:
            bb = ba
        bb = _swap_rows(g, bb, k, flipped[k])
        b = select(g, one[k], bsingle, select(g, second[k], bb, b))
    return b


@aten("linalg_ldl_solve")
def linalg_ldl_solve(g, LD, pivots, B, hermitian=False):
    _check(g, LD, "LD", square=True)
    _check(g, B, "B")
    if _empty(g.out_shape(0)):
        return _fill(g, 0)
    ld, b, batch = _broadcast_pair(g, _work(g, LD), _work(g, B))
    piv = g.broadcast_to(pivots, batch + [pivots.shape[-1]])
    return g.cast(_sytrs(g, ld, piv, b), g.out_dtype(0))
