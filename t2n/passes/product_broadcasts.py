"""Products never read a broadcast: it moves past them, so tract can load the archive.

tract 0.23's EinSum declutter (``declutter_broadcast`` in ``core/src/ops/einsum/mod.rs``)
rewires an einsum whose operand is a ``MultiBroadcastTo`` (``tract_core_broadcast``) to the
broadcast's input, assuming the einsum broadcasts it back. That holds only when another
operand carries the broadcast axis at full size. A linear layer on an expanded token
(DPT's readout: ``linear(cat([x, cls.expand_as(x)], -1))``) broadcasts an axis only that
operand has: the rewritten einsum's output shrinks from ``[1, 16, N]`` to ``[1, 1, N]`` and
tract refuses the archive at load ("Trying to substitute a 1,16,N by 1,1,N"); a broadcast
along the contracted axis makes tract abort at run time. tract hands the broadcast to the
einsum itself in more ways than the archive shows: its ``ConcatThenEinsum`` pass splits a
product over a concat along the contracted axis into one product per concat member, and its
element-wise ops swap places with a broadcast in front of them.

So on the tract target, every product (``matmul``, ``linear``, ``tract_core_einsum``) is
written on un-broadcast operands, in the algebra the broadcast implies:

* an operand ``broadcast(r)``: the product reads ``r``; an axis only it carries makes a
  size-1 output axis, broadcast back after the product (less work, same values); an axis
  it shares with another operand at full size is broadcast by the product itself; a
  contracted axis (``sum_k r[0] * B[k] = r[0] * sum_k B[k]``) reads the other operand
  summed over that axis instead;
* an operand ``concat`` along a contracted axis with a broadcast member, directly or in a
  nested concat along the same axis (tract splits each level in turn): the product is
  written as the sum of the products of each member with the matching slice of the other
  operand (what tract does itself), each then as above;
* an element-wise op between a broadcast and a product, whose operands are all smaller
  than its result, runs on the un-broadcast values and its result is broadcast
  (element-wise ops commute with broadcasting); when an operand has the full shape, tract's
  op absorbs the broadcast and nothing changes.

A contracted axis no other operand has (an einsum summing a broadcast copy away) is left as
it is; the load check (t2n.check.load) refuses the archive then, naming the op.
"""

from __future__ import annotations

import torch

from t2n.walk.builder import Graph, Op, Tensor, broadcast_shapes
from t2n.passes import GraphPass
from t2n.session import ExportSession
from t2n.passes.channels import ELEMENTWISE
from t2n.passes.rewrite import Index, derived, einsum_specs

PRODUCTS = ("matmul", "linear", "tract_core_einsum")
# the compose fragments that are element-wise (t2n.passes.compose)
_ELEMENTWISE = set(ELEMENTWISE) | {"t2n_gelu", "t2n_gelu_tanh", "t2n_gelu_tanh3", "t2n_clamp",
                                   "t2n_scale_shift"}
_BATCH = "abcdefghijlopqrstuvwxyz"  # batch labels (m, k, n are the matrix axes)


def _one(d) -> bool:
    return isinstance(d, int) and d == 1


def _view(op: Op):
    """``(operands, specs, output spec)`` of a product, as an einsum over its tensor
    operands (the bias of ``linear`` is added after it), or None."""
    if op.kind == "tract_core_einsum":
        return einsum_specs(op)
    a, b = op.args[0], op.args[1]
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)) or min(a.rank, b.rank) < 2:
        return None
    if op.kind == "matmul":
        if a.rank != b.rank:
            return None
        batch = _BATCH[:a.rank - 2]
        return ([a, b], [batch + ("km" if op.attrs.get("transposeA") else "mk"),
                         batch + ("nk" if op.attrs.get("transposeB") else "kn")], batch + "mn")
    if b.rank > a.rank or any(not _one(d) for d in b.shape[:-2]):
        return None
    batch = _BATCH[:a.rank - 2]
    return [a, b], [batch + "mk", batch[len(batch) - (b.rank - 2):] + "nk"], batch + "mn"


def _with_operands(op: Op, operands: list[Tensor], out: Tensor) -> Op:
    """``op`` over new operands, writing ``out``."""
    if op.kind == "tract_core_einsum":
        args = [list(operands)] + op.args[1:]
    else:
        args = list(operands) + op.args[2:]
    return Op(op.kind, args, dict(op.attrs), [out], op.origin)


