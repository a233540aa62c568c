"""Triangular solves, Cholesky and LU larger than the unrolled limit (16 x 16): one
``tract_core_scan`` each (t2n.mappings/helpers/trsm_loop.py, potrf_loop.py, getrf_loop.py),
torch eager (LAPACK) vs tract.

Every flag of ``linalg.solve_triangular``, ``triangular_solve``, ``cholesky``,
``cholesky_solve`` and ``cholesky_inverse``, f32 and f64 (the dtypes PyTorch's CPU kernels
take), broadcast and dynamic batches, a zero diagonal (inf/NaN as LAPACK gives them), a
matrix that is not positive definite (info), LU's pivots, info and determinants (square,
tall, wide, singular), and an op count that does not grow with n.
"""

import pytest
import torch

import legacy_ops
from opcases import assert_cases
from t2n.testing import assert_exports

L = torch.linalg


def _tri(n, *batch, dtype=torch.float32, seed=0):
    """Well-conditioned for both triangles: unit-ish diagonal, small off-diagonal terms."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(*batch, n, n, generator=gen, dtype=torch.float64) / n ** 0.5
    sign = torch.where(torch.rand(*batch, n, generator=gen) < 0.5, -1.0, 1.0)
    a = a + torch.diag_embed(sign * (1.0 + torch.rand(*batch, n, generator=gen,
                                                       dtype=torch.float64)))
    return a.to(dtype)


def _cases():
    cases = {}
    for upper in (False, True):
        for left in (True, False):
            for unit in (False, True):
                cases[f"solve_triangular upper={upper} left={left} unit={unit}"] = (
                    lambda u, lf, un: lambda a, b: L.solve_triangular(
                        a, b if lf else b.mT, upper=u, left=lf, unitriangular=un))(
                            upper, left, unit)
    for upper in (False, True):
        for transpose in (False, True):
            cases[f"triangular_solve upper={upper} transpose={transpose}"] = (
                lambda u, t: lambda a, b: torch.triangular_solve(b, a, upper=u,
                                                                 transpose=t)[0])(
                                                                     upper, transpose)
    cases["triangular_solve unitriangular"] = lambda a, b: torch.triangular_solve(
        b, a, unitriangular=True)[0]
    cases["vector rhs as a column"] = lambda a, b: L.solve_triangular(
        a[0], b[0, 0, :, :1], upper=False)
    return cases


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("n", [17, 64])
def test_large_triangular_solves(dtype, n):
    a = _tri(n, 2, dtype=dtype)
    b = torch.randn(3, 1, n, 5, generator=torch.Generator().manual_seed(6)).to(dtype)
    assert_cases(_cases(), (a, b), rtol=1e-3, atol=1e-4)


def test_large_triangular_solve_dynamic_batch():
    def args(batch):
        return (_tri(32, batch, 3, seed=batch),
                torch.randn(batch, 3, 32, 4, generator=torch.Generator().manual_seed(batch)))

    assert_exports(
        lambda_module(lambda a, b: L.solve_triangular(a, b, upper=False, unitriangular=True)),
        args(2), input_names=["a", "b"], dynamic_axes={"a": {0: "B"}, "b": {0: "B"}},
        more_args=[args(5)], rtol=1e-3, atol=1e-4)


def test_large_triangular_solve_zero_diagonal():
    """A zero on the diagonal: LAPACK divides by it (inf, then NaN from inf - inf)."""
    a = _tri(20, dtype=torch.float64)
    a[7, 7] = 0.0
    b = torch.randn(20, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert_cases({"lower": lambda a, b: L.solve_triangular(a, b, upper=False),
                  "upper": lambda a, b: L.solve_triangular(a, b, upper=True)}, (a, b))


@pytest.mark.parametrize("fn", ["solve_triangular", "cholesky", "lu_factor"])
def test_large_op_count_is_fixed(fn):
    """The same ops at 20 x 20 and 64 x 64: the loop's body does not grow with n."""
    counts = []
    for n in (20, 64):
        if fn == "cholesky":
            model, args = lambda_module(lambda s: L.cholesky(s)), (_spd(n, 2),)
        elif fn == "lu_factor":
            model, args = lambda_module(lambda a: L.lu_factor(a)), (_general(n, 2),)
        else:
            model = lambda_module(lambda a, b: L.solve_triangular(a, b, upper=True))
            args = (_tri(n, 2), torch.randn(2, n, 3))
        result = assert_exports(model, args, rtol=1e-3, atol=1e-4)
        counts.append(sum(result.op_histogram.values()))
    assert counts[0] == counts[1], counts


