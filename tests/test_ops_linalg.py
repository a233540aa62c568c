"""Matrix products: torch eager vs tract (linear in every rank, addmm beta/alpha, matmul
with 1-D operands, batches and broadcast batches, mm, bmm, float64)."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from opcases import Apply, Fn, assert_cases


def test_linear_modules():
    torch.manual_seed(0)
    lin, nobias = nn.Linear(6, 4), nn.Linear(6, 3, bias=False)
    assert_cases({
        "linear 1-d input": Apply(lin, lambda x: x[0, 0]),
        "linear 2-d input": Apply(lin, lambda x: x[0]),
        "linear 3-d input": lin,
        "linear no bias": nobias,
        "linear 4-d input": Apply(lin, lambda x: x.reshape(1, 2, 5, 6)),
    }, (torch.randn(2, 5, 6),))


def test_linear_runtime_weight_and_bias():
    assert_cases({
        "F.linear runtime w, b": lambda x, w, b: F.linear(x, w, b),
        "F.linear runtime w no bias": lambda x, w, b: F.linear(x, w),
        "F.linear 1-d weight": lambda x, w, b: F.linear(x, w[0]),
    }, (torch.randn(3, 6), torch.randn(4, 6), torch.randn(4)))


def test_addmm():
    assert_cases({
        "addmm default": lambda b, m1, m2: torch.addmm(b, m1, m2),
        "addmm beta 0.5 alpha 2": lambda b, m1, m2: torch.addmm(b, m1, m2, beta=0.5, alpha=2),
        "addmm beta 0 ignores nan bias": lambda b, m1, m2: torch.addmm(b * float("nan"), m1,
                                                                        m2, beta=0),
        "addmm 1-d bias": lambda b, m1, m2: torch.addmm(b[0], m1, m2, alpha=-1),
        "addmm int beta": lambda b, m1, m2: torch.addmm(b, m1, m2, beta=3),
    }, (torch.randn(3, 5), torch.randn(3, 4), torch.randn(4, 5)))


MATMUL_SHAPES = {
    "1-d @ 1-d": ((4,), (4,)),
    "1-d @ 2-d": ((4,), (4, 3)),
    "2-d @ 1-d": ((3, 4), (4,)),
    "2-d @ 2-d": ((3, 4), (4, 5)),
    "1-d @ 3-d": ((4,), (2, 4, 3)),
    "3-d @ 1-d": ((2, 3, 4), (4,)),
    "3-d @ 2-d": ((2, 3, 4), (4, 5)),
    "2-d @ 3-d": ((3, 4), (2, 4, 5)),
    "batched 3-d": ((2, 3, 4), (2, 4, 5)),
    "broadcast batches 4-d @ 3-d": ((2, 1, 3, 4), (5, 4, 2)),
    "broadcast batches size 1": ((1, 3, 4), (6, 4, 2)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_matmul_shapes(dtype):
    shapes = list(MATMUL_SHAPES.values())
    args = tuple(torch.randn(*s, dtype=dtype) for pair in shapes for s in pair)
    cases = {name: (lambda k: lambda *a: torch.matmul(a[2 * k], a[2 * k + 1]))(k)
             for k, name in enumerate(MATMUL_SHAPES)}
    assert_cases(cases, args)


def test_mm_bmm_and_operator():
    assert_cases({
        "mm": lambda a, b, c, d: torch.mm(a, b),
        "bmm": lambda a, b, c, d: torch.bmm(c, d),
        "@ operator": lambda a, b, c, d: c @ d,
        "Tensor.matmul transposed operand": lambda a, b, c, d: a.matmul(a.t()),
    }, (torch.randn(3, 4), torch.randn(4, 2), torch.randn(2, 3, 4), torch.randn(2, 4, 5)))


def test_integer_products_exact():
    """Integer matmul/einsum (tract aborts on i64 kernels) take the element-wise form: exact,
    overflow wrapping as in PyTorch, every matmul rank pattern, diagonals, uint8/int32."""
    g = torch.Generator().manual_seed(0)
    shapes = list(MATMUL_SHAPES.values())
    ints = tuple(torch.randint(-9, 10, s, generator=g) for pair in shapes for s in pair)
    cases = {f"int64 {name}": (lambda k: lambda *a: torch.matmul(a[2 * k], a[2 * k + 1]))(k)
             for k, name in enumerate(MATMUL_SHAPES)}
    n = len(ints)
    big = torch.tensor([[2 ** 62, 3], [5, -(2 ** 61)]])
    u8 = torch.randint(0, 255, (3, 4), generator=g, dtype=torch.uint8)
    i32 = torch.randint(-2 ** 30, 2 ** 30, (3, 4), generator=g, dtype=torch.int32)
    cases.update({
        "int64 overflow wraps": lambda *a: a[n] @ a[n],
        "uint8 wraps": lambda *a: a[n + 1] @ a[n + 1].t(),
        "int32 wraps": lambda *a: a[n + 2] @ a[n + 2].t(),
        "addmm int alpha beta": lambda *a: torch.addmm(a[6] @ a[7], a[6], a[7], beta=2, alpha=-3),
        "einsum trace": lambda *a: torch.einsum("ii->", a[6] @ a[6].t()),
        "einsum diag batched": lambda *a: torch.einsum("bii->bi", a[16] @ a[16].transpose(1, 2)),
        "einsum outer contraction": lambda *a: torch.einsum("bij,jk,k->bi", a[16], a[7], a[7][0]),
        "einsum ellipsis": lambda *a: torch.einsum("...ij,...jk->...ik", a[16], a[17]),
        "bilinear": lambda *a: torch.nn.functional.bilinear(a[6], a[6], a[15][:, :, :4]),
        "baddbmm": lambda *a: torch.baddbmm(a[16] @ a[17], a[16], a[17], alpha=2),
        "tensordot": lambda *a: torch.tensordot(a[16], a[17], dims=([0], [0])),
        "matrix_power": lambda *a: torch.linalg.matrix_power(a[6] @ a[6].t(), 3),
    })
    assert_cases(cases, ints + (big, u8, i32))



def test_addr_alpha_zero_keeps_nan_and_inf_of_the_vectors():
    """0 * vec1 is NaN where vec1 is NaN or inf (PyTorch's addr kernel multiplies); tract
    simplifies a product with a zero constant to zeros, which dropped them."""
    v1 = torch.tensor([1.0, float("nan"), float("inf"), -2.0])
    assert_cases({
        "addr alpha 0": lambda m, a, b: torch.addr(m, a, b, beta=0.5, alpha=0),
    }, (torch.randn(4, 3), v1, torch.tensor([3.0, -1.0, 0.5])))