def _out_shape(operands, specs, out_spec):
    sizes: dict[str, object] = {}
    for t, spec in zip(operands, specs):
        for c, d in zip(spec, t.shape):
            if c not in sizes or _one(sizes[c]):
                sizes[c] = d
    return [sizes[c] for c in out_spec]


def _insert(g: Graph, build, before: Op | None = None, after: Op | None = None):
    """Run ``build()`` (builder calls) and place what it emitted before/after an op."""
    start = len(g.ops)
    result = build()
    new = g.ops[start:]
    del g.ops[start:]
    at = g.ops.index(before) if before is not None else g.ops.index(after) + 1
    g.ops[at:at] = new
    return result


def _unbroadcast(g: Graph, index: Index, t):
    """``(r, broadcast op)`` when ``t`` is ``tract_core_broadcast(r)`` (``r`` lifted to
    ``t``'s rank), else None."""
    b = index.made_by(t, "tract_core_broadcast")
    if b is None or not isinstance(b.args[0], Tensor) or b.args[0].rank > t.rank:
        return None
    return b.args[0], b


def _replace_product(g: Graph, op: Op, operands, specs, out_spec) -> None:
    """Write ``op`` over ``operands``; broadcast its smaller result back to its shape."""
    y = op.outputs[0]
    shape = _out_shape(operands, specs, out_spec)
    if tuple(shape) == tuple(y.shape):
        g.ops[g.ops.index(op)] = _with_operands(op, operands, y)
        return
    small = Tensor(g.fresh_name(op.kind), shape, y.dtype)
    _then_broadcast(g, op, _with_operands(op, operands, small), y)


def _then_broadcast(g: Graph, op: Op, new: Op, y: Tensor) -> None:
    """Put ``new`` (``op`` computed on the un-broadcast operands) in ``op``'s place and
    broadcast its result back to ``y``, which the op's readers keep reading."""
    g.ops[g.ops.index(op)] = new
    back = _insert(g, lambda: g.op("tract_core_broadcast", new.outputs[0], shape=list(y.shape),
                                   out_shape=list(y.shape), out_dtype=y.dtype), after=new)
    producer = next(o for o in g.ops if o.outputs and o.outputs[0] is back)
    producer.outputs[0] = y
    producer.origin = op.origin


def _product_on_broadcast(g: Graph, index: Index, op: Op, found) -> bool:
    operands, specs, out_spec = found
    for i, t in enumerate(operands):
        hit = _unbroadcast(g, index, t)
        if hit is None:
            continue
        r, _ = hit
        lifted = [1] * (t.rank - r.rank) + list(r.shape)
        spec = specs[i]
        reduce_in: dict[int, list[int]] = {}
        for axis, c in enumerate(spec):
            if not _one(lifted[axis]) or _one(t.shape[axis]):
                continue  # not a broadcast axis
            others = [(j, s.index(c)) for j, s in enumerate(specs) if j != i and c in s]
            if c in out_spec:
                continue  # the product (or the broadcast after it) restores it
            if not others or spec.count(c) != 1:
                return False  # summed copies of one value: left as it is (see the docstring)
            for j, ax in others:
                reduce_in.setdefault(j, []).append(ax)
        new = list(operands)

        def build():
            x = g.unsqueeze_to_rank(r, t.rank)
            new[i] = x
            for j, axes in reduce_in.items():
                new[j] = g.reduce("sum_reduce", operands[j], axes, keepdim=True)

        _insert(g, build, before=op)
        _replace_product(g, op, new, specs, out_spec)
        return True
    return False


def _members(index: Index, cat: Op) -> list[Tensor]:
    """The members of ``cat``, with a member that is itself a concat along the same axis
    replaced by its own members, at any depth: tract's ``ConcatThenEinsum`` splits a product
    over each level in turn, so a broadcast nested in an inner concat (Autoformer's
    ``cat([lags, cat([static.expand(...), time_features])])``) reaches a product as surely as
    a direct member. (A walk with a stack: a chain of nested concats may be deep.)"""
    out, stack = [], list(reversed(cat.args[0]))
    while stack:
        m = stack.pop()
        inner = _inner_concat(index, cat, m)
        if inner is None:
            out.append(m)
        else:
            stack.extend(reversed(inner.args[0]))
    return out


