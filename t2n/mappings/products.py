"""Vector and tensor products beyond matmul: dot, vdot, mv, addmv, addbmm, addr, outer,
inner, kron, tensordot, vecdot, multi_dot, cross.

Float products go through ``matmul`` / ``tract_core_einsum``; integer products take the
exact element-wise form of :mod:`t2n.mappings.helpers.matrix` (tract aborts on i64 ones).
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.integer import int_pow
from t2n.mappings.helpers.matrix import affine_product, einsum_op, matmul_nd
from t2n.walk.loops import Loop
from t2n.walk.registry import aten


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
    return affine_product(g, self, matmul_nd(g, mat, vec), beta, alpha)


@aten("addbmm")
def addbmm(g, self, batch1, batch2, beta=1, alpha=1):
    if batch1.dtype == torch.float16 and isinstance(batch1.shape[0], int) \
            and batch1.shape[0] > 1:
        return _addbmm_half(g, self, batch1, batch2, beta, alpha)
    prod = g.reduce("sum_reduce", matmul_nd(g, batch1, batch2), [0], keepdim=False)
    return affine_product(g, self, prod, beta, alpha)


def _addbmm_half(g, self, batch1, batch2, beta, alpha):
    """PyTorch adds the batches one ``addmm_`` at a time: step k computes
    ``result + alpha * (b1[k] @ b2[k])`` in f32 and rounds it to f16 (step 0 starts from
    ``beta * self``). The products are one f32 matmul; a scan carries the f16 sum."""
    f32, f16 = torch.float32, torch.float16
    prods = matmul_nd(g, g.cast(batch1, f32), g.cast(batch2, f32))  # [B, n, p]
    shape = list(prods.shape[1:])
    first = g.squeeze(g.slice(prods, 0, 0, 1), [0])
    base = None if beta == 0 else g.broadcast_to(g.cast(self, f32), shape)
    acc = g.cast(affine_product(g, base, first, beta, alpha), f16)
    loop = Loop(g, "addbmm")
    b = loop.body
    step = b.squeeze(loop.scan(g.slice(prods, 0, 1, batch1.shape[0]), axis=0), [0])
    state = loop.state(acc)
    new = b.cast(b.binary("add", b.cast(state, f32),
                          step if alpha == 1 else b.binary("mul", step, float(alpha), f32),
                          f32), f16)
    loop.update(state, new)
    return loop.outputs([loop.last_output(new)])[0]


@aten("outer", "ger")
def outer(g, self, vec2):
    d = g.out_dtype()
    a = g.reshape(self, [self.shape[0], 1])
    return g.binary("mul", a, vec2, d)


@aten("addr")
def addr(g, self, vec1, vec2, beta=1, alpha=1):
    d = g.out_dtype()
    if d == torch.bool:
        prod = outer(g, vec1, vec2)
        return g.binary("or", g.binary("and", self, beta, torch.bool) if beta is not True
                        else self, prod, torch.bool)
    # PyTorch's kernel: beta * self + (alpha * vec1) * vec2, each step in the dtype
    if alpha == 0 and d.is_floating_point:
        # 0 * vec1 keeps vec1's NaN and inf as NaN; tract simplifies a product with a zero
        # constant to zeros, so it is written vec1 - vec1 (the same, up to the sign of 0)
        v1 = g.binary("sub", g.cast(vec1, d), g.cast(vec1, d), d)
    else:
        v1 = g.binary("mul", vec1, alpha, d) if alpha != 1 else vec1
    prod = outer(g, v1, vec2)
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
    """One ``tract_core_einsum`` accumulated in float (f32 for f16 operands, whose
    einsum then yields f32), rounded to ``dtype`` once; integer contractions take the exact
    element-wise form."""
    lhs, out = expr.split("->")
    sizes = {}
    for spec, x in zip(lhs.split(","), inputs):
        for c, n in zip(spec, x.shape):
            if not (isinstance(n, int) and n == 1) or c not in sizes:
                sizes[c] = n
    if not dtype.is_floating_point:
        return einsum_op(g, expr, inputs, [sizes[c] for c in out], dtype)
    acc = _acc(dtype)
    y = g.op("tract_core_einsum", [g.cast(x, dtype) for x in inputs], expr=expr, acc=acc,
             out_dtype=torch.float32 if acc == "f32" else dtype,
             out_shape=[sizes[c] for c in out])
    return g.cast(y, dtype)


def _acc(dtype):
    return {torch.float32: "f32", torch.float16: "f32", torch.float64: "f64"}[dtype]


@aten("tensordot")
def tensordot(g, self, other, dims_self, dims_other, *_):
    """Free axes of self x contracted axes, times contracted axes x free axes of other,
    as one matmul (torch lets a contracted axis of size 1 meet one of size n)."""
    d = g.out_dtype()
    ia = [i % self.rank for i in dims_self]
    ib = [j % other.rank for j in dims_other]
    a, b = g.cast(self, d), g.cast(other, d)
    # a contracted axis of size 1 against size n: sum the other side over it first
    sum_a = [i for i, j in zip(ia, ib) if a.shape[i] != 1 and b.shape[j] == 1]
    sum_b = [j for i, j in zip(ia, ib) if b.shape[j] != 1 and a.shape[i] == 1]
    if sum_a:
        a = g.reduce("sum_reduce", a, sum_a, keepdim=True)
    if sum_b:
        b = g.reduce("sum_reduce", b, sum_b, keepdim=True)
    sa, sb = list(a.shape), list(b.shape)
    free_a = [i for i in range(a.rank) if i not in ia]
    free_b = [j for j in range(b.rank) if j not in ib]

    def prod(dims):
        n = 1
        for x in dims:
            n = n * x
        return n

    m, k, n = prod([sa[i] for i in free_a]), prod([sa[i] for i in ia]), \
        prod([sb[j] for j in free_b])
    a2 = g.reshape(g.transpose(a, free_a + ia), [m, k])
    b2 = g.reshape(g.transpose(b, ib + free_b), [k, n])
    r = matmul_nd(g, a2, b2)
    return g.reshape(r, [sa[i] for i in free_a] + [sb[j] for j in free_b])


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


@aten("bilinear")
def bilinear(g, input1, input2, weight, bias=None):
    """y[..., o] = x1[..., i] W[o, i, j] x2[..., j] + b[o], leading axes flattened, in
    PyTorch's steps: (x1 W) rounded to the dtype, then contracted with x2, then + b."""
    d = g.out_dtype()
    lead = list(input1.shape[:-1])
    n = 1
    for s in lead:
        n = n * s
    a = g.reshape(g.cast(input1, d), [n, input1.shape[-1]])
    b = g.reshape(g.cast(input2, d), [n, input2.shape[-1]])
    # PyTorch's _trilinear contracts x1 with W first, rounds, then contracts with x2
    xw = _einsum(g, [a, g.cast(weight, d)], "bi,oij->boj", d)
    y = _einsum(g, [xw, b], "boj,bj->bo", d)
    if bias is not None:
        y = g.binary("add", y, bias, d)
    return g.reshape(y, lead + [weight.shape[0]])


