"""Row/column building blocks of the unrolled small-matrix kernels (float64 work dtype).

The factorisations in :mod:`.factorizations` and the linear-algebra families are written
with these: every step works on whole rows or columns of the last two axes, so leading batch
axes of any size (even symbolic) cost nothing extra. Use as ``M.rows(g, x, a, b)``."""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import select

MAX_N = 16  # largest matrix side unrolled (op count ~ 10-20 ops per row/column step)


WORK = torch.float64


def check(g, x, what: str = "self", square: bool = False, shorter_side: bool = False,
           unrolled: str = "the factorisation", any_size: bool = False):
    """The static matrix sides of ``x`` (m, n), or a clear refusal. The limit applies to
    the longer side, or to the shorter one when only that is unrolled; not at all for a
    lowering that loops (``any_size``: triangular solves)."""
    if x.rank < 2:
        raise g.error(f"{what}: expected a matrix (rank >= 2), got rank {x.rank}")
    if not x.dtype.is_floating_point:
        raise g.error(f"{what}: {x.dtype} matrices are not supported (floating point only)")
    m, n = x.shape[-2], x.shape[-1]
    if not (isinstance(m, int) and isinstance(n, int)):
        raise g.error(f"{what}: the matrix sides must be static (got {m} x {n}); "
                      f"{unrolled} is unrolled over them")
    if any_size:
        pass
    elif shorter_side and min(m, n) > MAX_N:
        raise g.error(f"{what}: matrices whose shorter side exceeds {MAX_N} are not "
                      f"supported (got {m} x {n}): {unrolled} is unrolled over it")
    elif not shorter_side and max(m, n) > MAX_N:
        raise g.error(f"{what}: matrices larger than {MAX_N} x {MAX_N} are not supported "
                      f"(got {m} x {n}): {unrolled} is unrolled over the matrix size")
    if square and m != n:
        raise g.error(f"{what}: expected square matrices, got {m} x {n}")
    return m, n


def empty(shape) -> bool:
    return any(isinstance(d, int) and d == 0 for d in shape)


def fill(g, i: int, value=0):
    """Output ``i`` of the node filled with ``value`` (for empty results)."""
    shape, dtype = list(g.out_shape(i)), g.out_dtype(i)
    return g.broadcast_to(g.scalar(value, dtype), shape)


def work(g, x):
    return g.cast(x, WORK)


def rows(g, x, a, b):
    return g.slice(x, x.rank - 2, a, b)


def cols(g, x, a, b):
    return g.slice(x, x.rank - 1, a, b)


def at(g, x, i, j):
    """``x[..., i:i+1, j:j+1]``."""
    return cols(g, rows(g, x, i, i + 1), j, j + 1)


def vcat(g, parts):
    parts = [p for p in parts if p is not None and p.shape[-2] != 0]
    return g.concat(parts, parts[0].rank - 2)


def hcat(g, parts):
    parts = [p for p in parts if p is not None and p.shape[-1] != 0]
    return g.concat(parts, parts[0].rank - 1)


def mT(g, x):
    perm = list(range(x.rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return g.transpose(x, perm)


def compare(g, kind, a, b):
    return g.binary(kind, a, b, a.dtype if hasattr(a, "dtype") else WORK, out_dtype=torch.bool)


def mul(g, a, b):
    return g.binary("mul", a, b, WORK)


def sub(g, a, b):
    return g.binary("sub", a, b, WORK)


def div(g, a, b):
    return g.binary("div", a, b, WORK)


def eye(g, m, n):
    return g.const(torch.eye(m, n, dtype=WORK))


def batch_bcast(g, x, batch):
    return g.broadcast_to(x, list(batch) + list(x.shape[-2:]))


def tri_mask(g, m, n, upper: bool, diagonal: int = 0):
    ones = torch.ones(m, n, dtype=torch.bool)
    return g.const(torch.triu(ones, diagonal) if upper else torch.tril(ones, diagonal))


def swap_rows(g, x, i: int, p):
    """``x`` with rows ``i`` and ``p`` swapped (``p``: i64 ``[..., 1, 1]``, runtime)."""
    m = x.shape[-2]
    r = x.rank - 2
    ar = g.const(torch.arange(m).reshape(m, 1))
    hit = g.binary("eq", ar, p, torch.int64, out_dtype=torch.bool)
    row_p = g.reduce("sum_reduce", select(g, hit, x, 0.0), [r], keepdim=True)
    row_i = rows(g, x, i, i + 1)
    x = select(g, hit, row_i, x)
    return vcat(g, [rows(g, x, 0, i), row_p, rows(g, x, i + 1, m)])


def squeeze2(g, x):
    return g.squeeze(x, [x.rank - 2, x.rank - 1])
