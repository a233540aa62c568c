"""Matrix products every family can use: torch.matmul semantics over any ranks, the
addmm-style affine combination, one ``tract_core_einsum``.

tract computes matrix products of floats (and i32) only: an i64 matmul or einsum aborts the
process. Integer products are therefore written element-wise: every operand is laid out
over the union of the equation's axes (unit axes where it lacks one), the operands are
multiplied with broadcasting and the contracted axes summed. tract's integer ``mul`` wraps
(``wrapping_mul``) and its integer sum wraps too, so the result is PyTorch's exactly,
overflow included (two's-complement sums do not depend on the order of the terms). The op
count is fixed by the equation, not by the sizes; the intermediate holds every
(output, contracted) combination, which is what the product costs anyway without a kernel.
"""

from __future__ import annotations

import torch

from t2n import dtypes


_LETTERS = "abcdefghijklmnopqrstuvw"


def _check_numeric(g, *xs):
    for x in xs:
        if x is not None and x.dtype == torch.bool:
            raise g.error("matrix product of torch.bool tensors is not supported "
                          "(PyTorch has none either)")


def matmul_nd(g, a, b, transpose_b=False):
    """torch.matmul semantics for any ranks >= 1."""
    _check_numeric(g, a, b)
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
    if a.dtype.is_floating_point:
        out = g.op("matmul", a, b, transposeA=False, transposeB=transpose_b,
                   out_shape=batch + [m, n])
    else:
        lead = _LETTERS[:rank - 2]
        out = einsum_op(g, f"{lead}xy,{lead}{'zy' if transpose_b else 'yz'}->{lead}xz",
                        [a, b], batch + [m, n], a.dtype)
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


def _letter_sizes(terms, operands) -> dict:
    sizes: dict = {}
    for term, x in zip(terms, operands):
        for c, n in zip(term, x.shape):
            if c not in sizes or (isinstance(sizes[c], int) and sizes[c] == 1):
                sizes[c] = n
    return sizes


def _elementwise_einsum(g, expr: str, operands, dtype):
    """``expr`` (no ellipsis, an explicit output) as broadcast multiplies and one sum."""
    lhs, out = expr.split("->")
    terms = lhs.split(",")
    order = list(out) + [c for c in dict.fromkeys("".join(terms)) if c not in out]
    sizes = _letter_sizes(terms, operands)
    prod = None
    for term, x in zip(terms, operands):
        x = g.cast(x, dtype)
        term = list(term)
        # a letter repeated inside one operand takes its diagonal: mask with i == j, sum j
        while len(set(term)) < len(term):
            c = next(c for c in term if term.count(c) > 1)
            i = term.index(c)
            j = term.index(c, i + 1)
            n = x.shape[i] if not (isinstance(x.shape[i], int) and x.shape[i] == 1) \
                else x.shape[j]
            r = g.arange(n)
            shape_i = [1] * x.rank
            shape_i[i] = n
            shape_j = [1] * x.rank
            shape_j[j] = n
            eye = g.binary("eq", g.reshape(r, shape_i), g.reshape(r, shape_j), torch.int64,
                           out_dtype=torch.bool)
            masked = g.op("select", eye, x, g.scalar(0, dtype), out_dtype=dtype,
                          out_shape=[n if k in (i, j) else d for k, d in enumerate(x.shape)])
            x = g.reduce("sum_reduce", masked, [j], keepdim=False)
            del term[j]
        present = [c for c in order if c in term]
        x = g.transpose(x, [term.index(c) for c in present])
        x = g.unsqueeze(x, [k for k, c in enumerate(order) if c not in term])
        prod = x if prod is None else g.binary("mul", prod, x, dtype)
    contracted = list(range(len(out), len(order)))
    prod = g.broadcast_to(prod, [sizes[c] for c in order])
    if contracted:
        prod = g.reduce("sum_reduce", prod, contracted, keepdim=False)
    return prod


def einsum_op(g, expr: str, operands, out_shape, dtype=None):
    """One ``tract_core_einsum`` (no ellipsis in ``expr``) accumulating in ``dtype``;
    integer products take the exact element-wise form (see the module docstring)."""
    dtype = dtype or operands[0].dtype
    if not dtype.is_floating_point:
        return _elementwise_einsum(g, expr, operands, dtype)
    operands = [g.cast(x, dtype) for x in operands]
    return g.op("tract_core_einsum", list(operands), expr=expr, acc=dtypes.tract_name(dtype),
                output="", out_dtype=dtype, out_shape=list(out_shape))
