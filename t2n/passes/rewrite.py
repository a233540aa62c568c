"""What the folding and fusing passes share: an index of the graph (who produces and who
reads each tensor), constant inspection, and the few edits they make (replace every use of a
tensor, drop ops, derive a constant that keeps a weight's file label).

Not a pass itself (it has no ``PASS``). The passes built on it run only when the export
option ``optimize`` is true (the default); ``optimize=False`` writes the graph as the op
mappings emitted it, which is the reference the passes' tests compare against.
"""

from __future__ import annotations

import torch

from t2n.walk.builder import Graph, Op, Tensor, _flatten

OPTION = "optimize"


def enabled(session) -> bool:
    return bool(session.options.get(OPTION, True))


def may_fold_weights(session) -> bool:
    """Whether the passes that compute new weights from the model's (folding) and rewrite
    their consumers may run. They also run before a compressed format
    (``weights="f16"``/``"q4_0"``): a folded weight that is a model weight times a factor
    is recorded as such (:func:`derived` with ``scaled=True``), so the format compresses
    it and the check maps its rounding back onto the model weight."""
    return enabled(session)


def compressing(session) -> bool:
    """Whether the export stores weights in a compressed format (``weights="f16"|"q4_0"``)."""
    return session.weights.compresses


def read_elsewhere(g: Graph, index: "Index", w: Tensor) -> bool:
    """Whether the model weight behind ``w`` has another reader than one op: a second op
    reading ``w``, or another live variable over the same storage (a tied embedding and
    head). Folding a factor into it would store a second, scaled copy of the weight (GPT-2's
    final layer norm scale folded into its tied head: 150 MB more), which a compressed
    format could not compress either (the check's copy of the model holds one rounding of
    each model weight): such weights are never folded."""
    if len(index.readers(w)) > 1 or w.value is None or not w.value.numel():
        return len(index.readers(w)) > 1
    ptr = w.value.untyped_storage().data_ptr()
    return any(t is not w for t in index.variables_over(g, ptr))


def rewrite_until_stable(g: Graph, rule) -> None:
    """Apply ``rule(g, index, op) -> bool`` (True when it rewrote the graph) to the live ops
    until none fires. One index is built once and kept up to date by the rule's edits
    (:meth:`Index.set_arg`, :meth:`Index.set_output`, :meth:`Index.remove`,
    :meth:`Index.insert_after`), so a sweep costs one visit per op whatever the number of
    rewrites. A sweep goes on after a rewrite (the ops it visits next see the graph as it now
    is); sweeps repeat until one rewrites nothing, which is the fixed point."""
    index = Index(g)
    changed, rewrote = True, False
    while changed:
        changed = False
        for op in index.ops_in_order():
            if not index.removed(op) and rule(g, index, op):
                changed = rewrote = True
    index.commit()
    if rewrote:
        g.ops = g.live_ops()  # as the index of a next pass would see them


