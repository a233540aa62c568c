"""Matrix products: linear, addmm, matmul, mm, bmm.

tract's ``matmul`` wants operands of equal rank (batch axes of size 1 broadcast) and aborts
on i64 operands, so 1-D operands are lifted to matrices, ranks equalised, and integer
products are refused rather than crashing.
"""

from __future__ import annotations

from t2n.registry import aten


def _check_float(g, *xs):
    for x in xs:
        if x is not None and not x.dtype.is_floating_point:
            raise g.error(f"matrix product of {x.dtype} tensors is not supported "
                          "(tract aborts on integer matmul)")


def matmul_nd(g, a, b, transpose_b=False):
    """torch.matmul semantics for any ranks >= 1."""
    _check_float(g, a, b)
    squeeze = []
    if a.rank == 1:
        a = g.unsqueeze(a, [0])
        squeeze_a = True
    else:
        squeeze_a = False
    if b.rank == 1:
        b = g.unsqueeze(b, [1] if not transpose_b else [0])
        squeeze_b = True
    else:
        squeeze_b = False
    rank = max(a.rank, b.rank)
    a = g.unsqueeze_to_rank(a, rank)
    b = g.unsqueeze_to_rank(b, rank)
    m = a.shape[-2]
    n = b.shape[-2] if transpose_b else b.shape[-1]
    batch = [x if not (isinstance(x, int) and x == 1) else y
             for x, y in zip(a.shape[:-2], b.shape[:-2])]
    out = g.op("matmul", a, b, transposeA=False, transposeB=transpose_b,
               out_shape=batch + [m, n])
    if squeeze_a and squeeze_b:
        return g.squeeze(out, [rank - 2, rank - 1])
    if squeeze_a:
        squeeze.append(rank - 2)
    if squeeze_b:
        squeeze.append(rank - 1)
    return g.squeeze(out, squeeze)


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


def affine_product(g, self, prod, beta, alpha):
    """``beta * self + alpha * prod`` as the addmm family defines it (beta=0 ignores self,
    NaN included)."""
    dtype = prod.dtype
    if alpha != 1:
        prod = g.binary("mul", prod, float(alpha), dtype)
    if beta == 0:
        return prod
    bias = self if beta == 1 else g.binary("mul", self, float(beta), dtype)
    return g.binary("add", prod, bias, dtype)


@aten("addmm")
def addmm(g, self, mat1, mat2, beta=1, alpha=1):
    return affine_product(g, self, matmul_nd(g, mat1, mat2), beta, alpha)
