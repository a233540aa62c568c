"""Products never share a broadcast axis: size-1 batch axes become absent axes.

NNEF's ``matmul`` wants operands of equal rank, so a linear layer on a ``[B*nW, h, w, C]``
tensor multiplies it with its weight lifted to ``[1, 1, N, C]``, and tract reads that as an
einsum where axis 0 of the weight (size 1) and axis 0 of the input (size B*nW) carry the
same label. tract 0.23's optimiser then moves a reshape that produced the input's axis 0 by
merging axes (MaxViT's grid/window partition: ``[1, 8, 8, ...] -> [64, ...]``) through the
product, and reshapes *every* input's axis of that label the same way: the weight's size-1
axis cannot become ``[8, 8]`` and the archive fails to load ("Incompatible reshape for shape
[1, 1, 192, 64] and Reshape(0, [64], [8,8])").

So, after the walk, every product where one operand has a static size-1 axis against a
larger (or symbolic) axis of the other is written as a ``tract_core_einsum`` in which that
size-1 axis has a label of its own, summed away (a sum over one element):
``'abmk,ABnk->abmn'``. tract runs an einsum and a ``matmul`` through the same kernels
(``matmul`` *is* an einsum once loaded), the values are the same, and no reshape can be
folded into an axis the operand does not share. Equal batch axes keep ``matmul``, and so do
products with a block-quantized (``weights="q4_0"``) operand, which tract's ``matmul``
reads in its own way. The pass changes op forms only: variables, their storage and every
other op stay as they are, so it runs after channel compaction and the weight format.
"""

from __future__ import annotations

import string

from t2n import dtypes
from t2n.walk.builder import Graph, Op, Tensor
from t2n.write.weight_formats import Q4Storage
from t2n.passes import GraphPass
from t2n.session import ExportSession
from t2n.passes.rewrite import einsum_specs

_BATCH = "abcdefghijlopqrstuvwxyz"  # batch labels of a matmul (m, k, n are its matrix axes)


def _one(d) -> bool:
    return isinstance(d, int) and d == 1


def _matmul_as_einsum(op: Op):
    a, b = op.args[0], op.args[1]
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)) or a.rank != b.rank \
            or a.rank < 3:
        return None
    batch = _BATCH[:a.rank - 2]
    spec_a = batch + ("km" if op.attrs.get("transposeA") else "mk")
    spec_b = batch + ("nk" if op.attrs.get("transposeB") else "kn")
    return [a, b], [spec_a, spec_b], batch + "mn"


def _relabelled(inputs: list[Tensor], specs: list[str]) -> list[str] | None:
    """The specs with a fresh label on every size-1 axis whose label is larger elsewhere,
    or None when there is none."""
    free = [c for c in string.ascii_uppercase + string.ascii_lowercase
            if not any(c in s for s in specs)]
    out, changed = [], False
    for i, (t, spec) in enumerate(zip(inputs, specs)):
        chars = list(spec)
        for axis, (c, d) in enumerate(zip(spec, t.shape)):
            if not _one(d) or spec.count(c) != 1:
                continue
            if any(c in s and not _one(u.shape[s.index(c)])
                   for j, (u, s) in enumerate(zip(inputs, specs)) if j != i):
                if not free:
                    return None
                chars[axis] = free.pop(0)
                changed = True
        out.append("".join(chars))
    return out if changed else None


def run(g: Graph, session: ExportSession) -> None:
    if not session.target.can("engine_product_forms"):
        return  # tract's reshape folding is the reason; standard matmul broadcasts size 1
    block_quantized = {vid for vid, st in session.storage.items()
                       if isinstance(st, Q4Storage)}
    for op in g.ops:
        found = _matmul_as_einsum(op) if op.kind == "matmul" else \
            einsum_specs(op) if op.kind == "tract_core_einsum" else None
        if found is None:
            continue
        inputs, specs, out = found
        if any(id(t) in block_quantized for t in inputs):
            continue
        new_specs = _relabelled(inputs, specs)
        if new_specs is None:
            continue
        expr = ",".join(new_specs) + "->" + out
        if op.kind == "matmul":
            op.kind = "tract_core_einsum"
            op.args = [list(inputs)]
            op.attrs = {"expr": expr, "acc": dtypes.tract_name(op.outputs[0].dtype),
                        "output": ""}
        else:
            op.attrs["expr"] = expr


PASS = GraphPass(name="broadcast_axes", run=run)
