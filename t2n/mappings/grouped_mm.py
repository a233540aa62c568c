"""``aten::_grouped_mm``: the grouped matrix product of mixture-of-experts layers
(``transformers`` 5 routes each (token, expert) pair to its expert this way), and
``transformers::grouped_mm_fallback``, transformers' custom op for the same product where
torch's kernel does not apply (float32 on a CPU).

The groups are given at run time by ``offs`` (cumulative group ends, int32): row ``i`` of
a 2-D operand belongs to group ``e`` when ``offs[e-1] <= i < offs[e]``. How many rows each
expert gets is data, so the lowering is dense and its op count is fixed: every group's
product is computed (one batched ``matmul``) and a 0/1 group mask built from ``offs`` picks
the right one per row (rows past ``offs[-1]``, left uninitialised by PyTorch, are 0). The
four layouts PyTorch accepts:

- ``self [M, K]``, ``mat2 [G, K, N]``, ``offs`` over M -> ``[M, N]`` (the MoE case);
- ``self [M, K]``, ``mat2 [K, N]``, ``offs`` over K -> ``[G, M, N]``;
- ``self [G, M, K]``, ``mat2 [K, N]``, ``offs`` over N -> ``[M, N]``;
- ``self [G, M, K]``, ``mat2 [G, K, N]`` without ``offs`` -> ``[G, M, N]`` (a batched mm).
"""

from __future__ import annotations

import torch

from t2n.walk.registry import aten


def _group_mask(g, n, offs, groups: int, dtype):
    """``[G, n]`` of ``dtype``: 1 where index i of the grouped axis lies in group e."""
    ends = g.cast(offs, torch.int64)
    if groups > 1:
        starts = g.concat([g.const(torch.zeros(1, dtype=torch.int64)),
                           g.slice(ends, 0, 0, groups - 1)], 0)
    else:
        starts = g.const(torch.zeros(1, dtype=torch.int64))
    i = g.unsqueeze(g.arange(n), [0])
    inside = g.binary("and", g.binary("ge", i, g.unsqueeze(starts, [1]), torch.int64,
                                      out_dtype=torch.bool),
                      g.binary("lt", i, g.unsqueeze(ends, [1]), torch.int64,
                               out_dtype=torch.bool), torch.bool)
    return g.cast(inside, dtype)


def _matmul(g, a, b, out_shape):
    return g.op("matmul", a, b, transposeA=False, transposeB=False, out_shape=out_shape)


@aten("_grouped_mm")
def grouped_mm(g, self, mat2, offs=None, bias=None, out_dtype=None):
    if bias is not None:
        raise g.error("bias: a grouped product with a bias is not supported (PyTorch's "
                      "kernels do not support it either)")
    if not self.dtype.is_floating_point or self.dtype != mat2.dtype:
        raise g.error(f"self: float operands of one dtype are needed (got {self.dtype} and "
                      f"{mat2.dtype})")
    dtype = self.dtype
    if offs is None:
        if self.rank != 3 or mat2.rank != 3:
            raise g.error(f"offs: without offsets both operands must be 3-D (got ranks "
                          f"{self.rank} and {mat2.rank})")
        out = _matmul(g, self, mat2, [self.shape[0], self.shape[1], mat2.shape[2]])
    elif offs.rank != 1:
        raise g.error(f"offs: must be 1-D (got rank {offs.rank})")
    elif not isinstance(offs.shape[0], int):
        raise g.error("offs: the number of groups must be static")
    else:
        groups = offs.shape[0]
        if self.rank == 2 and mat2.rank == 3:  # groups of rows of self
            m, n = self.shape[0], mat2.shape[2]
            every = _matmul(g, g.unsqueeze(self, [0]), mat2, [mat2.shape[0], m, n])
            mask = g.unsqueeze(_group_mask(g, m, offs, groups, dtype), [2])
            out = g.reduce("sum_reduce", g.binary("mul", every, mask, dtype), [0],
                           keepdim=False)
        elif self.rank == 2 and mat2.rank == 2:  # groups of the reduced axis
            m, k = self.shape
            mask = g.unsqueeze(_group_mask(g, k, offs, groups, dtype), [1])
            parts = g.binary("mul", g.unsqueeze(self, [0]), mask, dtype)  # [G, M, K]
            out = _matmul(g, parts, g.unsqueeze(mat2, [0]), [groups, m, mat2.shape[1]])
        elif self.rank == 3 and mat2.rank == 2:  # groups of columns of mat2
            m, n = self.shape[1], mat2.shape[1]
            every = _matmul(g, self, g.unsqueeze(mat2, [0]), [self.shape[0], m, n])
            mask = g.unsqueeze(_group_mask(g, n, offs, groups, dtype), [1])
            out = g.reduce("sum_reduce", g.binary("mul", every, mask, dtype), [0],
                           keepdim=False)
        else:
            raise g.error(f"offs: operands of ranks {self.rank} and {mat2.rank} do not form "
                          "a grouped product")
    return g.cast(out, g.out_dtype()) if out_dtype is not None else out


@aten("transformers::grouped_mm_fallback")
def grouped_mm_fallback(g, input, weight, offs):
    """transformers' own grouped product (``transformers/integrations/moe.py``), the op a
    ``torch.export`` capture of its experts records where ``torch._grouped_mm`` does not
    apply (float32 on a CPU): ``input [S, K]`` rows sorted by expert, ``weight [E, K, N]``,
    ``offs [E]`` cumulative row ends; rows past ``offs[-1]`` are 0, as in its loop. The
    rows layout of ``aten::_grouped_mm``, which computes exactly this."""
    if input.rank != 2 or weight.rank != 3:
        raise g.error(f"input, weight: a [S, K] input and [E, K, N] expert weights are "
                      f"needed (got ranks {input.rank} and {weight.rank})")
    return grouped_mm(g, input, weight, offs)