def _inner_concat(index: Index, cat: Op, m: Tensor) -> Op | None:
    inner = index.made_by(m, "concat")
    return inner if inner is not None and inner.attrs["axis"] == cat.attrs["axis"] else None


def _broadcast_member(g: Graph, index: Index, cat: Op, memo: dict) -> bool:
    """Whether one of :func:`_members` is a broadcast. ``memo`` (one per index) answers for
    each concat once, so products reading every level of a chain of nested concats cost one
    visit of the chain, not one each; the chain is walked with a stack (it may be deep)."""
    stack = [cat]
    while stack:
        c = stack[-1]
        if id(c) in memo:
            stack.pop()
            continue
        inners = [i for i in (_inner_concat(index, c, m) for m in c.args[0]) if i is not None]
        todo = [i for i in inners if id(i) not in memo]
        if todo:
            stack.extend(todo)
            continue
        memo[id(c)] = any(memo[id(i)] for i in inners) or any(
            _inner_concat(index, c, m) is None and _unbroadcast(g, index, m) is not None
            for m in c.args[0])
        stack.pop()
    return memo[id(cat)]


def _product_on_concat(g: Graph, index: Index, op: Op, found, memo: dict) -> bool:
    """A product over a concat along a contracted axis with a broadcast member (at any depth
    of concats along that axis): the sum of the products of the members with the matching
    slices of the other operand."""
    operands, specs, out_spec = found
    for i, t in enumerate(operands):
        cat = index.made_by(t, "concat")
        if cat is None or not _broadcast_member(g, index, cat, memo):
            continue
        members = _members(index, cat)
        c = specs[i][cat.attrs["axis"]]
        others = [j for j, s in enumerate(specs) if j != i and c in s]
        if c in out_spec or specs[i].count(c) != 1 or len(others) != 1 \
                or specs[others[0]].count(c) != 1:
            continue
        j = others[0]
        axis_j = specs[j].index(c)
        y = op.outputs[0]
        parts = []

        def build():
            start = 0
            for k, m in enumerate(members):
                end = start + m.shape[cat.attrs["axis"]]
                new = list(operands)
                new[i] = m
                new[j] = _slice(g, index, operands[j], axis_j, start, end)
                start = end
                shape = _out_shape(new, specs, out_spec)
                args = _with_operands(op, new, None).args
                if op.kind == "linear" and k:  # the bias once, in the first part
                    args[2] = g.const(torch.zeros([1] * y.rank, dtype=y.dtype))
                parts.append(g.op(op.kind, *args, out_shape=shape, out_dtype=y.dtype,
                                  **op.attrs))
            total = parts[0]
            for p in parts[1:]:
                total = g.binary("add", total, p, y.dtype)
            return total

        before = len(g.ops)
        total = _insert(g, build, before=op)
        made = {id(p) for p in parts} | {id(total)}
        at = g.ops.index(op)
        for new_op in g.ops[at - (len(g.ops) - before):at]:  # what build emitted
            if new_op.outputs and id(new_op.outputs[0]) in made:
                new_op.origin = op.origin  # the parts and their sum are the user's product
                if new_op.outputs[0] is total:
                    new_op.outputs[0] = y
        g.ops.remove(op)
        return True
    return False


def _slice(g: Graph, index: Index, w: Tensor, axis: int, start, end) -> Tensor:
    """``w[start:end]`` along ``axis``: a weight read by this product alone is split into
    weights of its own (no slice left for tract to fold at load), anything else sliced."""
    if w.value is not None and w.literal is None and index.only_reader(w) is not None \
            and isinstance(start, int) and isinstance(end, int):
        return derived(g, w, w.value.narrow(axis, start, end - start))
    return g.slice(w, axis, start, end)


def _feeding_products(g: Graph) -> set[int]:
    """Tensors that reach a product's operand through element-wise ops and concats only."""
    feeding: set[int] = set()
    for op in reversed(g.ops):
        if op.kind in PRODUCTS:
            found = _view(op)
            if found is not None:
                feeding.update(id(t) for t in found[0])
        elif (op.kind in _ELEMENTWISE or op.kind in ("concat", "transpose")) \
                and any(id(o) in feeding for o in op.outputs):
            for a in op.args:
                for x in (a if isinstance(a, list) else [a]):
                    if isinstance(x, Tensor):
                        feeding.add(id(x))
    return feeding


