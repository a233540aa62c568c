"""Vector and tensor products beyond matmul: dot, vdot, mv, addmv, addbmm, addr, outer,
inner, kron, tensordot, vecdot, multi_dot, cross.

Float products go through ``matmul`` / ``tract_core_einsum``; integer operands are refused
(tract aborts on i64 matrix products), except where the product is element-wise.
"""

from __future__ import annotations

import string

import torch

from op_mappings.linalg import matmul_nd
from t2n.registry import aten


def _elementwise_sum(g, a, b, axes, dtype):
    p = g.binary("mul", a, b, dtype)
    return g.reduce("sum_reduce", p, axes, keepdim=False)


@aten("dot", "vdot", "inner")
def dot(g, self, other):
    d = g.out_dtype()
    if self.rank == 0 or other.rank == 0:
        return g.binary("mul", self, other, d)
    if self.rank == 1 and other.rank == 1:
        return _elementwise_sum(g, self, other, [0], d)
    # inner for higher ranks: contract the last axes
    return tensordot(g, self, other, [self.rank - 1], [other.rank - 1])


@aten("mv")
def mv(g, self, vec):
    return matmul_nd(g, self, vec)


@aten("addmv")
def addmv(g, self, mat, vec, beta=1, alpha=1):
    return _affine(g, self, matmul_nd(g, mat, vec), beta, alpha)


@aten("addbmm")
def addbmm(g, self, batch1, batch2, beta=1, alpha=1):
    prod = g.reduce("sum_reduce", matmul_nd(g, batch1, batch2), [0], keepdim=False)
    return _affine(g, self, prod, beta, alpha)


def _affine(g, self, prod, beta, alpha):
    d = prod.dtype
    if alpha != 1:
        prod = g.binary("mul", prod, float(alpha), d)
    if beta == 0:
        return prod
    bias = self if beta == 1 else g.binary("mul", self, float(beta), d)
    return g.binary("add", prod, bias, d)


@aten("outer", "ger")
def outer(g, self, vec2):
    d = g.out_dtype()
    a = g.reshape(self, [self.shape[0], 1])
    return g.binary("mul", a, vec2, d)


@aten("addr")
def addr(g, self, vec1, vec2, beta=1, alpha=1):
    d = g.out_dtype()
    prod = outer(g, vec1, vec2)
    if d == torch.bool:
        return g.binary("or", g.binary("and", self, beta, torch.bool) if beta is not True
                        else self, prod, torch.bool)
    if alpha != 1:
        prod = g.binary("mul", prod, alpha, d)
    if beta == 0:
        return prod
    bias = self if beta == 1 else g.binary("mul", self, beta, d)
    return g.binary("add", prod, bias, d)


@aten("kron")
def kron(g, self, other):
    d = g.out_dtype()
    rank = max(self.rank, other.rank)
    a = g.unsqueeze_to_rank(g.cast(self, d), rank)
    b = g.unsqueeze_to_rank(g.cast(other, d), rank)
    # interleave: a -> [a0, 1, a1, 1, ...], b -> [1, b0, 1, b1, ...]
    a_shape, b_shape = [], []
    for x, y in zip(a.shape, b.shape):
        a_shape += [x, 1]
        b_shape += [1, y]
    p = g.binary("mul", g.reshape(a, a_shape), g.reshape(b, b_shape), d)
    return g.reshape(p, [x * y for x, y in zip(a.shape, b.shape)])


def _einsum(g, inputs, expr, dtype):
    if not dtype.is_floating_point:
        raise g.error(f"contraction of {dtype} tensors is not supported (tract aborts on "
                      "integer einsum)")
    lhs, out = expr.split("->")
    sizes = {}
    for spec, x in zip(lhs.split(","), inputs):
        for c, n in zip(spec, x.shape):
            if not (isinstance(n, int) and n == 1) or c not in sizes:
                sizes[c] = n
    return g.op("tract_core_einsum", [g.cast(x, dtype) for x in inputs], expr=expr,
                acc=_acc(dtype), out_dtype=dtype, out_shape=[sizes[c] for c in out])


def _acc(dtype):
    return {torch.float32: "f32", torch.float16: "f32", torch.float64: "f64"}[dtype]


@aten("tensordot")
def tensordot(g, self, other, dims_self, dims_other, *_):
    d = g.out_dtype()
    # contracted axes of size 1 against size n broadcast in torch: make that explicit
    sa, sb = list(self.shape), list(other.shape)
    for i, j in zip(dims_self, dims_other):
        i, j = i % self.rank, j % other.rank
        if sa[i] == 1 and sb[j] != 1:
            sa[i] = sb[j]
        elif sb[j] == 1 and sa[i] != 1:
            sb[j] = sa[i]
    self, other = g.broadcast_to(self, sa), g.broadcast_to(other, sb)
    letters = iter(string.ascii_letters)
    a = [next(letters) for _ in range(self.rank)]
    b = [next(letters) for _ in range(other.rank)]
    for i, j in zip(dims_self, dims_other):
        b[j % other.rank] = a[i % self.rank]
    contracted = {a[i % self.rank] for i in dims_self}
    out = [c for c in a if c not in contracted] + [c for c in b if c not in contracted]
    r = _einsum(g, [self, other], f"{''.join(a)},{''.join(b)}->{''.join(out)}", d)
    if d == torch.float16:
        r = g.cast(r, d)
    return r


@aten("linalg_vecdot")
def vecdot(g, x, y, dim=-1):
    d = g.out_dtype()
    rank = max(x.rank, y.rank)
    a = g.unsqueeze_to_rank(x, rank)
    b = g.unsqueeze_to_rank(y, rank)
    return _elementwise_sum(g, a, b, [dim % rank], d)


@aten("linalg_multi_dot", "chain_matmul")
def multi_dot(g, tensors):
    acc = tensors[0]
    for t in tensors[1:]:
        acc = matmul_nd(g, acc, t)
    return acc


@aten("linalg_cross", "cross")
def cross(g, self, other, dim=None):
    d = g.out_dtype()
    rank = max(self.rank, other.rank)
    a = g.unsqueeze_to_rank(g.cast(self, d), rank)
    b = g.unsqueeze_to_rank(g.cast(other, d), rank)
    if dim is None:
        dim = next(i for i, (x, y) in enumerate(zip(a.shape, b.shape)) if x == 3 or y == 3)
    axis = dim % rank

    def comp(t, i):
        return g.slice(t, axis, i, i + 1)

    parts = []
    for i, j in ((1, 2), (2, 0), (0, 1)):
        parts.append(g.binary("sub", g.binary("mul", comp(a, i), comp(b, j), d),
                              g.binary("mul", comp(a, j), comp(b, i), d), d))
    return g.concat(parts, axis)