class Index:
    """Producer and readers of every tensor of the live graph.

    ``uses[id(t)]`` lists ``(op, position)``: an argument index, ``("list", i)`` for a tensor
    inside a list argument, or ``("attr", name)``, in the order of the ops in the graph.

    A pass that builds the index once and only reads it may edit the graph as it likes
    until it builds the next. A rule of :func:`rewrite_until_stable` keeps reading the same
    index after its edits, so it makes them through the index: :meth:`set_arg`,
    :meth:`set_output`, :meth:`remove` and :meth:`insert_after` edit the op and the index
    together; :meth:`commit` writes the op list back to the graph."""

    def __init__(self, g: Graph):
        g.ops = g.live_ops()
        self.g = g
        self.producer: dict[int, Op] = {}
        self.uses: dict[int, list] = {}
        self._order: dict[int, tuple] = {}  # id(op) -> sort key of its place in the graph
        self._gone: set[int] = set()  # ids of removed ops
        self._added: list[Op] = []  # ops inserted, in the graph once committed
        self._unsorted: set[int] = set()  # tensors whose uses need sorting by place
        self._inserted = 0
        producer, uses, order = self.producer, self.uses, self._order
        for n, op in enumerate(g.ops):  # _enter, inlined: this loop is every pass's cost
            order[id(op)] = (n,)
            for o in op.outputs:
                producer[id(o)] = op
            for i, a in enumerate(op.args):
                if isinstance(a, Tensor):
                    uses.setdefault(id(a), []).append((op, i))
                elif isinstance(a, (list, tuple)):
                    for x in _flatten(a):
                        if isinstance(x, Tensor):
                            uses.setdefault(id(x), []).append((op, ("list", i)))
            for k, v in op.attrs.items():
                if isinstance(v, Tensor):
                    uses.setdefault(id(v), []).append((op, ("attr", k)))
                elif isinstance(v, (list, tuple)):
                    for x in _flatten(v):
                        if isinstance(x, Tensor):
                            uses.setdefault(id(x), []).append((op, ("attr", k)))
        self.outputs = {id(t) for t in g.outputs}
        self._by_storage = None  # see variables_over

    @staticmethod
    def _slots(op: Op):
        """``(tensor, position)`` of every tensor ``op`` reads, in argument order."""
        for i, a in enumerate(op.args):
            if isinstance(a, Tensor):
                yield a, i
            elif isinstance(a, (list, tuple)):
                for x in _flatten(a):
                    if isinstance(x, Tensor):
                        yield x, ("list", i)
        for k, v in op.attrs.items():
            for x in _flatten([v]):
                if isinstance(x, Tensor):
                    yield x, ("attr", k)

    def _enter(self, op: Op, late: bool = False) -> None:
        for o in op.outputs:
            self.producer[id(o)] = op
        for t, pos in self._slots(op):
            if late:  # a new list: a caller may be walking the old one
                self.uses[id(t)] = self.uses.get(id(t), []) + [(op, pos)]
                self._unsorted.add(id(t))
            else:
                self.uses.setdefault(id(t), []).append((op, pos))

    def _leave(self, op: Op) -> None:
        for o in op.outputs:
            if self.producer.get(id(o)) is op:
                del self.producer[id(o)]
        for t in {id(t): t for t, _ in self._slots(op)}.values():
            self.uses[id(t)] = [u for u in self.uses[id(t)] if u[0] is not op]

    # ---- edits (the op and the index together)
    def set_arg(self, op: Op, i: int, value) -> None:
        """``op.args[i] = value`` (appended when ``i`` is ``len(op.args)``)."""
        self._leave(op)
        if i == len(op.args):
            op.args.append(value)
        else:
            op.args[i] = value
        self._enter(op, late=True)

    def set_attr(self, op: Op, name: str, value) -> None:
        """``op.attrs[name] = value``."""
        self._leave(op)
        op.attrs[name] = value
        self._enter(op, late=True)

    def set_output(self, op: Op, i: int, t: Tensor) -> None:
        """``op.outputs[i] = t``: ``op`` now produces ``t``."""
        old = op.outputs[i]
        if self.producer.get(id(old)) is op:
            del self.producer[id(old)]
        op.outputs[i] = t
        self.producer[id(t)] = op

    def remove(self, ops: list[Op]) -> None:
        """Take ``ops`` out of the graph."""
        for op in ops:
            self._leave(op)
            self._gone.add(id(op))

    def insert_after(self, anchor: Op, op: Op) -> None:
        """Put ``op`` right after ``anchor`` (before the ops inserted after it earlier)."""
        self._inserted += 1
        self._order[id(op)] = self._order[id(anchor)] + (-self._inserted,)
        self._added.append(op)
        self._enter(op, late=True)

    def place(self, op: Op) -> tuple:
        """Where ``op`` is in the graph, as a key that sorts ops in graph order."""
        return self._order[id(op)]

    def removed(self, op: Op) -> bool:
        return id(op) in self._gone

    def ops_in_order(self) -> list[Op]:
        """The ops of the graph as it now is, in order."""
        ops = [o for o in self.g.ops + self._added if id(o) not in self._gone]
        ops.sort(key=lambda o: self._order[id(o)])
        return ops

    def commit(self) -> None:
        """Write the edited op list back to the graph."""
        self.g.ops = self.ops_in_order()
        for n, op in enumerate(self.g.ops):
            self._order[id(op)] = (n,)
        self._gone.clear()
        self._added = []

    def readers(self, t: Tensor) -> list:
        u = self.uses.get(id(t), [])
        if id(t) in self._unsorted:
            u = sorted(u, key=lambda r: self._order[id(r[0])])  # stable: argument order
            self.uses[id(t)] = u
            self._unsorted.discard(id(t))
        return u

    def variables_over(self, g: Graph, ptr: int) -> list:
        """The read variables of ``g`` whose data lives in the storage at ``ptr`` (views
        of one model weight), from a map of storages kept with the index (variables made
        since are added as they come): asking per weight of a large model would otherwise
        scan every variable each time."""
        if self._by_storage is None:
            self._by_storage, self._mapped = {}, 0
        for v in g.variables[self._mapped:]:
            if v.data.numel():
                key = v.data.untyped_storage().data_ptr()
                self._by_storage.setdefault(key, []).append(v.tensor)
        self._mapped = len(g.variables)
        return [t for t in self._by_storage.get(ptr, []) if self.uses.get(id(t))]

    def only_reader(self, t: Tensor):
        """``(op, position)`` when ``t`` has exactly one reader and is not a graph output."""
        u = self.readers(t)
        if len(u) != 1 or id(t) in self.outputs:
            return None
        return u[0]

    def made_by(self, t, kind: str | tuple) -> Op | None:
        """The op producing ``t`` when it is of ``kind`` (a name or a tuple of names)."""
        if not isinstance(t, Tensor):
            return None
        op = self.producer.get(id(t))
        kinds = (kind,) if isinstance(kind, str) else kind
        return op if op is not None and op.kind in kinds else None


