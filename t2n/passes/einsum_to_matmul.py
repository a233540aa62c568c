"""Write two-operand ``tract_core_einsum`` ops that are batched matrix products as ``matmul``.

Attention (``scaled_dot_product_attention``, ``bmm``, ``einsum`` in user code) is emitted as
``tract_core_einsum`` with expressions such as ``'abxe,abye->abxy'`` (q @ k^T) and
``'abxy,abye->abxe'`` (p @ v). When an expression is a plain batched matrix product (the
same batch letters, in the same order, leading every operand and the result; one contracted
letter and one kept letter in each operand's last two axes; the result ending in the two
kept letters) it is NNEF's standard ``matmul`` with ``transposeA``/``transposeB`` saying
which operand has the contracted letter first. Batch axes must match or be 1 in one operand
(``matmul`` broadcasts them). Only floating-point operands whose accumulator is their own
dtype are rewritten (integer ``matmul`` on i64 aborts tract; a wider accumulator changes the
result's dtype).
"""

from __future__ import annotations

import re

from t2n.walk.builder import Graph, Op, Tensor
from t2n.dtypes import tract_name
from t2n.passes import GraphPass
from t2n.passes.rewrite import enabled

_EXPR = re.compile(r"^([a-zA-Z]+),([a-zA-Z]+)->([a-zA-Z]+)$")


def run(g: Graph, session) -> None:
    if not enabled(session):
        return
    for i, op in enumerate(g.ops):
        if op.kind != "tract_core_einsum" or len(op.args) != 1:
            continue
        new = _as_matmul(op)
        if new is not None:
            g.ops[i] = new


PASS = GraphPass("einsum_to_matmul", run, options=("optimize",))


def _as_matmul(op: Op) -> Op | None:
    inputs = op.args[0]
    if not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
        return None
    a, b = inputs
    if not all(isinstance(t, Tensor) for t in (a, b)):
        return None
    out = op.outputs[0]
    m = _EXPR.match(str(op.attrs.get("expr", "")).replace(" ", ""))
    if m is None or op.attrs.get("output", "") not in ("", None):
        return None
    ea, eb, eo = m.groups()
    if not (a.dtype == b.dtype == out.dtype and a.dtype.is_floating_point):
        return None
    if str(op.attrs.get("acc", "")).lower() != tract_name(a.dtype).lower():
        return None
    r = len(eo)
    if len(ea) != r or len(eb) != r or r < 2 or a.rank != r or b.rank != r:
        return None
    if len(set(ea)) != r or len(set(eb)) != r or len(set(eo)) != r:
        return None
    batch = eo[:-2]
    if ea[:-2] != batch or eb[:-2] != batch:
        return None
    m_, n_ = eo[-2], eo[-1]
    a2, b2 = ea[-2:], eb[-2:]
    ka = set(a2) - {m_}
    kb = set(b2) - {n_}
    if m_ not in a2 or n_ not in b2 or len(ka) != 1 or ka != kb:
        return None
    k = ka.pop()
    if k in eo or m_ == n_:
        return None
    transpose_a = a2 == k + m_
    transpose_b = b2 == n_ + k
    for da, db, do in zip(a.shape[:-2], b.shape[:-2], out.shape[:-2]):
        if not (da == db == do or (da == 1 and db == do) or (db == 1 and da == do)):
            return None
    return Op("matmul", [a, b], {"transposeA": transpose_a, "transposeB": transpose_b},
              [out])
