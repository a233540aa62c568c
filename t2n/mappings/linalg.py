"""Matrix products: linear, addmm, matmul, mm, bmm.

tract's ``matmul`` wants operands of equal rank (batch axes of size 1 broadcast) and aborts
on i64 operands, so 1-D operands are lifted to matrices, ranks equalised, and integer
products are refused rather than crashing.
"""

from __future__ import annotations

from t2n.mappings.helpers.matrix import affine_product, matmul_nd
from t2n.walk.registry import aten


@aten("matmul")
def matmul(g, self, other):
    return matmul_nd(g, self, other)


@aten("mm", "bmm")
def mm(g, self, mat2):
    return matmul_nd(g, self, mat2)


@aten("linear")
def linear(g, input, weight, bias=None):
    y = matmul_nd(g, input, weight, transpose_b=True)
    if bias is not None:
        y = g.binary("add", y, bias, y.dtype)
    return y


@aten("addmm")
def addmm(g, self, mat1, mat2, beta=1, alpha=1):
    return affine_product(g, self, matmul_nd(g, mat1, mat2), beta, alpha)
