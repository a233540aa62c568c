"""LU factorisation of small static matrices and what is built on it: lu_factor, lu, lu_unpack,
det/slogdet/logdet, triangular solves, lu_solve, solve, inverse, tensorinv/tensorsolve and
matrix_exp. Cholesky, QR and LDL are in ``linalg_factor.py``; the unrolled kernels they share
(getrf, trsm, geqrf, ...) in ``helpers/factorizations.py``.

tract has no linear-algebra primitives, so each factorisation is unrolled over the matrix
size ``n`` (static, at most ``MAX_N`` of ``helpers/small_matrix.py``); triangular solves of
any size loop instead above ``MAX_N`` (``helpers/trsm_loop.py``). Every step works on whole rows or columns of the
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

from t2n.mappings.helpers import factorizations as F
from t2n.mappings.helpers import small_matrix as M
from t2n.mappings.helpers.elementwise import select
from t2n.mappings.helpers.matrix import matmul_nd
from t2n.walk.builder import broadcast_shapes
from t2n.walk.registry import aten

# ---------------------------------------------------------------------------- checks/helpers


# ---------------------------------------------------------------------------- LU (getrf)


def _pivots_out(g, pivots):
    """The 0-based per-step pivots (a list, or the loop's ``[..., 1, k]``) as PyTorch's
    1-based int32 ``[..., k]``."""
    if not isinstance(pivots, list):
        v = g.binary("add", g.squeeze(pivots, [pivots.rank - 2]), 1, torch.int64)
        return g.cast(v, torch.int32)
    one_based = [g.binary("add", g.squeeze(p, [p.rank - 1]), 1, torch.int64) for p in pivots]
    v = g.concat(one_based, one_based[0].rank - 1)
    return g.cast(v, torch.int32)


def _pivots_in(g, pivots, k):
    """Runtime 1-based pivots ``[..., k]`` as 0-based i64 ``[..., 1, 1]`` per step (above
    ``MAX_N``, one ``[..., 1, k]`` for the loops)."""
    p = g.binary("sub", g.cast(pivots, torch.int64), 1, torch.int64)
    if k > M.MAX_N:
        return g.unsqueeze(p, [p.rank - 1])
    out = []
    for j in range(k):
        pj = g.slice(p, p.rank - 1, j, j + 1)
        out.append(g.unsqueeze(pj, [pj.rank]))
    return out


def _permutation(g, pivots, m, batch):
    """P with ``A = P @ L @ U`` (the row swaps applied to the identity, transposed)."""
    e = M.batch_bcast(g, M.eye(g, m, m), batch)
    return M.mT(g, F.apply_swaps(g, e, pivots))


@aten("linalg_lu_factor")
def linalg_lu_factor(g, A, pivot=True):
    M.check(g, A, "A", any_size=True)
    if M.empty(A.shape):
        return M.fill(g, 0), M.fill(g, 1, 1)
    lu, piv, _ = F.lu_factor(g, A, pivot, any_size=True)
    return g.cast(lu, A.dtype), _pivots_out(g, piv)


@aten("linalg_lu_factor_ex", "_lu_with_info")
def linalg_lu_factor_ex(g, A, pivot=True, check_errors=False):
    """``check_errors`` raises in PyTorch on a singular input: the exported graph returns
    the factorisation and ``info`` instead (it cannot raise)."""
    M.check(g, A, "A", any_size=True)
    if M.empty(A.shape):
        return M.fill(g, 0), M.fill(g, 1, 1), M.fill(g, 2)
    lu, piv, info = F.lu_factor(g, A, pivot, any_size=True)
    return g.cast(lu, A.dtype), _pivots_out(g, piv), F.info_out(g, info, A.shape[:-2])


def _unpack_lu(g, lu, m, n):
    k = min(m, n)
    ll = select(g, M.tri_mask(g, m, k, upper=False, diagonal=-1), M.cols(g, lu, 0, k), 0.0)
    ll = g.binary("add", ll, M.eye(g, m, k), lu.dtype)
    uu = select(g, M.tri_mask(g, k, n, upper=True), M.rows(g, lu, 0, k), 0.0)
    return ll, uu


@aten("linalg_lu")
def linalg_lu(g, A, pivot=True):
    m, n = M.check(g, A, "A", any_size=True)
    if M.empty(A.shape):
        return tuple(M.fill(g, i) if i else _batch_eye_out(g, A, m) for i in range(3))
    lu, piv, _ = F.lu_factor(g, A, pivot, any_size=True)
    ll, uu = _unpack_lu(g, lu, m, n)
    p = _permutation(g, piv, m, A.shape[:-2])
    return g.cast(p, A.dtype), g.cast(ll, A.dtype), g.cast(uu, A.dtype)


def _batch_eye_out(g, A, m):
    """P of an LU with no steps: the identity (or empty)."""
    if M.empty(g.out_shape(0)):
        return M.fill(g, 0)
    return g.cast(M.batch_bcast(g, M.eye(g, m, m), A.shape[:-2]), A.dtype)


@aten("lu_unpack")
def lu_unpack(g, LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    m, n = M.check(g, LU_data, "LU_data", any_size=True)
    k = min(m, n)
    outs = [None, None, None]
    if unpack_pivots:
        if M.empty(g.out_shape(0)):
            outs[0] = M.fill(g, 0)
        else:
            piv = _pivots_in(g, LU_pivots, k) if k else []
            outs[0] = g.cast(_permutation(g, piv, m, LU_data.shape[:-2]), LU_data.dtype)
    else:
        outs[0] = M.fill(g, 0)
    if unpack_data and not M.empty(LU_data.shape):
        ll, uu = _unpack_lu(g, LU_data, m, n)
        outs[1], outs[2] = ll, uu
    else:
        outs[1], outs[2] = M.fill(g, 1), M.fill(g, 2)
    return tuple(outs)


# ---------------------------------------------------------------------------- determinants
def _diag_and_sign(g, A):
    """The LU diagonal entries (``[..., 1, 1]`` each; above ``MAX_N`` one ``[..., 1, n]``)
    and the permutation's sign (+-1.)."""
    n, _ = M.check(g, A, "A", square=True, any_size=True)
    lu, piv, _ = F.getrf(g, M.work(g, A))
    if not isinstance(piv, list):  # the loop's pivots: sign = prod(p == j ? 1 : -1)
        eye = g.const(torch.eye(n, dtype=torch.bool))
        diag = g.reduce("sum_reduce", select(g, eye, lu, 0.0), [lu.rank - 2], keepdim=True)
        kept = M.compare(g, "eq", piv, g.const(torch.arange(n).reshape(1, n)))
        flips = select(g, kept, g.scalar(1.0, M.WORK), g.scalar(-1.0, M.WORK))
        return [diag], g.reduce("tract_core_product_reduce", flips, [piv.rank - 1],
                                keepdim=True)
    diag = [M.at(g, lu, j, j) for j in range(n)]
    sign = None
    for j, p in enumerate(piv):
        s = select(g, M.compare(g, "eq", p, g.scalar(j, torch.int64)), g.scalar(1.0, M.WORK),
                   g.scalar(-1.0, M.WORK))
        sign = s if sign is None else M.mul(g, sign, s)
    return diag, sign


@aten("linalg_det", "det", "_linalg_det")
def linalg_det(g, A):
    M.check(g, A, "A", square=True, any_size=True)
    if M.empty(A.shape):
        return M.fill(g, 0, 1.0)
    diag, sign = _diag_and_sign(g, A)
    det = sign
    for d in diag:
        det = M.mul(g, det, _fold(g, "tract_core_product_reduce", d))
    return g.cast(M.squeeze2(g, det), A.dtype)


def _fold(g, kind, x):
    """``[..., 1, n]`` (the loop's whole diagonal at once) reduced to ``[..., 1, 1]``."""
    return x if x.shape[-1] == 1 else g.reduce(kind, x, [x.rank - 1], keepdim=True)


def _slogdet(g, A):
    diag, sign = _diag_and_sign(g, A)
    logabs = None
    for d in diag:
        sign = M.mul(g, sign, _fold(g, "tract_core_product_reduce", g.unary("sign", d)))
        la = _fold(g, "sum_reduce", g.unary("log", g.unary("abs", d)))
        logabs = la if logabs is None else g.binary("add", logabs, la, M.WORK)
    return M.squeeze2(g, sign), M.squeeze2(g, logabs)


@aten("linalg_slogdet", "slogdet")
def linalg_slogdet(g, A):
    M.check(g, A, "A", square=True, any_size=True)
    if M.empty(A.shape):
        return M.fill(g, 0, 1.0), M.fill(g, 1, 0.0)
    sign, logabs = _slogdet(g, A)
    return g.cast(sign, A.dtype), g.cast(logabs, A.dtype)


@aten("logdet")
def logdet(g, self):
    """PyTorch: NaN for a negative determinant, -inf for a singular matrix."""
    M.check(g, self, "self", square=True, any_size=True)
    if M.empty(self.shape):
        return M.fill(g, 0, 0.0)
    sign, logabs = _slogdet(g, self)
    neg = M.compare(g, "lt", sign, g.scalar(0.0, M.WORK))
    return g.cast(select(g, neg, g.scalar(float("nan"), M.WORK), logabs), self.dtype)


# ---------------------------------------------------------------------------- triangular


def _solve_tri(g, a, b, upper, left, unit):
    """``a @ x = b`` (left) or ``x @ a = b``, float64, batch broadcast."""
    a, b, _ = F.broadcast_pair(g, a, b)
    if left:
        return F.trsm(g, a, b, lower=not upper, unit=unit)
    x = F.trsm(g, M.mT(g, a), M.mT(g, b), lower=upper, unit=unit)
    return M.mT(g, x)


@aten("linalg_solve_triangular")
def linalg_solve_triangular(g, self, B, upper, left=True, unitriangular=False):
    M.check(g, self, "A", square=True, any_size=True)
    M.check(g, B, "B", any_size=True)
    if M.empty(g.out_shape(0)):
        return M.fill(g, 0)
    x = _solve_tri(g, M.work(g, self), M.work(g, B), upper, left, unitriangular)
    return g.cast(x, g.out_dtype(0))


@aten("triangular_solve")
def triangular_solve(g, self, A, upper=True, transpose=False, unitriangular=False):
    """``A @ X = self`` (or ``A^T @ X = self``); returns (X, a copy of A)."""
    M.check(g, A, "A", square=True, any_size=True)
    M.check(g, self, "self", any_size=True)
    batch = list(broadcast_shapes(A.shape[:-2], self.shape[:-2]))
    coefficient = M.fill(g, 1) if M.empty(g.out_shape(1)) else M.batch_bcast(g, A, batch)
    if M.empty(g.out_shape(0)):
        return M.fill(g, 0), coefficient
    a = M.work(g, A)
    if transpose:
        a, upper = M.mT(g, a), not upper
    x = _solve_tri(g, a, M.work(g, self), upper, True, unitriangular)
    return g.cast(x, g.out_dtype(0)), coefficient


# ---------------------------------------------------------------------------- LU solves


@aten("linalg_lu_solve")
def linalg_lu_solve(g, LU, pivots, B, left=True, adjoint=False):
    n, _ = M.check(g, LU, "LU", square=True, any_size=True)
    M.check(g, B, "B", any_size=True)
    if M.empty(g.out_shape(0)):
        return M.fill(g, 0)
    lu, b = M.work(g, LU), M.work(g, B)
    batch = list(broadcast_shapes(LU.shape[:-2], B.shape[:-2]))
    lu, b = M.batch_bcast(g, lu, batch), M.batch_bcast(g, b, batch)
    piv = _pivots_in(g, pivots, n)
    if left:
        x = F.lu_solve(g, lu, piv, b, adjoint)
    else:  # x A = b  <=>  A^T x^T = b^T
        x = M.mT(g, F.lu_solve(g, lu, piv, M.mT(g, b), not adjoint))
    return g.cast(x, g.out_dtype(0))


@aten("lu_solve")
def lu_solve(g, self, LU_data, LU_pivots):
    return linalg_lu_solve(g, LU_data, LU_pivots, self)


def _is_vector_rhs(A, B):
    return B.rank == 1 or (B.rank == A.rank - 1 and list(B.shape) == list(A.shape[:-1]))


def _linalg_solve(g, A, B, left, with_info):
    M.check(g, A, "A", square=True, any_size=True)
    vector = _is_vector_rhs(A, B)
    if vector:
        B = g.unsqueeze(B, [B.rank])
    M.check(g, B, "B", any_size=True)
    if M.empty(g.out_shape(0)):
        return M.fill(g, 0), (M.fill(g, 1) if with_info else None)
    x, info, _ = F.solve(g, A, B, left)
    if vector:
        x = g.squeeze(x, [x.rank - 1])
    return g.cast(x, g.out_dtype(0)), F.info_out(g, info, list(A.shape[:-2]))


@aten("linalg_solve")
def linalg_solve(g, A, B, left=True):
    return _linalg_solve(g, A, B, left, False)[0]


@aten("linalg_solve_ex")
def linalg_solve_ex(g, A, B, left=True, check_errors=False):
    return _linalg_solve(g, A, B, left, True)


@aten("linalg_inv_ex")
def linalg_inv_ex(g, A, check_errors=False):
    M.check(g, A, "A", square=True, any_size=True)
    if M.empty(A.shape):
        return M.fill(g, 0), M.fill(g, 1)
    x, info = F.inv(g, A)
    return x, F.info_out(g, info, A.shape[:-2])


@aten("linalg_inv", "inverse")
def linalg_inv(g, A):
    M.check(g, A, "A", square=True, any_size=True)
    if M.empty(A.shape):
        return M.fill(g, 0)
    return F.inv(g, A)[0]


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
        return M.fill(g, 0)
    a = g.reshape(self, [n, n])
    M.check(g, a, "self (as an n x n matrix)", square=True)
    return g.reshape(F.inv(g, a)[0], shape[ind:] + shape[:ind])


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
        return M.fill(g, 0)
    a = g.reshape(a, [nb, n])
    M.check(g, a, "self (as an n x n matrix)", square=True)
    x, _, _ = F.solve(g, a, g.reshape(other, [nb, 1]))
    return g.cast(g.reshape(x, rshape), g.out_dtype(0))


# ---------------------------------------------------------------------------- matrix exponential
TAYLOR_ORDER = 18  # on a matrix of 1-norm <= 1: truncation error < 1/19! ~ 1e-17
MAX_SQUARINGS = 64  # 1-norms up to 2^64; beyond, the result is NaN (never a wrong number)


@aten("linalg_matrix_exp", "matrix_exp")
def linalg_matrix_exp(g, self):
    """float64 only. Scaling and squaring: ``s = ceil(log2(|A|_1))`` chosen at run time,
    a Taylor polynomial of order 18 of ``A / 2^s``, then ``s`` squarings, each applied
    through ``select(k < s, ...)`` so that the graph stays static."""
    n, _ = M.check(g, self, "self", square=True)
    if self.dtype != torch.float64:
        raise g.error(f"self: {self.dtype} is not supported, only float64: PyTorch's "
                      "reduced-precision result carries rounding errors of about "
                      "eps * |exp(A)| that another evaluation order does not reproduce on the "
                      "small entries (export the model in float64)")
    if M.empty(self.shape):
        return M.fill(g, 0)
    a = M.work(g, self)
    r = a.rank - 2
    colsum = g.reduce("sum_reduce", g.unary("abs", a), [r], keepdim=True)
    norm = g.reduce("max_reduce", colsum, [r + 1], keepdim=True)  # [..., 1, 1]
    tiny = g.scalar(2.0 ** -60, M.WORK)
    s = g.unary("ceil", g.binary("div", g.unary("log", g.binary("max", norm, tiny, M.WORK)),
                                 g.scalar(math.log(2.0), M.WORK), M.WORK))
    s = g.binary("max", g.binary("min", s, g.scalar(float(MAX_SQUARINGS), M.WORK), M.WORK),
                 g.scalar(0.0, M.WORK), M.WORK)
    x = M.mul(g, a, g.binary("pow", g.scalar(2.0, M.WORK), g.unary("neg", s), M.WORK))
    eye = M.eye(g, n, n)
    p = g.binary("add", eye, M.mul(g, x, 1.0 / TAYLOR_ORDER), M.WORK)
    for k in range(TAYLOR_ORDER - 1, 0, -1):
        p = g.binary("add", eye, M.mul(g, matmul_nd(g, x, p), 1.0 / k), M.WORK)
    for k in range(MAX_SQUARINGS):
        p = select(g, M.compare(g, "lt", g.scalar(float(k), M.WORK), s), matmul_nd(g, p, p), p)
    too_big = M.compare(g, "gt", norm, g.scalar(2.0 ** MAX_SQUARINGS, M.WORK))
    p = select(g, too_big, g.scalar(float("nan"), M.WORK), p)
    return g.cast(p, self.dtype)
