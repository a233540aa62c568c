"""Give each matrix product with a large shared weight a constant of its own, so tract packs
it once at load instead of at every run.

tract multiplies with a constant weight by first packing it into its kernel's panel layout.
The packing is a constant fold, and tract's constant folder (``PropConst``, 0.23.9) declines
to fold an op whose constant input has other readers and weighs more than 4 MiB, so as not
to hold a second copy of a large weight. A tied embedding and head (GPT-2, and every
language model with ``tie_word_embeddings``: one table read by the token ``gather`` and by
the output projection) is exactly that: tract then re-packs the whole table at every run
(GPT-2 small: 154 MB per call, 0.27 s of a 0.37 s run). The same holds for one weight read
by several products (shared layers), which this pass leaves as it is (see ``run``).

The fold rule exempts the input of a ``slice`` whatever its size. So the product is split
along its weight's output features into two halves, each reading a slice of the stored
weight (then reshaped as the product needs it), and the two results are concatenated: each
half is a constant with one reader, which tract folds and packs once. The archive is
unchanged (the same variable, one copy on disk); tract holds the table for the other readers
plus the packed halves, as it would for an untied model. The outputs are the same numbers:
each output column is the same dot product of the same values.

Float weights, stored as they are or as f16 (the writer casts those back in pieces that
tract folds, see ``writer._cast_back``); not Q4_0 blocks, which tract multiplies directly;
for the tract target.
"""

from __future__ import annotations

from t2n.walk.builder import Graph, Op, Tensor
from t2n.passes import GraphPass
from t2n.passes.rewrite import Index, enabled, read_elsewhere

# tract's CONST_FOLD_MEM_BUDGET (core/src/optim/mod.rs): a shared constant up to this size is
# folded (and packed) anyway
FOLD_BUDGET_BYTES = 4 << 20
_SHAPE_OPS = ("reshape", "unsqueeze", "squeeze")


def run(g: Graph, session) -> None:
    if not enabled(session) or not session.target.can("engine_product_forms") \
            or session.weights.block_quantized:
        return
    variables = {id(v.tensor) for v in g.variables}
    index = Index(g)
    found = []
    for op in g.ops:
        for pos in _weight_positions(op):
            root = _shared_root(index, variables, op.args[pos])
            if root is not None:
                found.append((op, pos, root))
    # one product per stored weight: several products of one weight (shared layers) would
    # each get identical slices, which tract merges back into one shared constant; their
    # separate packed copies are the memory tract's rule is there to save
    products = {}
    for _, _, (root, _) in found:
        key = _storage(root)
        products[key] = products.get(key, 0) + 1
    for op, pos, (root, chain) in found:
        if products[_storage(root)] == 1:
            _split(g, op, pos, root, chain)


def _storage(t: Tensor) -> int:
    return t.value.untyped_storage().data_ptr()


def _weight_positions(op: Op) -> tuple[int, ...]:
    if op.kind == "linear" and len(op.args) >= 2:
        return (1,)
    if op.kind == "matmul" and len(op.args) == 2:
        return (1, 0)
    return ()


def _shared_root(index: Index, variables: set, w) -> tuple[Tensor, list] | None:
    """``(variable, chain)`` when ``w`` is a large float variable, possibly through ops that
    only add or drop size-1 axes (``chain``, nearest the variable first), and some tensor on
    the way has another reader, or another variable views the same storage (the writer
    stores such views once, as a reshape of one variable): the case tract packs at every
    run."""
    if not isinstance(w, Tensor) or not w.dtype.is_floating_point:
        return None
    chain, t = [], w
    while id(t) not in variables:
        op = index.producer.get(id(t))
        if op is None or op.kind not in _SHAPE_OPS or not isinstance(op.args[0], Tensor) \
                or _non1(op.args[0].shape) != _non1(t.shape):
            return None
        chain.insert(0, op)
        t = op.args[0]
    root = t
    shape = root.static_shape()
    if shape is None or root.value is None \
            or root.value.numel() * root.value.element_size() <= FOLD_BUDGET_BYTES:
        return None
    on_path = [root] + [c.outputs[0] for c in chain]
    if all(len(index.readers(x)) <= 1 and id(x) not in index.outputs for x in on_path) \
            and not read_elsewhere(index.g, index, root):
        return None
    return root, chain


def _non1(shape) -> list:
    return [d for d in shape if not (isinstance(d, int) and d == 1)]


def _split(g: Graph, op: Op, pos: int, root: Tensor, chain: list) -> None:
    """Replace ``op`` by two products over halves of its weight's output features and a
    concat of their results (written where ``op`` was, so the order stays topological)."""
    w = op.args[pos]
    out = op.outputs[0]
    if op.kind == "linear":
        w_axis, out_axis = w.rank - 2, out.rank - 1
    elif pos == 1:
        w_axis = w.rank - (2 if op.attrs.get("transposeB") else 1)
        out_axis = out.rank - 1
    else:
        w_axis = w.rank - (1 if op.attrs.get("transposeA") else 2)
        out_axis = out.rank - 2
    n = w.shape[w_axis]
    if not isinstance(n, int) or n < 2:
        return
    # the root axis holding the same features: the same place among the non-1 axes
    non1_w = [i for i, d in enumerate(w.shape) if not (isinstance(d, int) and d == 1)]
    non1_r = [i for i, d in enumerate(root.shape) if not (isinstance(d, int) and d == 1)]
    r_axis = non1_r[non1_w.index(w_axis)]
    half = max(1, min(n - 1, -(-(n // 2) // 64) * 64))  # a panel-friendly split point

    start = len(g.ops)
    pieces = []
    for begin, end in ((0, half), (half, n)):
        piece = g.slice(root, r_axis, begin, end)
        shape = list(w.shape)
        shape[w_axis] = end - begin
        if tuple(piece.shape) != tuple(shape):
            piece = g.reshape(piece, shape)
        args = list(op.args)
        args[pos] = piece
        if op.kind == "linear" and len(args) > 2:
            args[2] = _bias_slice(g, args[2], begin, end, n)
        oshape = list(out.shape)
        oshape[out_axis] = end - begin
        pieces.append(g.op(op.kind, *args, out_shape=oshape, out_dtype=out.dtype, **op.attrs))
    new = g.ops[start:]
    del g.ops[start:]
    new.append(Op("concat", [pieces], {"axis": out_axis}, [out], op.origin))
    at = g.ops.index(op)
    g.ops[at:at + 1] = new


def _bias_slice(g: Graph, b, begin: int, end: int, n: int):
    """The bias of the features ``begin:end`` (a bias broadcast over them stays whole)."""
    if not isinstance(b, Tensor) or not b.rank or b.shape[-1] != n:
        return b
    return g.slice(b, b.rank - 1, begin, end)


PASS = GraphPass("unshare_packed", run, options=("optimize",))