def lambda_module(fn):
    from opcases import Fn

    return Fn(fn)


def _spd(n, *batch, dtype=torch.float32, seed=1):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(*batch, n, n, generator=gen, dtype=torch.float64)
    return (a @ a.mT / n + torch.eye(n, dtype=torch.float64)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_large_cholesky_family(dtype):
    """Cholesky (a column per scan step) and the solves on it, 24 x 24."""
    s = _spd(24, 2, 3, dtype=dtype)
    b = torch.randn(3, 24, 2, generator=torch.Generator().manual_seed(8)).to(dtype)
    assert_cases({
        "cholesky lower": lambda s, b: L.cholesky(s),
        "cholesky upper": lambda s, b: L.cholesky(s, upper=True),
        "cholesky reads the lower triangle only": lambda s, b: L.cholesky(s.tril()),
        "torch.cholesky": lambda s, b: legacy_ops.cholesky(s[0, 0]),
        "cholesky_ex": lambda s, b: L.cholesky_ex(s),
        "cholesky_solve": lambda s, b: torch.cholesky_solve(b, L.cholesky(s)),
        "cholesky_solve upper": lambda s, b: torch.cholesky_solve(
            b, L.cholesky(s, upper=True), upper=True),
        "cholesky_inverse": lambda s, b: torch.cholesky_inverse(L.cholesky(s[1, 2])),
    }, (s, b), rtol=1e-3, atol=1e-4)


def test_large_cholesky_not_positive_definite():
    """info names the first minor that is not positive definite (LAPACK's order)."""
    s = _spd(20, 3, dtype=torch.float64)
    s[1, 12, 12] = -50.0
    s[2, 0, 0] = 0.0
    assert_cases({"info": lambda s: L.cholesky_ex(s)[1]}, (s,))


def test_large_cholesky_dynamic_batch():
    def args(batch):
        return (_spd(20, batch, seed=batch),)

    assert_exports(lambda_module(lambda s: L.cholesky(s)), args(2), input_names=["s"],
                   dynamic_axes={"s": {0: "B"}}, more_args=[args(4)], rtol=1e-3, atol=1e-4)


def _general(n, *batch, dtype=torch.float32, seed=2):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*batch, n, n, generator=gen, dtype=torch.float64) +
            2 * torch.eye(n, dtype=torch.float64)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_large_lu_and_determinants(dtype):
    """LU with partial pivoting (a column per scan step): LU, pivots, info, det, slogdet,
    logdet; square 20 x 20 and rectangular 24 x 18 / 18 x 24."""
    a = _general(20, 2, dtype=dtype)
    rect = torch.randn(2, 24, 18, generator=torch.Generator().manual_seed(3)).to(dtype)
    assert_cases({
        "lu_factor": lambda a, r: L.lu_factor(a),
        "lu_factor_ex": lambda a, r: L.lu_factor_ex(a),
        "lu_factor tall": lambda a, r: L.lu_factor(r),
        "lu_factor wide": lambda a, r: L.lu_factor(r.mT),
        "det": lambda a, r: L.det(a),
        "det, two rows swapped": lambda a, r: L.det(torch.cat([a[..., 1:2, :], a[..., :1, :],
                                                               a[..., 2:, :]], -2)),
        "slogdet, two rows swapped": lambda a, r: L.slogdet(
            torch.cat([a[..., 1:2, :], a[..., :1, :], a[..., 2:, :]], -2)),
        "slogdet": lambda a, r: L.slogdet(a),
        "logdet of a a^T": lambda a, r: torch.logdet(a @ a.mT),
    }, (a, rect), rtol=1e-3, atol=1e-4)


