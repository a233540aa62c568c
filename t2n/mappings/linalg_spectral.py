"""Eigenvalues of symmetric matrices and singular values of small static matrices, and the ops
built on them: eigvalsh, svdvals, the spectral and nuclear norms, cond, matrix_rank, pinv,
lstsq.

tract has no eigen solver: the values come from the unrolled Jacobi kernels of
``t2n/mappings/helpers/spectral.py`` (its docstring says how), whose op count depends on the
matrix size only, never on the batch or the data.

Singular vectors and eigenvectors are refused: their signs (and, for repeated values, the
basis) are chosen by LAPACK's implementation, which another algorithm does not reproduce.
``pinv`` and ``lstsq`` are sign-free functions of the SVD (``sum_i v_i u_i^T / s_i``), so they
are computed from the Jacobi rotations.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers import factorizations as F
from t2n.mappings.helpers import small_matrix as M
from t2n.mappings.helpers.elementwise import select
from t2n.mappings.helpers.matrix import matmul_nd
from t2n.mappings.helpers.vector_norms import matrix_norm_of
from t2n.mappings.helpers.spectral import (check_rect, eigvalsh_of, lower_symmetric, max_abs_scale,
                                          one_sided_svd, oriented, reduce_last, scaled_svdvals,
                                          spectral_matrix_norm, svdvals_of)
from t2n.walk.builder import broadcast_shapes
from t2n.walk.registry import aten

WORK = M.WORK
EPS = {torch.float16: 2.0 ** -10, torch.float32: 2.0 ** -23, torch.float64: 2.0 ** -52,
       torch.bfloat16: 2.0 ** -7}


# ---------------------------------------------------------------------------- public helpers


# ---------------------------------------------------------------------------- eigvalsh / svdvals
@aten("linalg_eigvalsh")
def linalg_eigvalsh(g, self, UPLO="L"):
    M.check(g, self, "self", square=True)
    if UPLO not in ("L", "U"):
        raise g.error(f"UPLO: expected 'L' or 'U', got {UPLO!r}")
    if M.empty(self.shape):
        return M.fill(g, 0)
    return g.cast(eigvalsh_of(g, self, UPLO == "L"), g.out_dtype(0))


@aten("linalg_svdvals")
def linalg_svdvals(g, A, driver=None):
    check_rect(g, A, "A")
    if M.empty(A.shape):
        return M.fill(g, 0)
    return g.cast(svdvals_of(g, A, "A"), g.out_dtype(0))


def _vectors_refused(g, what):
    return g.error(f"{what}: eigen/singular vectors are not supported: their signs (and the "
                   "basis of repeated values) are chosen by LAPACK's implementation, which an "
                   "exported Jacobi solver cannot reproduce (eigenvalues/singular values, pinv, "
                   "lstsq and the spectral norms are supported)")


def _all_outputs_empty(g, count):
    return all(M.empty(g.out_shape(i)) for i in range(count))


@aten("linalg_eigh")
def linalg_eigh(g, self, UPLO="L"):
    return _linalg_eigh(g, self, UPLO, True)


@aten("_linalg_eigh")
def _linalg_eigh(g, A, UPLO="L", compute_v=True):
    """Only the empty case (no sign to choose) and, without vectors, the values."""
    M.check(g, A, "A", square=True)
    if _all_outputs_empty(g, 2):
        return M.fill(g, 0), M.fill(g, 1)
    if not compute_v:
        return linalg_eigvalsh(g, A, UPLO), M.fill(g, 1)
    raise _vectors_refused(g, "eigenvectors")


@aten("linalg_svd")
def linalg_svd(g, A, full_matrices=True, driver=None):
    return _linalg_svd(g, A, full_matrices, True, driver)


@aten("_linalg_svd")
def _linalg_svd(g, A, full_matrices=False, compute_uv=True, driver=None, what="A"):
    """Only the empty case and, without vectors (U and Vh then empty), the values."""
    check_rect(g, A, what)
    if _all_outputs_empty(g, 3):
        return tuple(M.fill(g, i) for i in range(3))
    if not compute_uv:
        return M.fill(g, 0), linalg_svdvals(g, A), M.fill(g, 2)
    raise _vectors_refused(g, "singular vectors")


@aten("svd")
def svd(g, self, some=True, compute_uv=True):
    """``compute_uv=False`` gives zero-filled U and V beside the values (no sign involved)."""
    return _linalg_svd(g, self, not some, compute_uv, what="self")


# ---------------------------------------------------------------------------- norms, cond


@aten("nuclear_norm")
def nuclear_norm(g, self, *args):
    """``nuclear_norm(self, keepdim=False)`` and ``nuclear_norm.dim(self, dim, keepdim)``."""
    dim, keepdim = ((-2, -1), args[0] if args else False) if len(args) < 2 else args
    axes = [d % self.rank for d in dim]
    return spectral_matrix_norm(g, self, "nuc", axes, keepdim)


@aten("linalg_cond")
def linalg_cond(g, self, p=None):
    """As PyTorch: p in (None, 2, -2) the ratio of the extreme singular values, 'nuc'
    ``sum(s) * sum(1/s)``, other p ``|A|_p * |A^-1|_p`` (inf where A is singular). An
    exactly singular matrix gives inf/NaN here where LAPACK's float32 rounding leaves a tiny
    nonzero singular value (a huge finite ratio)."""
    if p in (None, 2, -2):
        check_rect(g, self, "self")
    else:
        M.check(g, self, "self", square=True)
    if M.empty(self.shape):
        return M.fill(g, 0, 0.0)
    dt = g.out_dtype(0)
    if p in (None, 2, -2, "nuc"):
        s, scale = scaled_svdvals(g, self, "self")
        if p == "nuc":  # PyTorch: sum(s) * sum(1 / s), straight from the singular values
            out = M.mul(g, reduce_last(g, "sum_reduce", s, scale),
                         reduce_last(g, "sum_reduce", g.unary("recip", s),
                                      g.unary("recip", scale)))
            return g.cast(out, dt)
        hi = reduce_last(g, "max_reduce", s, scale)
        lo = reduce_last(g, "min_reduce", s, scale)
        return g.cast(M.div(g, hi, lo) if p != -2 else M.div(g, lo, hi), dt)
    inv, info = F.inv(g, g.cast(self, dt))
    na = matrix_norm_of(g, g.cast(self, dt), p, (-2, -1), False)
    ni = matrix_norm_of(g, inv, p, (-2, -1), False)
    out = g.binary("mul", na, ni, dt)
    # PyTorch fills the inverse of a singular matrix with inf and maps NaN (0 * inf) to inf
    bad = g.binary("or", g.binary("ne", M.squeeze2(g, info), 0, torch.int64,
                                  out_dtype=torch.bool),
                   g.binary("ne", out, out, dt, out_dtype=torch.bool), torch.bool)
    return select(g, bad, g.scalar(float("inf"), dt), out)


# ---------------------------------------------------------------------------- rank, pinv
def _tol_value(g, t):
    """A tolerance given as None, a Python number or a tensor: None or a float64 tensor."""
    if t is None:
        return None
    if isinstance(t, (int, float)):
        return g.scalar(float(t), WORK)
    return g.cast(t, WORK)


def _cutoff(g, smax, atol, rtol, default_rtol):
    """``max(atol, rtol * smax)`` with PyTorch's defaults (``get_atol_rtol``): an absent
    rtol is 0 where atol > 0 and ``default_rtol`` elsewhere (also elementwise for a tensor
    atol); an absent atol is 0."""
    a = _tol_value(g, atol)
    if rtol is not None:
        r = _tol_value(g, rtol)
    elif atol is None:
        r = g.scalar(default_rtol, WORK)
    elif isinstance(atol, (int, float)):
        r = g.scalar(0.0 if atol > 0 else default_rtol, WORK)
    else:
        r = select(g, M.compare(g, "gt", a, g.scalar(0.0, WORK)), g.scalar(0.0, WORK),
                   g.scalar(default_rtol, WORK))
    cut = g.binary("mul", r, smax, WORK)
    return cut if a is None else g.binary("max", a, cut, WORK)


def _unsqueeze_tail(g, t, k):
    """A tolerance of batch shape ``[...]`` as ``[..., 1]`` x k for broadcasting with the
    trailing matrix axes (scalars stay scalars)."""
    return t if t.rank == 0 else g.unsqueeze(t, list(range(t.rank, t.rank + k)))


def _tol_args(args):
    """(atol, rtol, hermitian) of the overloads ``(atol, rtol, hermitian)`` (keyword
    tolerances) and ``(tol, hermitian)`` (legacy: ``tol`` is ``atol`` for matrix_rank, the
    ``rcond`` = ``rtol`` of pinv: the caller says which)."""
    if len(args) == 3:
        return tuple(args)
    return args[0], None, (args[1] if len(args) > 1 else False)


@aten("linalg_matrix_rank")
def linalg_matrix_rank(g, input, *args):
    """Overloads ``(atol, rtol, hermitian)`` and the legacy ``(tol, hermitian)`` (tol is an
    absolute tolerance with rtol = 0)."""
    m, n = check_rect(g, input, "input")
    atol, rtol, hermitian = _tol_args(args)
    if len(args) < 3:
        rtol = 0.0
    if M.empty(g.out_shape(0)):
        return M.fill(g, 0)
    if m == 0 or n == 0:
        return M.fill(g, 0, 0)
    if hermitian:
        s = g.unary("abs", eigvalsh_of(g, input, True, "input"))
    else:
        s = svdvals_of(g, input, "input")
    smax = g.reduce("max_reduce", s, [s.rank - 1], keepdim=True)
    atol_t = _unsqueeze_tail(g, g.cast(atol, WORK), 1) if atol is not None and \
        not isinstance(atol, (int, float)) else atol
    rtol_t = _unsqueeze_tail(g, g.cast(rtol, WORK), 1) if rtol is not None and \
        not isinstance(rtol, (int, float)) else rtol
    cut = _cutoff(g, smax, atol_t, rtol_t, EPS[input.dtype] * max(m, n))
    big = M.compare(g, "gt", s, cut)
    return g.reduce("sum_reduce", g.cast(big, torch.int64), [s.rank - 1], keepdim=False)


def pinv_of(g, x, atol, rtol, default_rtol, hermitian=False):
    """float64 pseudo-inverse ``[..., n, m]`` of ``x`` ``[..., m, n]``: ``V diag(1/s^2) B^T``
    with ``B = A V`` from the one-sided Jacobi (``B``'s columns are ``s_i u_i``), singular
    values at or below the cutoff dropped. ``atol``/``rtol`` are float64 tensors broadcastable
    to ``[..., 1, 1]``, Python numbers or None."""
    if hermitian:
        x = lower_symmetric(g, M.work(g, x))
    a, transposed = oriented(g, x, "self")
    m, n = a.shape[-2:]
    scale = max_abs_scale(g, a)
    norms2, b, v, (p1, t1, p2, t2) = one_sided_svd(g, M.div(g, a, scale), with_v=True)
    s = M.mul(g, g.unary("sqrt", norms2), scale)  # [..., 1, n]
    smax = g.reduce("max_reduce", s, [s.rank - 1], keepdim=True)
    keep = M.compare(g, "gt", s, _cutoff(g, smax, atol, rtol, default_rtol))
    # a / c = Q1 B V^T Q2^T with B's columns s_i u_i: pinv(a) = Q2 V diag(1/s^2) B^T Q1^T / c
    w = select(g, keep, g.unary("recip", norms2), 0.0)
    core = matmul_nd(g, M.mul(g, v, w), b, transpose_b=True)  # [..., n, n]
    core = F.apply_q(g, p2, t2, core, transpose=False)  # Q2 @ core
    ct = M.mT(g, core)
    if m > n:  # Q1 @ [core^T; 0] is Q1's thin part times core^T
        pad = g.zeros_like(M.rows(g, M.work(g, a), 0, m - n))
        ct = M.vcat(g, [ct, g.broadcast_to(pad, list(ct.shape[:-2]) + [m - n, n])])
    p = M.mT(g, F.apply_q(g, p1, t1, ct, transpose=False))  # [..., n, m]
    p = M.div(g, p, scale)
    return M.mT(g, p) if transposed else p


def _pinv_tol(g, t):
    if t is None or isinstance(t, (int, float)):
        return t
    return _unsqueeze_tail(g, g.cast(t, WORK), 2)


@aten("linalg_pinv")
def linalg_pinv(g, self, *args):
    """Overloads: ``(atol, rtol, hermitian)`` with tensors or floats, ``(rcond, hermitian)``."""
    m, n = check_rect(g, self, "self")
    atol, rtol, hermitian = _tol_args(args)
    if len(args) < 3:  # PyTorch: linalg_pinv(self, atol=0, rtol=rcond)
        atol, rtol = 0.0, atol
    if hermitian and m != n:
        raise g.error(f"self: hermitian=True needs square matrices, got {m} x {n}")
    if M.empty(g.out_shape(0)):
        return M.fill(g, 0)
    if m == 0 or n == 0:
        return M.fill(g, 0, 0.0)
    p = pinv_of(g, self, _pinv_tol(g, atol), _pinv_tol(g, rtol),
                EPS[self.dtype] * max(m, n), hermitian)
    return g.cast(p, g.out_dtype(0))


@aten("pinverse")
def pinverse(g, self, rcond=1e-15):
    m, n = check_rect(g, self, "self")
    if M.empty(g.out_shape(0)):
        return M.fill(g, 0)
    if m == 0 or n == 0:
        return M.fill(g, 0, 0.0)
    return g.cast(pinv_of(g, self, None, float(rcond), 0.0), g.out_dtype(0))


# ---------------------------------------------------------------------------- lstsq
@aten("linalg_lstsq")
def linalg_lstsq(g, self, b, rcond=None, driver=None):
    """Least squares through the pseudo-inverse (the minimum-norm solution LAPACK's drivers
    return for full-rank matrices). Outputs as PyTorch: residuals only for m > n with
    'gels' (the 'gelsd'/'gelss' ones exist only when the runtime rank is full: refused),
    rank for 'gelsy'/'gelsd'/'gelss', singular values for 'gelsd'/'gelss'."""
    m, n = check_rect(g, self, "self")
    driver = driver or "gelsy"
    if driver not in ("gels", "gelsy", "gelsd", "gelss"):
        raise g.error(f"driver: unknown driver {driver!r}")
    vector = b.rank == self.rank - 1
    bb = g.unsqueeze(b, [b.rank]) if vector else b
    if bb.rank < 2 or not bb.dtype.is_floating_point:
        raise g.error(f"b: expected a floating-point matrix or vector, got {bb.dtype} "
                      f"of rank {b.rank}")
    if driver in ("gelsd", "gelss") and m > n:
        raise g.error(f"driver={driver!r}: with m > n PyTorch returns residuals only when "
                      "every matrix has full rank at run time (a data-dependent shape)")
    dt = g.out_dtype(0)
    outs = [None, M.fill(g, 1), M.fill(g, 2), M.fill(g, 3)]
    if M.empty(g.out_shape(0)) or m == 0 or n == 0:
        outs[0] = M.fill(g, 0, 0.0)
        if not M.empty(g.out_shape(1)):
            raise g.error("self: residuals of an empty system are not supported")
        if not M.empty(g.out_shape(2)):
            outs[2] = M.fill(g, 2, 0)
        return tuple(outs)
    eps = EPS[self.dtype]
    rc = eps * max(m, n) if rcond is None or rcond < 0 else float(rcond)
    own = M.work(g, self)
    batch = list(broadcast_shapes(self.shape[:-2], bb.shape[:-2]))
    a = M.batch_bcast(g, own, batch)
    rhs = M.batch_bcast(g, M.work(g, bb), batch)
    # 'gels' does no rank detection: every nonzero singular value is inverted
    p = pinv_of(g, a, None, 0.0 if driver == "gels" else rc, 0.0)
    x = matmul_nd(g, p, rhs)
    outs[0] = g.cast(g.squeeze(x, [x.rank - 1]) if vector else x, dt)
    if not M.empty(g.out_shape(1)):  # m > n, 'gels': |A x - b|^2 per column
        res = M.sub(g, matmul_nd(g, a, x), rhs)
        outs[1] = g.cast(g.reduce("sum_reduce", M.mul(g, res, res), [res.rank - 2],
                                  keepdim=False), g.out_dtype(1))
    if driver != "gels" and not M.empty(g.out_shape(2)):
        # PyTorch's rank and singular values are of self's own batch, not the broadcast one
        s = svdvals_of(g, own, "self")
        smax = g.reduce("max_reduce", s, [s.rank - 1], keepdim=True)
        big = M.compare(g, "gt", s, M.mul(g, smax, rc))
        outs[2] = g.reduce("sum_reduce", g.cast(big, torch.int64), [s.rank - 1], keepdim=False)
        if driver in ("gelsd", "gelss"):
            outs[3] = g.cast(s, g.out_dtype(3))
    return tuple(outs)
