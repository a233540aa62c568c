"""Transformer building blocks: scaled_dot_product_attention, einsum, baddbmm.

Products go through ``tract_core_einsum`` with the batch axes spelled out (tract aborts on
``...``, so ellipses are expanded here from the known ranks; integer products take the
exact element-wise form of :func:`einsum_op`, since tract aborts on i64 ones). Causal masks
are built from ``g.arange`` over the (possibly symbolic) sequence lengths, so one archive
serves every length.
"""

from __future__ import annotations

import math

import torch

from t2n.mappings.helpers.matrix import einsum_op
from t2n.mappings.helpers.ordering import stable_topk
from t2n.walk.registry import aten
from t2n.walk.builder import _is_sym

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _check_einsum_dtype(g, what: str, *xs):
    for x in xs:
        if x.dtype == torch.bool:
            raise g.error(f"{what}: products of torch.bool tensors are not supported "
                          "(PyTorch has none either)")


# ---------------------------------------------------------------------------- einsum
def _expand_equation(g, equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """Input subscripts and output subscript with ``...`` replaced by fresh letters."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise g.error(f"equation: {len(terms)} operand subscripts for {len(ranks)} tensors")
    used = set(c for c in eq if c.isalpha())
    for c in eq:
        if not (c.isalpha() or c in ",->."):
            raise g.error(f"equation: unexpected character {c!r} in {equation!r}")
    fresh = [c for c in _LETTERS if c not in used]
    ell_len = 0
    for t, r in zip(terms, ranks):
        named = len(t.replace("...", ""))
        if "..." in t:
            ell_len = max(ell_len, r - named)
        elif named != r:
            raise g.error(f"equation: subscript {t!r} has {named} letters for a rank-{r} "
                          "operand")
    if ell_len > len(fresh):
        raise g.error("equation: too many axes for the available subscript letters")
    ell = "".join(fresh[:ell_len])
    out_terms = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            n = r - len(t.replace("...", ""))
            t = t.replace("...", ell[ell_len - n:] if n else "")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        letters = "".join(out_terms)
        out = ell + "".join(sorted((c for c in set(letters) if letters.count(c) == 1
                                    and c not in ell), key=_LETTERS.index))
    return out_terms, out


@aten("einsum")
def einsum(g, equation, tensors, path=None):
    tensors = list(tensors)
    _check_einsum_dtype(g, "tensors", *tensors)
    dtype = g.out_dtype() if g.node is not None else tensors[0].dtype
    terms, out = _expand_equation(g, equation, [t.rank for t in tensors])
    sizes: dict = {}
    for t, term in zip(tensors, terms):
        for c, d in zip(term, t.shape):
            if c not in sizes or (isinstance(sizes[c], int) and sizes[c] == 1):
                sizes[c] = d
    if out:
        return einsum_op(g, ",".join(terms) + "->" + out, tensors, [sizes[c] for c in out],
                         dtype)
    # tract reads an empty output ('ij->') as "no reduction": keep one axis, sum it after
    keep = next((c for c in "".join(terms)), None)
    if keep is None:
        raise g.error(f"equation: {equation!r} has only rank-0 operands")
    part = einsum_op(g, ",".join(terms) + "->" + keep, tensors, [sizes[keep]], dtype)
    return g.reduce("sum_reduce", part, [0], keepdim=False)


# ---------------------------------------------------------------------------- baddbmm
@aten("baddbmm")
def baddbmm(g, self, batch1, batch2, beta=1, alpha=1):
    _check_einsum_dtype(g, "batch1", batch1, batch2)
    dtype = g.out_dtype()
    b, n, _ = batch1.shape
    p = batch2.shape[2]
    prod = einsum_op(g, "bij,bjk->bik", [batch1, batch2], [b, n, p], dtype)
    if alpha != 1:
        prod = g.binary("mul", prod, alpha, dtype)
    if beta == 0:  # torch ignores self entirely (NaN in self does not propagate)
        return prod
    bias = self if beta == 1 else g.binary("mul", self, beta, dtype)
    return g.binary("add", prod, bias, dtype)


# ---------------------------------------------------------------------------- attention
def causal_mask(g, rows, cols, diagonal: int = 0):
    """Bool ``[rows, cols]``: True where ``col <= row + diagonal`` (``ones.tril(diagonal)``);
    the sizes may be symbolic."""
    i, j = g.arange(rows), g.arange(cols)
    i = g.unsqueeze(i, [1])
    if diagonal:
        i = g.binary("add", i, diagonal, torch.int64)
    j = g.unsqueeze(j, [0])
    return g.binary("le", j, i, torch.int64, out_dtype=torch.bool)


def _repeat_heads(g, x, groups: int):
    """``x.repeat_interleave(groups, dim=-3)`` as unsqueeze + broadcast + reshape."""
    if groups == 1:
        return x
    r = x.rank
    x = g.unsqueeze(x, [r - 2])
    shape = list(x.shape)
    shape[r - 2] = groups
    x = g.broadcast_to(x, shape)
    heads = shape[r - 3] * groups
    return g.reshape(x, shape[:r - 3] + [heads] + shape[r - 1:])


def _open_rows(g, scores, mask):
    """Bool ``[..., L, 1]``: True where a query has a key left open. PyTorch's safe softmax
    gives a query whose scores are all -inf zeros, not the NaN a plain softmax gives. With a
    bool mask the rows are read from the mask (``S`` times smaller than the scores; a row
    of finite scores is all -inf exactly where its mask is all False); with a float mask,
    from the scores. (Not from a max_reduce: tract's of an all -inf row is not -inf.)"""
    last = scores.rank - 1
    if mask is None:
        mask = g.binary("ne", scores, float("-inf"), scores.dtype, out_dtype=torch.bool)
    return g.reduce("any_reduce", mask, [last], keepdim=True, dtype=torch.bool)


def _zero_closed_rows(g, out, alive):
    """``out`` with the rows of queries that attend to nothing set to 0. Each row of
    ``probs @ v`` reads one row of ``probs``, so zeroing the (NaN) product's rows is zeroing
    the probabilities' rows, on a tensor ``S / E`` times smaller."""
    zero = g.unsqueeze_to_rank(g.scalar(0.0, out.dtype), out.rank)
    return g.op("select", g.unsqueeze_to_rank(alive, out.rank), out, zero,
                out_dtype=out.dtype, out_shape=out.shape)


@aten("scaled_dot_product_attention")
def scaled_dot_product_attention(g, query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    if dropout_p:
        raise g.error(f"dropout_p: {dropout_p} (random dropout) cannot be exported; call the "
                      "model in eval mode or pass dropout_p=0")
    if not query.dtype.is_floating_point:
        raise g.error(f"query: dtype {query.dtype} (attention needs floating point)")
    if is_causal and attn_mask is not None:
        raise g.error("attn_mask: is_causal=True with an explicit mask (PyTorch refuses it)")
    dtype = query.dtype
    rank = max(query.rank, key.rank, value.rank)
    q, k, v = (g.unsqueeze_to_rank(g.cast(t, dtype), rank) for t in (query, key, value))
    e = q.shape[-1]
    if scale is None:
        if not isinstance(e, int):
            raise g.error("scale: the head size is a dynamic axis; pass scale explicitly")
        scale = 1.0 / math.sqrt(e) if e else 1.0
    if enable_gqa and rank >= 3:
        hq, hk, hv = q.shape[-3], k.shape[-3], v.shape[-3]
        if not all(isinstance(h, int) for h in (hq, hk, hv)):
            raise g.error("enable_gqa: the number of heads is a dynamic axis")
        k = _repeat_heads(g, k, hq // hk)
        v = _repeat_heads(g, v, hq // hv)
    batch = _LETTERS[:rank - 2]
    bshape = [q.shape[i] if not (isinstance(q.shape[i], int) and q.shape[i] == 1) else k.shape[i]
              for i in range(rank - 2)]
    L, S = q.shape[-2], k.shape[-2]
    scores = einsum_op(g, f"{batch}xe,{batch}ye->{batch}xy", [q, k], bshape + [L, S], dtype)
    scores = g.binary("mul", scores, float(scale), dtype)
    alive = None
    if is_causal:  # key 0 is open to every query: no row is closed
        attn_mask = causal_mask(g, L, S)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        # as PyTorch (convert_boolean_attn_mask): a bias of 0 / -inf on the mask's own
        # shape, added to the scores, instead of a select over every head's scores
        m = g.unsqueeze_to_rank(attn_mask, scores.rank)
        zero, ninf = (g.unsqueeze_to_rank(g.scalar(v_, dtype), m.rank)
                      for v_ in (0.0, float("-inf")))
        bias = g.op("select", m, zero, ninf, out_dtype=dtype, out_shape=m.shape)
        scores = g.binary("add", scores, bias, dtype)
        alive = None if is_causal else _open_rows(g, scores, m)
    elif attn_mask is not None:
        scores = g.binary("add", scores, attn_mask, dtype)
        alive = _open_rows(g, scores, None)
    probs = g.op("softmax", scores, axes=[scores.rank - 1], out_dtype=dtype,
                 out_shape=scores.shape)
    ev = v.shape[-1]
    out = einsum_op(g, f"{batch}xy,{batch}ye->{batch}xe", [probs, v], bshape + [L, ev], dtype)
    return out if alive is None else _zero_closed_rows(g, out, alive)


# ---------------------------------------------------------------------------- masks, scans
@aten("tril")
def tril(g, self, diagonal=0):
    return _trilu(g, self, diagonal, upper=False)


@aten("triu")
def triu(g, self, diagonal=0):
    return _trilu(g, self, diagonal, upper=True)


def _trilu(g, self, diagonal, upper: bool):
    if self.rank < 2:
        raise g.error(f"self: tril/triu need rank >= 2, got rank {self.rank}")
    # a diagonal from a dynamic size (a causal mask over a cache: ``tril(P)``) is a tensor
    k = g.dim_scalar(diagonal) if _is_sym(diagonal) else int(diagonal)
    return g.op("tract_core_trilu", self, k=k, upper=upper, out_dtype=self.dtype,
                out_shape=self.shape)


@aten("cumsum")
def cumsum(g, self, dim, dtype=None):
    out = g.out_dtype() if g.node is not None else (dtype or self.dtype)
    x = g.cast(self, out)
    if x.rank == 0:
        return x
    return g.op("tract_core_cumsum", x, axis=dim % x.rank, exclusive=False, reverse=False,
                out_dtype=out, out_shape=x.shape)


# ---------------------------------------------------------------------------- rms_norm
@aten("rms_norm")
def rms_norm(g, input, normalized_shape, weight=None, eps=None):
    """``x / sqrt(mean(x^2 over the normalized axes) + eps) * weight``; half precision is
    computed in f32 as PyTorch does."""
    if not input.dtype.is_floating_point:
        raise g.error(f"input: dtype {input.dtype} (rms_norm needs floating point)")
    n = len(normalized_shape)
    if n > input.rank:
        raise g.error(f"normalized_shape: {list(normalized_shape)} longer than the input rank")
    out = input.dtype
    dtype = torch.float32 if out == torch.float16 else out
    if eps is None:
        eps = torch.finfo(out).eps
    x = g.cast(input, dtype)
    axes = list(range(input.rank - n, input.rank))
    if not axes:
        ms = g.binary("mul", x, x, dtype)
    else:
        ms = g.reduce("mean_reduce", g.binary("mul", x, x, dtype), axes, keepdim=True)
    inv = g.unary("rsqrt", g.binary("add", ms, float(eps), dtype))
    y = g.binary("mul", x, inv, dtype)
    if weight is not None:
        y = g.binary("mul", y, weight, dtype)
    return g.cast(y, out)


# ---------------------------------------------------------------------------- topk, sort
@aten("topk")
def topk(g, self, k, dim=-1, largest=True, sorted=True):
    """Values and indices of the ``k`` largest (smallest) entries, in sorted order (tract
    always sorts; ``sorted=False`` leaves the order unspecified in PyTorch), NaN as the
    largest value, equal values by position (see :mod:`t2n.mappings.helpers.ordering`)."""
    if self.rank == 0:
        return self, g.scalar(0, torch.int64)
    return stable_topk(g, self, k, dim % self.rank, largest)


def _sort_args(rest):
    """(dim, descending) from ``sort(self, dim, descending)`` or
    ``sort.stable(self, *, stable, dim, descending)`` (resolved in schema order)."""
    if rest and (rest[0] is None or isinstance(rest[0], bool)):
        rest = rest[1:]
    dim = rest[0] if len(rest) > 0 else -1
    descending = rest[1] if len(rest) > 1 else False
    return dim, bool(descending)


@aten("sort")
def sort(g, self, *rest):
    """A full-length stable topk: PyTorch's ``stable=True`` order (NaN last ascending, first
    descending; equal values by position), which is also its ``stable=False`` order up to
    16 elements (see docs/dtypes.md on longer ones)."""
    dim, descending = _sort_args(rest)
    if self.rank == 0:
        return self, g.scalar(0, torch.int64)
    axis = dim % self.rank
    return stable_topk(g, self, self.shape[axis], axis, descending)


@aten("argsort")
def argsort(g, self, *rest):
    return sort(g, self, *rest)[1]