def test_large_lu_singular():
    """An exactly singular matrix: a zero pivot sets info, its column is left unscaled, the
    determinant is 0 and logdet -inf."""
    a = _general(18, dtype=torch.float64)
    a[:, 5] = 0.0
    assert_cases({"lu_factor_ex": lambda a: L.lu_factor_ex(a), "det": lambda a: L.det(a),
                  "logdet": lambda a: torch.logdet(a)}, (a,))


def test_large_det_dynamic_batch():
    def args(batch):
        return (_general(20, batch, seed=batch),)

    assert_exports(lambda_module(lambda a: (L.det(a), L.lu_factor(a)[1])), args(2),
                   input_names=["a"], dynamic_axes={"a": {0: "B"}}, more_args=[args(3)],
                   rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_large_lu_solves_and_inverse(dtype):
    """The pivots' row swaps as a loop too: linalg.lu, lu_unpack, lu_solve (every flag),
    solve, inv at 20 x 20 (and 24 x 18 for the unpacking)."""
    a = _general(20, 2, dtype=dtype)
    b = torch.randn(3, 1, 20, 4, generator=torch.Generator().manual_seed(7)).to(dtype)
    rect = torch.randn(2, 24, 18, generator=torch.Generator().manual_seed(3)).to(dtype)
    cases = {
        "linalg.lu": lambda a, b, r: L.lu(a),
        "linalg.lu tall": lambda a, b, r: L.lu(r),
        "linalg.lu wide": lambda a, b, r: L.lu(r.mT),
        "lu_unpack": lambda a, b, r: torch.lu_unpack(*L.lu_factor(r)),
        "solve": lambda a, b, r: L.solve(a, b),
        "solve left=False": lambda a, b, r: L.solve(a, b.mT, left=False),
        "solve vector rhs": lambda a, b, r: L.solve(a[0], b[0, 0, :, 0]),
        "solve_ex": lambda a, b, r: L.solve_ex(a, b[0]),
        "inv": lambda a, b, r: L.inv(a),
        "inv_ex": lambda a, b, r: L.inv_ex(a),
        "torch.lu_solve": lambda a, b, r: torch.lu_solve(b[0], *L.lu_factor(a)),
    }
    for left in (True, False):
        for adjoint in (False, True):
            cases[f"linalg.lu_solve left={left} adjoint={adjoint}"] = (
                lambda lf, ad: lambda a, b, r: L.lu_solve(
                    *L.lu_factor(a), b if lf else b.mT, left=lf, adjoint=ad))(left, adjoint)
    assert_cases(cases, (a, b, rect), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_large_qr_family(dtype):
    """Householder QR and the products with its Q (a column or a reflector per scan step):
    qr in every mode, geqrf, householder_product/orgqr and ormqr with every flag; square
    20 x 20, tall 24 x 18 and wide 18 x 24."""
    a = _general(20, 2, dtype=dtype)
    tall = torch.randn(2, 24, 18, generator=torch.Generator().manual_seed(4)).to(dtype)
    c = torch.randn(2, 24, 3, generator=torch.Generator().manual_seed(5)).to(dtype)
    cases = {
        "qr reduced": lambda a, t, c: L.qr(a),
        "qr tall reduced": lambda a, t, c: L.qr(t),
        "qr tall complete": lambda a, t, c: L.qr(t, mode="complete"),
        "qr wide": lambda a, t, c: L.qr(t.mT),
        "qr r": lambda a, t, c: L.qr(t, mode="r")[1],
        "torch.qr": lambda a, t, c: legacy_ops.qr(a[0]),
        "geqrf": lambda a, t, c: torch.geqrf(t),
        "householder_product": lambda a, t, c: L.householder_product(*torch.geqrf(t)),
        "orgqr": lambda a, t, c: torch.orgqr(*torch.geqrf(a)),
    }
    for left in (True, False):
        for transpose in (False, True):
            cases[f"ormqr left={left} transpose={transpose}"] = (
                lambda lf, tr: lambda a, t, c: torch.ormqr(
                    *torch.geqrf(t), c if lf else c.mT, left=lf, transpose=tr))(left, transpose)
    assert_cases(cases, (a, tall, c), rtol=1e-3, atol=1e-4)
