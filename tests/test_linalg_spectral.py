"""Symmetric eigenvalues, singular values and what is built on them (linalg_spectral.py):
tract vs PyTorch eager, including ill-conditioned and clustered spectra in float64."""

import math

import pytest
import torch

import t2n
from t2n.errors import T2NError
from t2n.testing import assert_exports


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=_gen(seed), dtype=dtype)


def _orth(n, seed):
    return torch.linalg.qr(_randn(n, n, dtype=torch.float64, seed=seed))[0]


def _with_spectrum(values, seed=1):
    """A symmetric float64 matrix with the given eigenvalues."""
    v = torch.as_tensor(values, dtype=torch.float64)
    q = _orth(len(v), seed)
    a = (q * v) @ q.T
    return (a + a.T) / 2


def _with_singular(values, m, seed=1):
    """An m x n float64 matrix with the given singular values (n = len(values) <= m)."""
    s = torch.as_tensor(values, dtype=torch.float64)
    u = _orth(m, seed)[:, :len(s)]
    return (u * s) @ _orth(len(s), seed + 1).T


SPECTRA = {
    "illcond": lambda n: torch.logspace(0, -12, n, dtype=torch.float64),
    "signed_illcond": lambda n: torch.logspace(0, -12, n, dtype=torch.float64)
    * (-1.0) ** torch.arange(n),
    "cluster_1e-9": lambda n: 1 + 1e-9 * torch.arange(n, dtype=torch.float64),
    "repeated": lambda n: torch.tensor([2.0, -1.0, 3.0], dtype=torch.float64).repeat(n)[:n],
    "graded": lambda n: 10.0 ** -torch.arange(n, dtype=torch.float64),
}


# ---------------------------------------------------------------------------- eigvalsh
@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigvalsh_f32_batched(n, uplo):
    a = _randn(2, 3, n, n, seed=n)  # not symmetric: only one triangle is read
    assert_exports(Fn(lambda x: torch.linalg.eigvalsh(x, UPLO=uplo)), (a,))


@pytest.mark.parametrize("kind", sorted(SPECTRA))
@pytest.mark.parametrize("n", [4, 9])
def test_eigvalsh_f64_hard_spectra(kind, n):
    """f64 to ~1e-13 of |A|: the fixed sweep count converges on these spectra too."""
    a = _with_spectrum(SPECTRA[kind](n), seed=n)
    assert_exports(Fn(torch.linalg.eigvalsh), (a,), rtol=0, atol=1e-13)


def test_eigvalsh_16_f64():
    a = _with_spectrum(SPECTRA["signed_illcond"](16), seed=3)
    assert_exports(Fn(torch.linalg.eigvalsh), (a,), rtol=0, atol=1e-13)


def test_eigvalsh_scaled_and_zero():
    big = _with_spectrum([1e200, -3e199, 5e198], seed=2)
    assert_exports(Fn(torch.linalg.eigvalsh), (big,), rtol=1e-12, atol=0)
    assert_exports(Fn(torch.linalg.eigvalsh), (torch.zeros(2, 3, 3),))


def test_eigvalsh_dynamic_batch():
    a = _randn(2, 4, 4)
    assert_exports(Fn(torch.linalg.eigvalsh), (a,), dynamic_axes={"input_0": {0: "B"}},
                   more_args=[(_randn(5, 4, 4, seed=7),)])


@pytest.mark.parametrize("shape", [(0, 3, 3), (2, 0, 0)], ids=str)
def test_eigvalsh_empty(shape):
    assert_exports(Fn(torch.linalg.eigvalsh), (torch.zeros(shape),))


# ---------------------------------------------------------------------------- svdvals
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (1, 4), (4, 1), (2, 6, 6), (40, 3)], ids=str)
def test_svdvals_f32(shape):
    assert_exports(Fn(torch.linalg.svdvals), (_randn(*shape, seed=len(shape)),))


