"""Matrix products every family can use: torch.matmul semantics over any ranks (integer
products refused: tract aborts on them), the addmm-style affine combination, one
``tract_core_einsum``."""

from __future__ import annotations

from t2n import dtypes


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


def einsum_op(g, expr: str, operands, out_shape, dtype=None):
    """One ``tract_core_einsum`` (no ellipsis in ``expr``) accumulating in ``dtype``."""
    dtype = dtype or operands[0].dtype
    operands = [g.cast(x, dtype) for x in operands]
    return g.op("tract_core_einsum", list(operands), expr=expr, acc=dtypes.tract_name(dtype),
                output="", out_dtype=dtype, out_shape=list(out_shape))
