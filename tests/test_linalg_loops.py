"""Triangular solves larger than the unrolled limit (16 x 16): one ``tract_core_scan`` per
solve (op_mappings/helpers/trsm_loop.py), torch eager (LAPACK) vs tract.

Every flag of ``linalg.solve_triangular`` and ``triangular_solve``, f32 and f64 (the
dtypes PyTorch's CPU kernels take), broadcast and dynamic batches, a zero diagonal (inf/NaN
as LAPACK gives them), and an op count that does not grow with the matrix side.
"""

import pytest
import torch

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


def test_large_triangular_solve_op_count_is_fixed():
    counts = []
    for n in (20, 64):
        a, b = _tri(n, 2), torch.randn(2, n, 3)
        result = assert_exports(lambda_module(
            lambda a, b: L.solve_triangular(a, b, upper=True)), (a, b), rtol=1e-3, atol=1e-4)
        counts.append(sum(result.op_histogram.values()))
    assert counts[0] == counts[1], counts


def lambda_module(fn):
    from opcases import Fn

    return Fn(fn)