def const(t) -> torch.Tensor | None:
    """The value of a constant operand, else None."""
    return t.value if isinstance(t, Tensor) and t.value is not None else None


def scalar_const(t) -> float | None:
    v = const(t)
    if v is None or v.numel() != 1:
        return None
    return float(v.reshape(()))


def channel_vector(p, rank: int, axis: int, channels: int) -> torch.Tensor | None:
    """A constant operand beside a rank-``rank`` tensor as a vector over ``axis`` (size
    ``channels``), or None when it varies along another axis or is not constant. The graph
    equalises ranks before binary ops, so only rank-0 and rank-``rank`` constants qualify."""
    v = const(p)
    if v is None or not isinstance(channels, int) or channels < 0:
        return None  # a size the graph does not know statically
    if v.dim() == 0 or v.numel() == 1 and v.dim() <= rank:
        return v.reshape(()).expand(channels)
    if v.dim() != rank:
        return None
    for i, d in enumerate(v.shape):
        if i != axis and d != 1:
            return None
    if v.shape[axis] != channels:
        return None
    return v.reshape(-1)


def label_of(g: Graph, t: Tensor) -> str | None:
    for v in g.variables:
        if v.tensor is t:
            return v.label
    return None


def derived(g: Graph, like: Tensor | None, data: torch.Tensor, suffix: str | None = None,
            scaled: bool = False, view: bool = False, owned: bool = False):
    """A constant computed from ``like``: inline when small, else a variable under
    ``like``'s file label (the original, once unused, is not written). ``suffix`` replaces
    the label's last component (``conv.weight`` -> ``conv.bias``). ``scaled``: ``data`` is
    ``like`` (same shape) times a broadcast factor; ``g.scaled_from`` then records the
    tensor it scales (``like``'s own source when ``like`` was scaled too), which is what
    t2n.write.weight_formats and t2n.check.compressed read; ``g.folded`` holds every derived
    variable (for the report of a compressed format). ``view``: ``data`` is a layout view
    (a transpose) of ``like``'s data, which no other variable in use shares: the variable
    keeps the view, and the writer writes it in C order a few MB at a time, so no second
    copy of the weight is ever held. ``owned``: ``data`` is a contiguous tensor the caller
    made for this constant and keeps no other use of (:func:`scaled_weight`): it is not
    copied."""
    data = data.detach()
    if data.numel() <= 8:
        return g.const(data.contiguous())
    if not view and not owned:
        src = data
        data = data.contiguous()
        if data is src:
            data = data.clone()  # the caller's tensor (or the model's): a copy of our own
    label = label_of(g, like) if like is not None else None
    if label and suffix:
        label = label.rsplit(".", 1)[0] + "." + suffix if "." in label else label + "." + suffix
    t = g.variable(data, label)
    g.session.derived.folded.add(id(t))
    if scaled and like is not None and isinstance(like.value, torch.Tensor) \
            and tuple(like.value.shape) == tuple(data.shape):
        table = g.session.derived.scaled_from
        table[id(t)] = table.get(id(like), like.value)
    return t


