"""Write a matrix product with a constant weight and its bias add as one NNEF ``linear``.

``nn.Linear`` (and every bias folded by ``fold_affine``) is emitted as
``matmul(x, W, transposeB = true)`` followed by ``add(., b)``; NNEF's standard ``linear(x, W,
b)`` is defined as exactly that pair (tract's stdlib fragment ``linear`` is
``add(matmul(input, filter, transposeB = true), bias)``, verified to load for rank-2 and
rank-3 inputs when the filter and the bias have the input's rank), so the archive says it in
one op and tract builds the same two operations from it. The bias must be a constant vector
over the output features, shaped ``[1, ..., 1, out]``, and the product must have no other
reader. A product with the weight as stored, ``matmul(x, W)`` (transformers' ``Conv1D`` in
GPT-2, ``x @ W + b`` written by hand), is a ``linear`` of the transposed weight, stored
transposed under the same label when the product is the weight's only reader (float32
weights only: a compressed format keeps the weight as the model holds it). Inputs with
batch axes other than 1 keep ``matmul`` + ``add``: the weight's size-1 axes would share
their labels (see ``broadcast_axes``, which rewrites those products).
"""

from __future__ import annotations

from t2n.walk.builder import Graph, Op, Tensor
from t2n.passes import GraphPass
from t2n.passes.rewrite import Index, channel_vector, derived, may_fold_weights, read_elsewhere


def run(g: Graph, session) -> None:
    if not may_fold_weights(session):
        return  # compressed weights keep the forms their format was planned on
    # a transposed copy of a weight is a new tensor, not the model's weight times a factor:
    # a compressed format could not map its rounding back onto the model for the check
    transpose_ok = not session.weights.compresses
    index = Index(g)
    place = {id(op): at for at, op in enumerate(g.ops)}
    fused: set[int] = set()  # matmuls now inside a linear, left out at the end
    for op in list(g.ops):
        if op.kind != "matmul" or len(op.args) != 2 or op.attrs.get("transposeA"):
            continue
        x, w = op.args
        z = op.outputs[0]
        if not isinstance(x, Tensor) or not isinstance(w, Tensor) or w.value is None \
                or not z.dtype.is_floating_point or w.rank != x.rank or z.rank != x.rank:
            continue
        stored = not op.attrs.get("transposeB")  # W is [.., in, out]: transpose it
        if stored and (not transpose_ok or w.rank < 2 or any(d != 1 for d in w.shape[:-2])
                       or index.only_reader(w) is None):
            continue
        if any(not (isinstance(d, int) and d == 1) for d in x.shape[:-2]):
            continue  # a size-1 weight axis against a batch axis: broadcast_axes' case
        found = index.only_reader(z)
        if found is None or found[0].kind != "add" or not isinstance(found[1], int):
            continue
        add, pos = found
        b = add.args[1 - pos] if len(add.args) == 2 else None
        c = z.shape[-1]
        if not isinstance(b, Tensor) or not isinstance(c, int) or b.dtype != z.dtype \
                or b.rank != z.rank or channel_vector(b, z.rank, z.rank - 1, c) is None \
                or tuple(add.outputs[0].shape) != tuple(z.shape):
            continue
        if stored:  # the transpose stays a view of the model's weight, written in C order
            w = derived(g, w, w.value.transpose(-1, -2),
                        view=not read_elsewhere(g, index, w))
        g.ops[place[id(add)]] = Op("linear", [x, w, b], {}, [add.outputs[0]],
                                   op.origin or add.origin)
        fused.add(id(op))
    if fused:
        g.ops = [op for op in g.ops if id(op) not in fused]


PASS = GraphPass("fuse_linear", run, options=("optimize",))
