"""Fold a constant scale of a matrix product into the linear layer one operand comes from.

Attention scales its scores, ``mul(q @ k^T, 1/sqrt(d))`` (or ``div(., sqrt(d))``), and ``q``
comes from a linear layer through layout ops only (reshape to heads, transpose, the slice
of a fused qkv projection, squeeze). A product is linear in each operand, so scaling the
scores is scaling ``q``, which is scaling the rows of the projection's weight and bias that
produce ``q``'s elements:

    mul(matmul(layout(linear(x, W, b))[q part], k), s)
        == matmul(layout(linear(x, W', b'))[q part], k)

with ``W'``/``b'`` equal to ``W``/``b`` except the rows of q's channels, times ``s``. The
pass finds those channels by following an index tensor through the layout ops, and folds
only when (a) the operand covers whole channels of the linear output (every position of
each channel it uses), (b) no other reader of the linear output, through any layout path,
sees one of those channels (the k and v slices of a fused projection use other channels),
and (c) the scale is a finite non-zero constant and the product's only reader is the
``mul``/``div``. The new rows are computed in float64 and rounded once.
"""

from __future__ import annotations

import torch

from t2n.walk.builder import Graph, Op, Tensor
from t2n.passes import GraphPass
from t2n.passes.rewrite import (Index, may_fold_weights, rewrite_until_stable, channel_vector,
                                derived, enabled, float64, scalar_const, read_elsewhere,
                                scaled_weight)

_LAYOUT = ("reshape", "transpose", "slice", "squeeze", "unsqueeze", "copy")


def run(g: Graph, session) -> None:
    if may_fold_weights(session):
        rewrite_until_stable(g, _fold)


PASS = GraphPass("fold_scale", run, options=("optimize",))


def _scale_of(index: Index, op: Op):
    """(product op, scale) when ``op`` is ``mul(matmul, s)`` / ``div(matmul, s)``."""
    if op.kind not in ("mul", "div") or len(op.args) != 2:
        return None
    for i in ((0, 1) if op.kind == "mul" else (0,)):
        p, s = op.args[i], op.args[1 - i]
        v = scalar_const(s)
        mm = index.made_by(p, "matmul")
        if v is None or mm is None or v == 0 or v != v or abs(v) == float("inf"):
            continue
        if index.only_reader(p) is None or tuple(op.outputs[0].shape) != tuple(p.shape) \
                or op.outputs[0].dtype != p.dtype:
            continue
        return mm, (v if op.kind == "mul" else 1.0 / v)
    return None


def _fold(g: Graph, index: Index, op: Op) -> bool:
    found = _scale_of(index, op)
    if found is None:
        return False
    mm, s = found
    for operand in mm.args[:2]:
        if not isinstance(operand, Tensor) or index.only_reader(operand) is None:
            continue
        target = _source(g, index, operand)
        if target is None:
            continue
        lin, channels = target
        if read_elsewhere(g, index, lin.args[1]):
            continue
        _scale_rows(g, index, lin, channels, s)
        index.set_output(mm, 0, op.outputs[0])
        index.remove([op])
        return True
    return False


def _source(g: Graph, index: Index, t: Tensor):
    """(linear op, channel indices) when ``t`` is a layout view of whole channels of a
    ``linear`` output that no other reader sees; else None."""
    path = []
    cur = t
    while True:
        op = index.producer.get(id(cur))
        if op is None:
            return None
        if op.kind == "linear" or _matmul_bias(index, op) is not None:
            break
        if op.kind not in _LAYOUT or not isinstance(op.args[0], Tensor):
            return None
        path.append(op)
        cur = op.args[0]
    lin, y = op, cur
    if lin.kind == "add":  # matmul(x, W, transposeB) + b, not written as linear
        lin = _matmul_bias(index, op)
    if not _static(y) or y.rank < 1 or len(lin.args) != 3:
        return None
    w, b = lin.args[1], lin.args[2]
    if w.value is None or b.value is None or w.rank != y.rank:
        return None
    c = int(y.shape[-1])
    if channel_vector(b, y.rank, y.rank - 1, c) is None:
        return None
    # every tensor reachable from y through layout ops, as an index tensor over y
    idx = {id(y): torch.arange(_numel(y)).reshape(y.shape)}
    leaves = []  # (tensor, reader op or None for a graph output)
    stack = [y]
    while stack:
        cur = stack.pop()
        if id(cur) in index.outputs:
            leaves.append((cur, None))
        for user, pos in index.readers(cur):
            if user.kind in _LAYOUT and pos == 0 and len(user.outputs) == 1:
                out = user.outputs[0]
                moved = _apply(user, idx[id(cur)], out)
                if moved is None:
                    return None
                if id(out) not in idx:
                    idx[id(out)] = moved
                    stack.append(out)
            else:
                leaves.append((cur, user))
    if id(t) not in idx:
        return None
    mine = idx[id(t)].reshape(-1)
    if not mine.numel():
        return None  # an empty operand: no channel to scale
    # counting instead of torch.unique (a sort): linear in the operand's size. The layout
    # ops of _apply are views, so ``mine`` holds distinct positions of y: covering whole
    # channels is every channel it touches counted per_channel times
    counts = torch.bincount(mine % c, minlength=c)
    chans = counts.nonzero().reshape(-1)
    per_channel = _numel(y) // c
    if bool((counts[chans] != per_channel).any()):
        return None  # not whole channels
    taken = torch.zeros(c, dtype=torch.bool)
    taken[chans] = True
    for leaf, _reader in leaves:
        if leaf is t:
            continue
        if bool(taken[idx[id(leaf)].reshape(-1) % c].any()):
            return None
    return lin, chans