def _elementwise_on_broadcast(g: Graph, index: Index, op: Op, feeding: set[int]) -> bool:
    """An element-wise op on broadcasts, before a product: run on the un-broadcast values,
    broadcast the result."""
    if op.kind not in _ELEMENTWISE or len(op.outputs) != 1 or id(op.outputs[0]) not in feeding:
        return False
    hits = {k: _unbroadcast(g, index, a) for k, a in enumerate(op.args)
            if isinstance(a, Tensor)}
    if not any(hits.values()):
        return False
    y = op.outputs[0]
    shape = list(broadcast_shapes(*(
        op.args[k].shape if hit is None else [1] * (y.rank - hit[0].rank) + list(hit[0].shape)
        for k, hit in hits.items())))
    if tuple(shape) == tuple(y.shape):
        return False  # another operand has the full shape: tract's op absorbs the broadcast
    args = list(op.args)

    def build():
        for k, hit in hits.items():
            if hit is not None:
                args[k] = g.unsqueeze_to_rank(hit[0], y.rank)

    _insert(g, build, before=op)
    small = Tensor(g.fresh_name(op.kind), shape, y.dtype)
    _then_broadcast(g, op, Op(op.kind, args, dict(op.attrs), [small], op.origin), y)
    return True


def _transpose_on_broadcast(g: Graph, index: Index, op: Op, feeding: set[int],
                           memo: dict) -> bool:
    """A transpose, before a product, of a broadcast or of a concat with a broadcast member
    (tract moves transposes into its einsums): the transpose goes first."""
    if id(op.outputs[0]) not in feeding or not isinstance(op.args[0], Tensor):
        return False
    x, y, perm = op.args[0], op.outputs[0], list(op.attrs.get("axes", []))
    if len(perm) != x.rank:
        return False
    hit = _unbroadcast(g, index, x)
    cat = index.made_by(x, "concat")
    if hit is not None:
        def build():
            r = g.unsqueeze_to_rank(hit[0], x.rank)
            return g.broadcast_to(g.transpose(r, perm), list(y.shape))
    elif cat is not None and _broadcast_member(g, index, cat, memo):
        def build():
            return g.concat([g.transpose(m, perm) for m in _members(index, cat)],
                            perm.index(cat.attrs["axis"]))
    else:
        return False
    out = _insert(g, build, before=op)
    last = next(o for o in g.ops if o.outputs and o.outputs[0] is out)
    last.outputs[0] = y
    last.origin = op.origin
    g.ops.remove(op)
    return True


def run(g: Graph, session: ExportSession) -> None:
    if not session.target.can("engine_product_forms"):
        return
    state: dict = {"feeding": None, "index": None, "memo": {}}

    def rule(g, index, op):
        if index is not state["index"]:  # the graph changed: what was learnt is stale
            state.update(feeding=None, index=index, memo={})
        if op.kind in PRODUCTS:
            found = _view(op)
            if found is None:
                return False
            return _product_on_broadcast(g, index, op, found) or \
                _product_on_concat(g, index, op, found, state["memo"])
        if op.kind in _ELEMENTWISE or op.kind == "transpose":
            if state["feeding"] is None:
                state["feeding"] = _feeding_products(g)
            if op.kind == "transpose":
                return _transpose_on_broadcast(g, index, op, state["feeding"], state["memo"])
            return _elementwise_on_broadcast(g, index, op, state["feeding"])
        return False

    _until_stable(g, rule)


def _until_stable(g: Graph, rule) -> None:
    """Apply ``rule`` until none fires, with a fresh index after each rewrite: these rules
    edit ``g.ops`` directly (they insert what a builder call emitted), which the kept index
    of :func:`rewrite_until_stable` does not follow. A graph pays one sweep when no
    broadcast feeds a product (every model but a few), and one index per rewrite when some
    do (DPT: one per readout)."""
    changed = True
    while changed:
        index = Index(g)
        changed = any(rule(g, index, op) for op in list(g.ops))


PASS = GraphPass(name="product_broadcasts", run=run)