@aten("linalg_matrix_power", "matrix_power")
def matrix_power(g, self, n):
    if n < 0:
        raise g.error("negative matrix powers need an inverse, which tract lacks")
    if n == 0:
        m = self.shape[-1]
        eye = g.const(torch.eye(m, dtype=self.dtype))
        return g.broadcast_to(eye, list(self.shape))
    result, base = None, self
    while n:
        if n & 1:
            result = base if result is None else matmul_nd(g, result, base)
        n >>= 1
        if n:
            base = matmul_nd(g, base, base)
    return result


@aten("linalg_vander")
def vander(g, x, N=None):
    if x.rank == 0:
        x = g.reshape(x, [1])
    n = N if N is not None else x.shape[-1]
    d = g.out_dtype()
    xv = g.cast(x, d)
    if not d.is_floating_point:
        # exact powers x ** [0, n): tract turns the running product's x * x into Square,
        # which has no integer kernel
        return int_pow(g, g.unsqueeze(xv, [x.rank]), g.arange(n, d), d)
    cols = [g.broadcast_to(g.scalar(1, d), list(x.shape))]
    for _ in range(1, n):
        cols.append(g.binary("mul", cols[-1], xv, d))
    return g.concat([g.unsqueeze(c, [c.rank]) for c in cols], x.rank)