class _Pair:
    """``matmul(x, W, transposeB = true)`` + ``add(., b)`` seen as ``linear(x, W, b)``:
    ``args`` reads the weight in the matmul and the bias in the add."""

    def __init__(self, mm: Op, add: Op, pos: int):
        self.mm, self.add, self.pos = mm, add, pos
        self.outputs = add.outputs

    @property
    def args(self):
        return _PairArgs(self)


class _PairArgs:
    def __init__(self, p: _Pair):
        self.p = p

    def __len__(self):
        return 3

    def __iter__(self):
        return iter([self[0], self[1], self[2]])

    def __getitem__(self, i):
        p = self.p
        return (p.mm.args[0], p.mm.args[1], p.add.args[1 - p.pos])[i]


def _matmul_bias(index: Index, op: Op):
    """A _Pair when ``op`` is the bias add of a matmul with a constant weight."""
    if op.kind != "add" or len(op.args) != 2:
        return None
    for pos in (0, 1):
        mm = index.made_by(op.args[pos], "matmul")
        b = op.args[1 - pos]
        if mm is None or not isinstance(b, Tensor) or b.value is None:
            continue
        if index.only_reader(op.args[pos]) is None or len(mm.args) != 2:
            continue
        w = mm.args[1]
        if not mm.attrs.get("transposeB") or mm.attrs.get("transposeA") \
                or not isinstance(w, Tensor) or w.value is None:
            continue
        return _Pair(mm, op, pos)
    return None


def _static(t: Tensor) -> bool:
    return all(isinstance(d, int) for d in t.shape)


def _numel(t: Tensor) -> int:
    n = 1
    for d in t.shape:
        n *= int(d)
    return n


def _apply(op: Op, idx: torch.Tensor, out: Tensor):
    """The layout op ``op`` applied to an index tensor (None when shapes are not static or
    the op is not understood)."""
    if not _static(out):
        return None
    k = op.kind
    if k in ("reshape", "squeeze", "unsqueeze", "copy"):
        return idx.reshape(out.shape) if idx.numel() == _numel(out) else None
    if k == "transpose":
        perm = [int(p) for p in op.attrs.get("axes", [])]
        if sorted(perm) != list(range(idx.dim())):
            return None
        r = idx.permute(perm)
    elif k == "slice":
        r = idx
        axes = op.attrs.get("axes", [])
        begin = op.attrs.get("begin", [])
        end = op.attrs.get("end", [])
        stride = op.attrs.get("stride", [1] * len(axes))
        for a, s, e, st in zip(axes, begin, end, stride):
            if not all(isinstance(v, int) for v in (a, s, e, st)) or st < 1:
                return None
            r = r.narrow(a, s, max(e - s, 0))[(slice(None),) * a + (slice(None, None, st),)]
    else:
        return None
    return r if tuple(r.shape) == tuple(out.shape) else None


def _scale_rows(g: Graph, index: Index, lin: Op, chans: torch.Tensor, s: float) -> None:
    x, w, b = lin.args
    y = lin.outputs[0]
    c = int(y.shape[-1])
    factor = torch.ones(c, dtype=torch.float64)
    factor[chans] = s
    new_w = scaled_weight(w.value, factor.reshape(c, 1))  # [.., out, in]
    bv = float64(channel_vector(b, y.rank, y.rank - 1, c)) * factor
    new_w = derived(g, w, new_w, scaled=True, owned=True)
    new_b = derived(g, b if b.literal is None else w, bv.to(b.dtype).reshape(
        [1] * (y.rank - 1) + [c]), suffix=None if b.literal is None else "bias",
        scaled=b.literal is None)
    if isinstance(lin, _Pair):  # the weight in the matmul, the bias in the add
        index.set_arg(lin.mm, 1, new_w)
        index.set_arg(lin.add, 1 - lin.pos, new_b)
    else:
        index.set_arg(lin, 1, new_w)
        index.set_arg(lin, 2, new_b)