@pytest.mark.parametrize("kind", ["illcond", "cluster_1e-9", "graded"])
def test_svdvals_f64_relative_accuracy(kind):
    """Every singular value to ~eps * |A| (through eigenvalues of A^T A the small ones would
    carry errors of ~sqrt(eps) * |A| = 1e-8)."""
    s = SPECTRA[kind](6).abs()
    a = _with_singular(s, 8)
    assert_exports(Fn(torch.linalg.svdvals), (a,), rtol=0, atol=1e-14)
    assert_exports(Fn(torch.linalg.svdvals), (a.T.contiguous(),), rtol=0, atol=1e-14)


def test_svdvals_16_f64_hard():
    """The largest size with the slowest kinds measured: half rank, columns over 12 decades."""
    half = _with_singular([1.0] * 8 + [0.0] * 8, 18, seed=4)
    graded = _randn(16, 16, dtype=torch.float64, seed=5) * 10.0 ** -torch.linspace(0, 12, 16,
                                                                               dtype=torch.float64)
    assert_exports(Fn(lambda a, b: (torch.linalg.svdvals(a), torch.linalg.svdvals(b))),
                   (half, graded), rtol=0, atol=1e-13)


def test_pinv_f64_tight():
    a = _randn(2, 12, 16, dtype=torch.float64, seed=6)
    assert_exports(Fn(torch.linalg.pinv), (a,), rtol=1e-9, atol=1e-12)


def test_svdvals_rank_deficient_and_empty():
    a, b = _randn(6, 2), _randn(5, 2, seed=1)
    assert_exports(Fn(lambda x, y: torch.linalg.svdvals(x @ y.T)), (a, b))
    assert_exports(Fn(torch.linalg.svdvals), (torch.zeros(5, 0),))


# ---------------------------------------------------------------------------- norms, cond
@pytest.mark.parametrize("ord", ["nuc", 2, -2])
@pytest.mark.parametrize("dim,keepdim", [((-2, -1), False), ((0, 2), True), ((2, 0), False)],
                         ids=str)
def test_matrix_norm_spectral(ord, dim, keepdim):
    x = _randn(4, 2, 3)
    assert_exports(Fn(lambda a: torch.linalg.matrix_norm(a, ord, dim, keepdim)), (x,))


def test_norm_forms_with_spectral_ords():
    x = _randn(3, 5)
    assert_exports(Fn(lambda a: (torch.norm(a, p="nuc"), torch.linalg.norm(a, 2),
                                 torch.linalg.norm(a, -2), torch.nuclear_norm(a),
                                 torch.linalg.matrix_norm(a, 2, dtype=torch.float64))), (x,))


@pytest.mark.parametrize("ord", [1, -1, math.inf, -math.inf])
def test_matrix_norm_swapped_dims(ord):
    """dim=(1, 0) is the norm of the transpose."""
    assert_exports(Fn(lambda a: torch.linalg.matrix_norm(a, ord, dim=(1, 0))), (_randn(3, 4),))


@pytest.mark.parametrize("p", [None, 2, -2, "nuc", "fro", 1, -1, math.inf, -math.inf])
def test_cond(p):
    x = _randn(2, 4, 4, seed=3)
    assert_exports(Fn(lambda a: torch.linalg.cond(a, p)), (x,))


def test_cond_rectangular_and_singular_inverse_norm():
    assert_exports(Fn(lambda a: torch.linalg.cond(a)), (_randn(5, 3),))
    assert_exports(Fn(lambda a: torch.linalg.cond(a, "fro")), (torch.zeros(3, 3),))


# ---------------------------------------------------------------------------- matrix_rank
def _low_rank(seed=0):
    return _randn(2, 5, 2, seed=seed) @ _randn(2, 2, 5, seed=seed + 1)


@pytest.mark.parametrize("kw", [{}, {"atol": 0.5}, {"rtol": 0.3}, {"atol": 0.1, "rtol": 0.2},
                                {"hermitian": True}, {"atol": 0.0}], ids=str)
def test_matrix_rank(kw):
    full = _randn(2, 5, 5, seed=4)
    assert_exports(Fn(lambda a, b: (torch.linalg.matrix_rank(a, **kw),
                                    torch.linalg.matrix_rank(b, **kw))), (full, _low_rank()))


