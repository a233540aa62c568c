"""Small-matrix linear algebra (t2n/mappings/linalg_small.py and linalg_factor.py): torch eager
(LAPACK) vs tract.

Cases: batched and broadcast batches, f32 and f64, rectangular LU/QR, pivot ties (LAPACK
takes the first largest |value|), exactly singular matrices (zero pivots, info, det 0,
logdet -inf), negative determinants, every flag of the solvers, a dynamic batch axis, and the
refusals (LDL side > 16 or a dynamic side, float32 matrix_exp; triangular solves,
Cholesky, LU and QR above 16 x 16 loop: tests/test_linalg_loops.py).
"""

import pytest
import torch

import legacy_ops
from opcases import Fn, assert_cases
from t2n.errors import UnsupportedOperatorsError
from t2n.testing import assert_exports

L = torch.linalg


def _wellcond(*shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    n = shape[-1]
    a = torch.randn(*shape, generator=gen, dtype=torch.float64)
    return (a + n * torch.eye(n, dtype=torch.float64) * torch.sign(a.diagonal(0, -2, -1))
            .unsqueeze(-1) * 0.5).to(dtype)


def _spd(*shape, dtype=torch.float32, seed=1):
    gen = torch.Generator().manual_seed(seed)
    n = shape[-1]
    a = torch.randn(*shape, generator=gen, dtype=torch.float64)
    return (a @ a.mT + n * torch.eye(n, dtype=torch.float64)).to(dtype)


# exact in binary floating point: LAPACK and the lowering eliminate to the same exact zeros.
# SINGULAR's multipliers are powers of two whether A or A^T is factored: torch's det,
# slogdet and logdet factor A^T for a row-major A (no copy), and whether MKL's getrf fuses
# its multiply-adds depends on the CPU path it takes, so a matrix with a multiplier of 1/3 in
# A^T ([[2, 4, 6], [1, 2, 3], [4, 1, 1]]) has torch det 1.25e-6 on an AVX-512 machine and 0
# with MKL_CBWR=COMPATIBLE (a fused 1 - (1/3 * 3) is not 0): sign and log|det| then differ
# by 1 and inf from tract's exact elimination, whichever capture.
SINGULAR = torch.tensor([[8., -1., -4.], [-2., 1., -2.], [3., 0., -3.]])  # U[2, 2] == 0
ZERO_COL = torch.tensor([[0., 1.], [0., 2.]])  # first pivot 0: column left unscaled
TIES = torch.tensor([[1., 2., 0.], [-1., 5., 1.], [1., -3., 2.]])  # |1| ties: no swap
NEG_DET = torch.tensor([[0., 1., 0.], [1., 0., 0.], [0., 0., 3.]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_lu_family(dtype):
    a = _wellcond(2, 3, 4, 4, dtype=dtype)
    rect = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(3)).to(dtype)
    assert_cases({
        "lu_factor batched": lambda a, r: L.lu_factor(a),
        "lu_factor_ex batched": lambda a, r: L.lu_factor_ex(a),
        "lu_factor wide": lambda a, r: L.lu_factor(r),
        "lu_factor tall": lambda a, r: L.lu_factor(r.mT),
        "torch.lu get_infos": lambda a, r: torch.lu(a, get_infos=True),
        "linalg.lu": lambda a, r: L.lu(a),
        "linalg.lu wide": lambda a, r: L.lu(r),
        "linalg.lu tall": lambda a, r: L.lu(r.mT),
        "lu_unpack": lambda a, r: torch.lu_unpack(*L.lu_factor(r.mT)),
        "lu_unpack only data": lambda a, r: torch.lu_unpack(*L.lu_factor(a),
                                                            unpack_pivots=False)[1:],
        "lu_unpack only pivots": lambda a, r: torch.lu_unpack(*L.lu_factor(a),
                                                              unpack_data=False)[0],
    }, (a, rect))


def test_lu_pivot_ties_and_singular(capture):
    assert_cases({
        "lu_factor_ex exactly singular": lambda s, z, t: L.lu_factor_ex(s),
        "lu_factor_ex zero first column": lambda s, z, t: L.lu_factor_ex(z),
        "lu_factor pivot ties first": lambda s, z, t: L.lu_factor(t),
        "linalg.lu singular": lambda s, z, t: L.lu(s),
        "det singular": lambda s, z, t: L.det(s),
        "det zero column": lambda s, z, t: L.det(z),
        "slogdet singular": lambda s, z, t: L.slogdet(s),
        "logdet singular": lambda s, z, t: torch.logdet(s),
        "det ties": lambda s, z, t: L.det(t),
    }, (SINGULAR, ZERO_COL, TIES))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_determinants(dtype):
    a = _wellcond(2, 3, 5, 5, dtype=dtype)
    assert_cases({
        "det batched": lambda a, m: L.det(a),
        "torch.det": lambda a, m: torch.det(a[0]),
        "det negative": lambda a, m: L.det(m),
        "slogdet batched": lambda a, m: L.slogdet(a),
        "slogdet negative": lambda a, m: L.slogdet(m),
        "logdet negative is nan": lambda a, m: torch.logdet(m),
        "logdet of spd": lambda a, m: torch.logdet(a @ a.mT),
        "det 1x1": lambda a, m: L.det(a[..., :1, :1]),
        "det of empty matrix is 1": lambda a, m: L.det(a[..., :0, :0]),
        "slogdet of empty matrix": lambda a, m: L.slogdet(a[..., :0, :0]),
    }, (a, NEG_DET.to(dtype)), constant_outputs=[  # an empty matrix's det reads no value
        "c8_det_of_empty_matrix_is_1_out0", "c9_slogdet_of_empty_matrix_out0",
        "c9_slogdet_of_empty_matrix_out1"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_inverse_and_solve(dtype):
    a = _wellcond(2, 3, 4, 4, dtype=dtype)
    b = torch.randn(3, 4, 2, generator=torch.Generator().manual_seed(5)).to(dtype)
    assert_cases({
        "inv batched": lambda a, b: L.inv(a),
        "inv_ex": lambda a, b: L.inv_ex(a),
        "inverse": lambda a, b: torch.inverse(a[0, 0]),
        "inv 1x1": lambda a, b: L.inv(a[..., :1, :1]),
        "inv empty": lambda a, b: L.inv(a[..., :0, :0]),
        "solve broadcast batch": lambda a, b: L.solve(a, b),
        "solve vector rhs": lambda a, b: L.solve(a, b[..., 0].expand(2, 3, 4)),
        "solve 1-d rhs": lambda a, b: L.solve(a[0, 0], b[0, :, 0]),
        "solve left=False": lambda a, b: L.solve(a, b.mT, left=False),
        "solve_ex": lambda a, b: L.solve_ex(a, b),
        "solve zero columns": lambda a, b: L.solve(a, b[..., :0]),
    }, (a, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_triangular_solves(dtype):
    a = _wellcond(2, 4, 4, dtype=dtype)
    b = torch.randn(3, 1, 4, 3, generator=torch.Generator().manual_seed(6)).to(dtype)
    cases = {}
    for upper in (False, True):
        for left in (True, False):
            for unit in (False, True):
                name = f"solve_triangular upper={upper} left={left} unit={unit}"
                cases[name] = (lambda u, lf, un: lambda a, b: L.solve_triangular(
                    a, b if lf else b.mT, upper=u, left=lf, unitriangular=un))(upper, left,
                                                                               unit)
    for upper in (False, True):
        for transpose in (False, True):
            cases[f"triangular_solve upper={upper} transpose={transpose}"] = (
                lambda u, t: lambda a, b: torch.triangular_solve(b, a, upper=u,
                                                                 transpose=t))(upper, transpose)
    cases["triangular_solve unitriangular"] = lambda a, b: torch.triangular_solve(
        b, a, unitriangular=True)
    cases["triangular_solve zero columns"] = lambda a, b: torch.triangular_solve(b[..., :0], a)
    assert_cases(cases, (a, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_lu_solve(dtype):
    a = _wellcond(2, 4, 4, dtype=dtype)
    b = torch.randn(3, 1, 4, 2, generator=torch.Generator().manual_seed(7)).to(dtype)
    cases = {}
    for left in (True, False):
        for adjoint in (False, True):
            cases[f"linalg.lu_solve left={left} adjoint={adjoint}"] = (
                lambda lf, ad: lambda a, b: L.lu_solve(*L.lu_factor(a), b if lf else b.mT,
                                                       left=lf, adjoint=ad))(left, adjoint)
    cases["torch.lu_solve"] = lambda a, b: torch.lu_solve(b, *L.lu_factor(a))
    assert_cases(cases, (a, b))


def test_legacy_ops_exist_exactly_before_2_14():
    """The "torch.cholesky"/"torch.qr" cases call aten::cholesky/aten::qr wherever torch has
    them (tests/legacy_ops.py); they fall back only where torch 2.14 removed the schemas."""
    schemas = {str(s.name) for s in torch._C._jit_get_all_schemas()}
    for op in ("cholesky", "qr"):
        assert (f"aten::{op}" in schemas) is (not legacy_ops.REMOVED), op
        assert hasattr(torch.ops.aten, op) is (not legacy_ops.REMOVED), op


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_cholesky_family(dtype):
    s = _spd(2, 3, 5, 5, dtype=dtype)
    b = torch.randn(3, 5, 2, generator=torch.Generator().manual_seed(8)).to(dtype)
    assert_cases({
        "cholesky lower": lambda s, b: L.cholesky(s),
        "cholesky upper": lambda s, b: L.cholesky(s, upper=True),
        "cholesky reads the lower triangle only": lambda s, b: L.cholesky(s.tril()),
        "cholesky upper reads the upper triangle": lambda s, b: L.cholesky(s.triu(),
                                                                           upper=True),
        "cholesky_ex": lambda s, b: L.cholesky_ex(s),
        "torch.cholesky upper": lambda s, b: legacy_ops.cholesky(s, upper=True),
        "cholesky_solve": lambda s, b: torch.cholesky_solve(b, L.cholesky(s)),
        "cholesky_solve upper": lambda s, b: torch.cholesky_solve(
            b, L.cholesky(s, upper=True), upper=True),
        "cholesky_inverse": lambda s, b: torch.cholesky_inverse(L.cholesky(s[0, 0])),
        "cholesky_inverse upper": lambda s, b: torch.cholesky_inverse(
            L.cholesky(s, upper=True), upper=True),
        "cholesky empty": lambda s, b: L.cholesky(s[..., :0, :0]),
    }, (s, b))


def test_cholesky_ex_info_on_non_positive_definite():
    # the factor is unspecified after a failure (PyTorch documents only info)
    m = torch.tensor([[[4., 2., 0.], [2., 1., 0.], [0., 0., 1.]],   # minor 2 singular
                      [[1., 0., 0.], [0., -1., 0.], [0., 0., 1.]],  # minor 2 negative
                      [[4., 2., 0.], [2., 5., 0.], [0., 0., 1.]]])  # fine
    # compared on these matrices only: fresh values would not be positive definite, where
    # the factor is unspecified
    assert_cases({"cholesky_ex info": lambda m: L.cholesky_ex(m)[1],
                  "cholesky_ex fine batch element": lambda m: L.cholesky_ex(m[2])}, (m,),
                 fresh_inputs=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_qr_family(dtype):
    a = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(9)).to(dtype)
    c = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(10)).to(dtype)
    cases = {
        "qr reduced tall": lambda a, c: L.qr(a),
        "qr complete tall": lambda a, c: L.qr(a, mode="complete"),
        "qr r tall": lambda a, c: L.qr(a, mode="r")[1],
        "qr reduced wide": lambda a, c: L.qr(a.mT),
        "qr complete wide": lambda a, c: L.qr(a.mT, mode="complete"),
        "qr square": lambda a, c: L.qr(a[..., :3, :]),
        "torch.qr some=False": lambda a, c: legacy_ops.qr(a, some=False),
        "qr with a zero column (tau 0)": lambda a, c: L.qr(
            torch.cat([a[..., :1], a[..., :1] * 0, a[..., 1:]], -1)),
        "geqrf tall": lambda a, c: torch.geqrf(a),
        "geqrf wide": lambda a, c: torch.geqrf(a.mT),
        "householder_product": lambda a, c: L.householder_product(*torch.geqrf(a)),
        "householder_product fewer taus": lambda a, c: L.householder_product(
            torch.geqrf(a)[0], torch.geqrf(a)[1][..., :2]),
    }
    for left in (True, False):
        for transpose in (False, True):
            cases[f"ormqr left={left} transpose={transpose}"] = (
                lambda lf, t: lambda a, c: torch.ormqr(*torch.geqrf(a), c if lf else c.mT,
                                                       left=lf, transpose=t))(left, transpose)
    assert_cases(cases, (a, c))


def test_tensorinv_tensorsolve():
    a = _wellcond(6, 6, seed=11).reshape(2, 3, 6)
    b = torch.randn(2, 3, generator=torch.Generator().manual_seed(12))
    assert_cases({
        "tensorinv ind=2": lambda a, b: L.tensorinv(a.reshape(2, 3, 3, 2), ind=2),
        "tensorinv ind=1": lambda a, b: L.tensorinv(a.reshape(6, 2, 3), ind=1),
        "tensorsolve": lambda a, b: L.tensorsolve(a, b),
        "tensorsolve dims": lambda a, b: L.tensorsolve(a.reshape(2, 6, 3), b, dims=(1,)),
    }, (a, b))


def test_matrix_exp_float64():
    scales = torch.tensor([0., 1e-3, 1., 8.], dtype=torch.float64).reshape(4, 1, 1)
    a = torch.randn(4, 5, 5, generator=torch.Generator().manual_seed(13),
                    dtype=torch.float64) * scales
    assert_cases({"matrix_exp zero/tiny/unit/large norms": lambda a: L.matrix_exp(a),
                  "torch.matrix_exp 1x1": lambda a: torch.matrix_exp(a[:, :1, :1])}, (a,))


def test_dynamic_batch_axis():
    a = _wellcond(3, 4, 4)
    s = _spd(3, 4, 4)
    assert_exports(Fn(lambda a, s: (L.det(a), L.solve(a, s), L.cholesky(s), L.qr(a)[0],
                                    L.lu_factor(a)[1])),
                   (a, s), input_names=["a", "s"],
                   dynamic_axes={"a": {0: "B"}, "s": {0: "B"}},
                   more_args=[(_wellcond(5, 4, 4, seed=4), _spd(5, 4, 4, seed=5))])


@pytest.mark.parametrize("case,args,match", [
    ("ldl_factor 17x17", (lambda a: L.ldl_factor(a)[0], torch.eye(17)), "larger than 16 x 16"),
    ("matrix_exp f32", (lambda a: L.matrix_exp(a), torch.eye(3)), "only float64"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_refusals(case, args, match):
    fn, x = args
    with pytest.raises(UnsupportedOperatorsError, match=match):
        assert_exports(Fn(fn), (x,))


def test_dynamic_matrix_side_is_refused():
    with pytest.raises(UnsupportedOperatorsError, match="must be static"):
        assert_exports(Fn(lambda a: L.det(a)), (torch.eye(3),), input_names=["a"],
                       dynamic_axes={"a": {0: "N", 1: "N"}})


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_ldl_bunch_kaufman(dtype):
    # small diagonals force 2x2 pivot blocks and interchanges (about 80 of each here)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(40, 6, 6, generator=gen, dtype=torch.float64)
    a = a + a.mT
    a[:20].diagonal(0, -2, -1).mul_(0.05)
    b = torch.randn(40, 6, 2, generator=gen)
    zero_col = torch.tensor([[0., 0., 0.], [0., 1., 2.], [0., 2., 1.]])
    assert_cases({
        "ldl_factor_ex": lambda a, b, z: L.ldl_factor_ex(a),
        "ldl_factor reads the lower triangle": lambda a, b, z: L.ldl_factor(a.tril()),
        "ldl_factor hermitian": lambda a, b, z: L.ldl_factor(a, hermitian=True),
        "ldl_factor 1x1": lambda a, b, z: L.ldl_factor_ex(a[:, :1, :1]),
        "ldl_solve": lambda a, b, z: L.ldl_solve(*L.ldl_factor(a), b),
        "ldl_solve 2x2": lambda a, b, z: L.ldl_solve(*L.ldl_factor(a[:, :2, :2]), b[:, :2]),
        "ldl_factor_ex zero column info": lambda a, b, z: L.ldl_factor_ex(z),
    }, (a.to(dtype), b.to(dtype), zero_col.to(dtype)),
        constant_outputs=["c3_ldl_factor_1x1_out1"])  # a 1x1 factor's pivot is always 1