def replace_uses(g: Graph, old: Tensor, new: Tensor) -> None:
    """Every reader of ``old`` (and the graph outputs) reads ``new`` instead."""
    def sub(v):
        if v is old:
            return new
        if isinstance(v, list):
            return [sub(x) for x in v]
        if isinstance(v, tuple):
            return tuple(sub(x) for x in v)
        return v

    for op in g.ops:
        op.args = [sub(a) for a in op.args]
        op.attrs = {k: sub(v) for k, v in op.attrs.items()}
    g.outputs = [new if t is old else t for t in g.outputs]


def produce_as(g: Graph, op: Op, target: Tensor) -> None:
    """Make ``op`` write ``target`` (a tensor readers already use) instead of its own
    output; the ops between them, now unread, are dropped by the next index."""
    op.outputs[0] = target


def move_before(g: Graph, ops: list[Op], anchor: Op) -> None:
    """Place ``ops`` (just appended by the builder) right before ``anchor``."""
    ids = {id(o) for o in ops}
    g.ops = [o for o in g.ops if id(o) not in ids]
    at = g.ops.index(anchor)
    g.ops[at:at] = ops


def emit_before(g: Graph, anchor: Op, build) -> Tensor:
    """Run ``build()`` (which emits ops through the builder API) and move what it emitted
    before ``anchor``; returns what ``build`` returned."""
    start = len(g.ops)
    out = build()
    new = g.ops[start:]
    if new:
        move_before(g, new, anchor)
    return out


def float64(v: torch.Tensor) -> torch.Tensor:
    return v.to(torch.float64)


# elements of a weight scaled in float64 at a time: 256 kB of float64 stays in the CPU's
# caches, which makes the blocks 3-5x faster than one whole-weight product (ResNet-18's folds)
SCALE_BLOCK = 1 << 15


def scaled_weight(v: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``(float64(v) * factor).to(v.dtype)``, contiguous, for a float64 ``factor`` that
    broadcasts against ``v``: the same numbers, computed a block of at most
    :data:`SCALE_BLOCK` elements at a time, so that folding never holds a float64 copy of a
    whole weight (GPT-2's attention projections: 14 MB each)."""
    factor = factor.reshape([1] * (v.dim() - factor.dim()) + list(factor.shape))
    out = torch.empty(v.shape, dtype=v.dtype)
    if v.dtype == torch.float32:
        narrow = factor.to(torch.float32)
        if torch.equal(narrow.to(torch.float64), factor):
            # both factors are float32 numbers: their product is exact in float64, so
            # rounding it once is what float32's own (correctly rounded) product gives,
            # bit for bit, with no float64 copy (a norm scale folded into a head); written
            # straight into the contiguous result, whatever v's layout
            return torch.mul(v, narrow, out=out)
    axis = next((a for a, d in enumerate(v.shape) if d > 1), None)
    if axis is None or v.numel() <= SCALE_BLOCK:
        return out.copy_((float64(v) * factor).to(v.dtype))
    step = max(1, SCALE_BLOCK * v.shape[axis] // v.numel())
    for i in range(0, v.shape[axis], step):
        n = min(step, v.shape[axis] - i)
        f = factor.narrow(axis, i, n) if factor.shape[axis] > 1 else factor
        out.narrow(axis, i, n).copy_((float64(v.narrow(axis, i, n)) * f).to(v.dtype))
    return out


def einsum_specs(op: Op):
    """``(inputs, input specs, output spec)`` of a ``tract_core_einsum`` over tensors, or
    None."""
    inputs = op.args[0] if op.args else None
    expr = op.attrs.get("expr")
    if not isinstance(inputs, list) or not isinstance(expr, str) or "->" not in expr:
        return None
    lhs, out = expr.split("->")
    specs = lhs.split(",")
    if len(specs) != len(inputs) or not all(isinstance(t, Tensor) for t in inputs):
        return None
    return list(inputs), specs, out


class TextFragment:
    """A fragment definition given as NNEF text lines, written before the graph (rendered
    by t2n.walk.loops): the composites of compose and squeeze_weights' linear forms."""

    def __init__(self, name: str, params: str, results: str, body: list[str]):
        self.name = name
        self._head = f"fragment {name}({params}) -> ({results})"
        self._body = body
        self.body = Graph(None)  # text only: no nested fragments, nothing built in it

    def render(self) -> list[str]:
        return [self._head, "{"] + ["  " + line + ";" for line in self._body] + ["}"]
