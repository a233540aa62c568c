"""Two-operand linear algebra whose right-hand side has more batch axes than the matrix.

PyTorch broadcasts the batch axes of ``A`` and ``B`` in solve, solve_ex, solve_triangular,
triangular_solve, lu_solve and cholesky_solve; ``solve_ex``'s ``info`` keeps ``A``'s own
batch shape (one per factored matrix), which the broadcast kernel must cut back to (it gave
"internal: mapping produced rank 2"). Sizes on both sides of the unrolled form's limit
(16 x 16) and a dynamic batch axis on ``B``; every case runs in tract against PyTorch.
"""

import pytest
import torch

from t2n.testing import FunctionModule as Fn, assert_exports


def _spd(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*shape, generator=g, dtype=torch.float64)
    return (a @ a.mT + shape[-1] * torch.eye(shape[-1], dtype=torch.float64)).float()


def _rhs(*shape, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


OPS = {
    "solve": lambda a, b: torch.linalg.solve(a, b),
    "solve_ex": lambda a, b: torch.linalg.solve_ex(a, b),
    "solve_right": lambda a, b: torch.linalg.solve(a, b.mT, left=False),
    "solve_triangular": lambda a, b: torch.linalg.solve_triangular(
        torch.linalg.cholesky(a), b, upper=False),
    "solve_triangular_right": lambda a, b: torch.linalg.solve_triangular(
        torch.linalg.cholesky(a).mT, b.mT, upper=True, left=False),
    "triangular_solve": lambda a, b: torch.triangular_solve(
        b, torch.linalg.cholesky(a), upper=False)[0],
    "lu_solve": lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b),
    "lu_solve_adjoint": lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b,
                                                           adjoint=True),
    "cholesky_solve": lambda a, b: torch.cholesky_solve(b, torch.linalg.cholesky(a)),
}


@pytest.mark.filterwarnings("ignore:.*arguments reversed")
@pytest.mark.filterwarnings("ignore:torch.linalg.solve_triangular has its arguments")
@pytest.mark.parametrize("n", [3, 20])
@pytest.mark.parametrize("a_batch", [(), (2,), (1, 2)])
@pytest.mark.parametrize("op", OPS)
def test_b_with_more_batch_axes_than_a(op, a_batch, n):
    a = _spd(*a_batch, n, n)
    b = _rhs(4, 2, n, 2)
    assert_exports(Fn(OPS[op]), (a, b), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("op", ["solve_ex", "lu_solve", "cholesky_solve"])
def test_a_dynamic_batch_of_right_hand_sides(op):
    a = _spd(3, 3)
    assert_exports(Fn(OPS[op]), (a, _rhs(4, 3, 2)), rtol=1e-3, atol=1e-4,
                   input_names=["a", "b"], dynamic_axes={"b": {0: "N"}},
                   more_args=[(a, _rhs(7, 3, 2, seed=3))])


def test_solve_ex_info_names_the_singular_matrix_of_a():
    a = torch.stack([_spd(3, 3), torch.zeros(3, 3)])  # the second is singular
    outs = assert_exports(Fn(lambda a, b: torch.linalg.solve_ex(a, b)[1]),
                          (a, _rhs(5, 2, 3, 2)))
    assert outs.outputs[0].shape == [2]