def test_matrix_rank_tensor_tols_and_rectangular():
    full = _randn(2, 4, 6, seed=5)
    tol = torch.tensor([0.5, 20.0])
    assert_exports(Fn(lambda a, t: (torch.linalg.matrix_rank(a, atol=t),
                                    torch.linalg.matrix_rank(a, rtol=t / 100),
                                    torch.linalg.matrix_rank(a, tol=1.0))), (full, tol))
    assert_exports(Fn(lambda a: torch.linalg.matrix_rank(a)), (torch.zeros(3, 3),))


# ---------------------------------------------------------------------------- pinv / lstsq
@pytest.mark.parametrize("shape", [(5, 5), (6, 3), (3, 6), (2, 4, 4), (30, 2)], ids=str)
def test_pinv(shape):
    assert_exports(Fn(torch.linalg.pinv), (_randn(*shape, seed=6),))


def test_pinv_rank_deficient_and_tolerances():
    a = _low_rank(2)
    assert_exports(Fn(lambda x: (torch.linalg.pinv(x), torch.linalg.pinv(x, rtol=0.3),
                                 torch.linalg.pinv(x, atol=1.0, rtol=0.01),
                                 torch.linalg.pinv(x, hermitian=True),
                                 torch.pinverse(x, rcond=0.2))), (a,))
    # pinverse's default rcond=1e-15 inverts float32 rounding noise on rank-deficient input:
    # only full-rank matrices have a defined result
    assert_exports(Fn(torch.pinverse), (_randn(3, 4, 4, seed=9),))
    assert_exports(Fn(lambda x, r: torch.linalg.pinv(x, rtol=r)),
                   (_randn(5, 5, seed=8), torch.tensor(0.2)))
    assert_exports(Fn(torch.linalg.pinv), (torch.zeros(3, 4),))


# gelsd/gelss on tall matrices are refused (test_refusals)
_LSTSQ = [(d, m, n) for d in ("gels", "gelsy", "gelsd", "gelss")
          for m, n in ((5, 3), (3, 3), (2, 4)) if not (d in ("gelsd", "gelss") and m > n)]


@pytest.mark.parametrize("driver,m,n", _LSTSQ, ids=[f"{d}-{m}x{n}" for d, m, n in _LSTSQ])
def test_lstsq(driver, m, n, capture):
    """Every output of every driver (residuals, rank and singular values where PyTorch
    gives them), through both captures: torch.export keeps lstsq one op (t2n::linalg_lstsq,
    t2n/capture/leaf_ops.py) whose output shapes are the driver's."""
    a, b = _randn(2, m, n, seed=m), _randn(2, m, 2, seed=n + 10)
    assert_exports(Fn(lambda x, y: torch.linalg.lstsq(x, y, driver=driver)), (a, b))


def test_lstsq_vector_rhs_broadcast_and_rcond(capture):
    a = _randn(5, 3)
    assert_exports(Fn(lambda x, y: torch.linalg.lstsq(x, y, driver="gels")), (a, _randn(5)))
    assert_exports(Fn(lambda x, y: torch.linalg.lstsq(x, y)),
                   (_randn(3, 4, 2, seed=2), _randn(1, 4, 3, seed=3)))
    assert_exports(Fn(lambda x, y: torch.linalg.lstsq(x, y, rcond=0.5, driver="gelsd")),
                   (_low_rank(4)[0], _randn(5, 2)))
    # the rank and singular values have self's own batch, the solution the broadcast one
    assert_exports(Fn(lambda x, y: torch.linalg.lstsq(x, y)),
                   (_randn(1, 5, 3, seed=4), _randn(2, 5, 2, seed=5)))
    assert_exports(Fn(lambda x, y: torch.linalg.lstsq(x, y, driver="gelsd")),
                   (_randn(3, 1, 2, 4, seed=6), _randn(1, 2, 2, 1, seed=7)))


def test_lstsq_gelsy_rank_deficient_f64(capture):
    """gelsy's rank detection and minimum-norm solution on exactly rank-2 matrices."""
    a = _randn(2, 6, 2, dtype=torch.float64, seed=3) @ _randn(2, 2, 4, dtype=torch.float64,
                                                               seed=4)
    b = _randn(2, 6, 3, dtype=torch.float64, seed=5)
    assert_exports(Fn(lambda x, y: torch.linalg.lstsq(x, y)), (a, b), rtol=1e-8, atol=1e-10)


