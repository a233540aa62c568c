"""A product's constant weight is stored without its size-1 leading axes (tract target).

NNEF's ``matmul`` and ``linear`` want operands of equal rank, so a linear layer on a
``[1, N, C]`` activation multiplies it with its weight lifted to ``[1, K, C]``. tract then
spends its load removing that axis again: its axis-change pass pushes the removal through
the einsum into the constant and copies the weight (ViT and CaiT: a third more
instructions in that pass than for the ONNX route's file, whose ``MatMul`` reads the weight
as ``[C, K]``). tract's own ``tract_core_einsum`` takes operands of any rank, so for the
tract target a product whose constant weight (read by no other op, stored as float32) has
size-1 leading axes reads it without them:

* ``linear(x, W, b)`` becomes one call of the fragment ``t2n_linear<rank>``,
  ``add(tract_core_einsum([x, W2], 'bmk,nk->bmn'), b)`` (what tract's ``linear`` is, with
  the weight's own rank);
* ``matmul(x, W)`` and a ``tract_core_einsum`` (t2n.passes.broadcast_axes, CaiT's
  talking heads) become an einsum on ``W2``: a label the weight no longer has broadcasts
  it, as it did along its size-1 axis.

The weight keeps its label and its bytes (only the .dat header's shape changes); tract
computes the same products with the same kernels. Compressed weight formats keep the forms
their storage was planned on.
"""

from __future__ import annotations

from t2n import dtypes
from t2n.walk.builder import Graph, Op, Tensor
from t2n.passes import GraphPass
from t2n.session import ExportSession
from t2n.passes.rewrite import Index, TextFragment, einsum_specs, may_fold_weights

_BATCH = "abcdefghijlopqrstuvwxyz"  # batch labels (m, k, n are the matrix axes)


def run(g: Graph, session: ExportSession) -> None:
    if not session.target.can("engine_product_forms") or not may_fold_weights(session) \
            or session.weights.compresses:
        return
    index = Index(g)
    defined: set[str] = {f.name for f in g.fragments}
    for at, op in enumerate(list(g.ops)):  # replaced in place: places do not move
        if op.kind in ("linear", "matmul"):
            new = _product(g, index, op, defined)
        elif op.kind == "tract_core_einsum":
            new = _einsum(g, index, op)
        else:
            continue
        if new is not None:
            g.ops[at] = new


PASS = GraphPass("squeeze_weights", run, options=("optimize",))


def _lead(w) -> int:
    """How many leading size-1 axes a constant float32 weight of rank >= 3 could drop
    (down to its two matrix axes), or 0."""
    if not isinstance(w, Tensor) or w.value is None or w.literal is not None \
            or w.rank < 3 or not w.dtype.is_floating_point:
        return 0
    n = 0
    for d in w.shape[:-2]:
        if not (isinstance(d, int) and d == 1):
            return 0
        n += 1
    return n


def _sole_reader(index: Index, w: Tensor, op: Op) -> bool:
    readers = index.readers(w)
    return len(readers) == 1 and readers[0][0] is op


def _product(g: Graph, index: Index, op: Op, defined: set[str]):
    x, w = op.args[0], op.args[1]
    if not isinstance(x, Tensor) or x.rank != w.rank or op.attrs.get("transposeA") \
            or not _lead(w) or not _sole_reader(index, w, op):
        return None
    batch = _BATCH[:x.rank - 2]
    wt = op.attrs.get("transposeB", op.kind == "linear")
    expr = f"{batch}mk,{'nk' if wt else 'kn'}->{batch}mn"
    acc = dtypes.tract_name(op.outputs[0].dtype)
    w2 = g.reshaped_const(w, list(w.shape[-2:]))
    if op.kind == "matmul":
        return Op("tract_core_einsum", [[x, w2]], {"expr": expr, "acc": acc, "output": ""},
                  list(op.outputs), op.origin)
    b = op.args[2]
    name = f"t2n_linear{x.rank}_{acc}"
    if name not in defined:
        g.fragments.append(TextFragment(
            name, "x: tensor<scalar>, w: tensor<scalar>, b: tensor<scalar>",
            "y: tensor<scalar>",
            [f"t = tract_core_einsum([x, w], expr = '{expr}', acc = '{acc}', output = '')",
             "y = add(t, b)"]))
        defined.add(name)
    return Op(name, [x, w2, b], {}, list(op.outputs), op.origin)


def _einsum(g: Graph, index: Index, op: Op):
    found = einsum_specs(op)
    if found is None:
        return None
    inputs, specs, out = found
    changed = False
    for i, (w, spec) in enumerate(zip(inputs, specs)):
        n = _lead(w)
        if not n or len(spec) != w.rank or not _sole_reader(index, w, op):
            continue
        # a leading size-1 axis can go: a label the weight no longer has broadcasts it (or
        # sums it over one element), unless the output needs it from this weight alone
        drop = n
        while drop and not all(c in "".join(s for j, s in enumerate(specs) if j != i)
                               or c in spec[drop:] for c in out):
            drop -= 1
        if drop:
            inputs[i] = g.reshaped_const(w, list(w.shape[drop:]))
            specs[i] = spec[drop:]
            changed = True
    if not changed:
        return None
    return Op("tract_core_einsum", [inputs], dict(op.attrs, expr=",".join(specs) + "->" + out),
              list(op.outputs), op.origin)