def test_pinv_lstsq_dynamic_batch(capture):
    assert_exports(Fn(lambda x, y: (torch.linalg.pinv(x), torch.linalg.lstsq(x, y)[0])),
                   (_randn(2, 5, 3), _randn(2, 5, 2, seed=1)),
                   dynamic_axes={"input_0": {0: "B"}, "input_1": {0: "B"}},
                   more_args=[(_randn(4, 5, 3, seed=2), _randn(4, 5, 2, seed=3))])


# ---------------------------------------------------------------------------- refusals
def _refused(fn, *args, match, **kwargs):
    with pytest.raises(T2NError, match=match):
        t2n.export(Fn(fn), args, "/tmp/unused.nnef", **kwargs)


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_refusals(capture):
    kw = {"capture": capture}
    _refused(torch.linalg.eigvalsh, _randn(17, 17), match="larger than 16", **kw)
    _refused(torch.linalg.svdvals, _randn(17, 20), match="shorter side exceeds 16", **kw)
    _refused(torch.linalg.eigh, _randn(3, 3), match="LAPACK", **kw)
    _refused(lambda x: torch.linalg.svd(x), _randn(3, 3), match="LAPACK", **kw)
    _refused(lambda x: torch.svd(x), _randn(3, 3), match="LAPACK", **kw)
    # the residuals' shape depends on the rank found at run time
    _refused(lambda x, y: torch.linalg.lstsq(x, y, driver="gelsd"), _randn(5, 3), _randn(5, 2),
             match="full rank", **kw)
    _refused(lambda x, y: torch.linalg.lstsq(x, y, driver="gelss").residuals, _randn(2, 5, 3),
             _randn(2, 5), match="full rank", **kw)


def test_refuses_dynamic_sides():
    with pytest.raises(T2NError, match="static"):
        t2n.export(Fn(torch.linalg.svdvals), (_randn(4, 4),), "/tmp/unused.nnef",
                   dynamic_axes={"input_0": {1: "N"}})


def test_vectors_of_empty_matrices():
    """Nothing to choose a sign for: the empty results export."""
    assert_exports(Fn(lambda x: torch.linalg.eigh(x)), (torch.zeros(0, 3, 3),))
    assert_exports(Fn(lambda x: torch.linalg.svd(x)), (torch.zeros(0, 0),))
    assert_exports(Fn(lambda x: torch.svd(x)), (torch.zeros(2, 0, 0),))


def test_svd_without_vectors():
    """torch.svd(compute_uv=False): zero-filled U and V beside the singular values."""
    # the zero-filled U and V depend on no input: declared so
    assert_exports(Fn(lambda x: torch.svd(x, compute_uv=False)), (_randn(2, 3, 5),),
                   constant_outputs=["output_0", "output_2"])
    assert_exports(Fn(lambda x: torch.ops.aten._linalg_svd(x, compute_uv=False)),
                   (_randn(4, 3),), constant_outputs=["output_0", "output_2"])
    assert_exports(Fn(lambda x: torch.ops.aten._linalg_eigh(x, "U", False)), (_randn(3, 3),))


def test_non_finite_inputs_give_nan(tmp_path):
    """PyTorch raises on inf/NaN in an SVD; the exported graph cannot raise and returns NaN
    for that matrix (never finite numbers)."""
    x = _randn(3, 3, 3)
    x[1, 2, 0] = float("inf")  # in the lower triangle, read by eigvalsh too
    x[2, 1, 1] = float("nan")

    class Guarded(torch.nn.Module):
        def forward(self, a):
            return (torch.linalg.svdvals(a), torch.linalg.eigvalsh(a),
                    torch.linalg.matrix_norm(a, 2), torch.linalg.pinv(a))

    path = str(tmp_path / "nonfinite.nnef.tar")
    t2n.export(Guarded(), (_randn(3, 3, 3),), path)
    from t2n.check.tract_runner import run_in_tract
    outs = run_in_tract(path, [x.numpy()])
    for o in outs:
        o = torch.as_tensor(o)
        assert torch.isnan(o[1]).all() and torch.isnan(o[2]).all(), o
        assert torch.isfinite(o[0]).all(), o
