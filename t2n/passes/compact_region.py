"""Which channels ``compact`` can remove: the *region* of a weight layer's output channels.

A region is every tensor whose channel axis must shrink together with the channels of one
weight layer, found by following the graph both ways from its output:

* element-wise ops (activations, batch norm, per-channel affine, residual ``add``) tie
  channel ``j`` of every computed operand to channel ``j`` of their result;
* pooling, reductions, squeezes and a flatten (``compact_layout``) tie a channel to the
  same channel (a block of features after a flatten);
* a ``concat`` along the channel axis ties channel ``c`` of input ``i`` to channel
  ``offset_i + c`` of its result;
* a depthwise convolution, transposed or not (``groups`` = input channels, ``k`` output
  channels per input channel) ties input channel ``i`` to its output channels
  ``i*k .. i*k + k-1``.

Tied channels form a *unit* (union-find): a unit is removed from every tensor holding it, or
from none. The region ends at weight layers producing channels (a conv, transposed or not,
that is not depthwise, or a matrix product with a constant weight: it drops output rows)
and at weight layers contracting the channel axis (*consumers*: they drop input channels and fold what the
removed channels contributed into their bias, which needs the channel to be a known
per-channel constant). A grouped conv producing or reading channels must lose as many from
each of its groups: the plan keeps the surplus (``_keep_shapes``). Anything else touching a
channel (a graph input or output, a constant operand of a concat, an op the pass does not
know) *blocks* its units: they stay. So a unit goes when nothing blocks it and every
consumer reading it reads a constant (``compact_values``: one value at every position, or
a map a conv adds as one input-independent tensor): a zero filter's bias carried through per-channel ops, or a channel
that is dead because every op reading it drops it (the input channel of a depthwise filter
pruned to zero). Constants are evaluated per channel, in graph order, with torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from t2n.walk.builder import Graph, Op, Tensor
from t2n.passes import compact_layout, compact_values
from t2n.passes.channels import (CONV_KINDS, ELEMENTWISE, conv_bias, conv_bias_vector, is_const,
                       is_output, linear_weight, per_channel)


@dataclass
class Member:
    """A tensor of the region: its channel ``axis``, features per channel (``block``, 1 until
    a flatten), the unit of each channel, and the per-channel constants (where ``known``)."""

    t: Tensor
    axis: int
    block: int
    units: list
    value: torch.Tensor | None = None
    known: torch.Tensor | None = None  # a constant (one value, or a map: see compact_values)
    mapped: torch.Tensor | None = None  # a per-position constant (a map)
    field: torch.Tensor | None = None  # the maps, [C, *spatial] (compact_values)
    keep: torch.Tensor | None = None  # channel indices that stay (set by ``plan``)
    gone: torch.Tensor | None = None

    @property
    def channels(self) -> int:
        return len(self.units)


@dataclass
class Region:
    members: dict = field(default_factory=dict)  # id(tensor) -> Member
    producers: list = field(default_factory=list)  # weight layers dropping output channels
    depthwise: list = field(default_factory=list)  # (op, k): channel-wise convolutions
    chain: list = field(default_factory=list)  # element-wise / layout / concat ops, in order
    consumers: list = field(default_factory=list)  # (op, tensor, "conv" | "linear")
    # (member, n): a grouped conv reads or writes its channels in groups of n, and every
    # group must lose as many channels as the others
    balanced: list = field(default_factory=list)


class _Stop(Exception):
    """The region is not consistent (a tensor reached with two layouts): remove nothing."""


def source(op: Op):
    """``(axis, channels, zero, c0)`` of a weight layer (a conv, transposed or not, grouped
    or not, or a matrix product): the channel axis of its output, the zero-filter mask and
    the constant (its bias) of each zeroed channel; None when its output channels cannot
    be removed. (A transposed conv adds its bias at every output position, so a zero
    filter row makes the channel its bias there too.)"""
    w = op.args[1]
    if not w.dtype.is_floating_point:
        return None
    if op.kind in CONV_KINDS:
        groups = int(op.attrs.get("groups", 1))
        if w.rank < 3 or groups < 1 or int(w.shape[0]) % groups:
            return None
        axis, channels = 1, int(w.shape[0])
        zero = (w.value.reshape(channels, -1) == 0).all(dim=1)
        c0 = conv_bias_vector(op, channels, w.dtype)
        if c0 is None:
            return None
    else:
        found = linear_weight(op)
        if found is None:
            return None
        _, waxis = found
        channels = int(w.shape[waxis])
        other = w.rank - 1 if waxis == w.rank - 2 else w.rank - 2
        zero = (w.value == 0).all(dim=other).reshape(-1)
        axis = op.outputs[0].rank - 1
        c0 = torch.zeros(channels, dtype=w.dtype)
    out = op.outputs[0]
    if out.rank <= axis or out.shape[axis] != channels:
        return None
    return axis, channels, zero, c0


def depthwise_k(op: Op):
    """Output channels per input channel of a depthwise convolution, transposed or not
    (``groups`` = input channels > 1, one input channel per filter, constant weight); None
    for other ops."""
    if op.kind not in CONV_KINDS or len(op.args) < 2 or not is_const(op.args[1]):
        return None
    x, w = op.args[0], op.args[1]
    groups = int(op.attrs.get("groups", 1))
    if groups <= 1 or not isinstance(x, Tensor) or x.rank < 3 or x.shape[1] != groups \
            or w.rank != x.rank or w.shape[1] != 1 or int(w.shape[0]) % groups \
            or not w.dtype.is_floating_point or len(op.outputs) != 1:
        return None
    return int(w.shape[0]) // groups


def consumer_kind(op: Op, pos, t: Tensor, axis: int, channels: int) -> str | None:
    """'conv'/'linear' when ``op`` contracts the channel axis of ``t`` with a constant weight
    (a transposed conv is a 'conv': its filter columns are its input channels too)."""
    if pos != 0 or len(op.outputs) != 1:
        return None
    groups = int(op.attrs.get("groups", 1))
    if op.kind in CONV_KINDS and axis == 1 and len(op.args) >= 2 and is_const(op.args[1]) \
            and op.args[1].shape[1] * groups == channels \
            and (groups == 1 or depthwise_k(op) is None) \
            and int(op.args[1].shape[0]) % groups == 0:
        bias = op.args[2] if len(op.args) > 2 else op.attrs.get("bias")
        if bias is not None and not is_const(bias):
            return None
        if bias is not None and bias.rank and per_channel(bias, 2, 1, op.args[1].shape[0]) \
                is None:
            return None
        return "conv"
    if op.kind == "matmul" and axis == t.rank - 1 and linear_weight(op) is not None:
        w, waxis = linear_weight(op)
        in_axis = w.rank - 1 if waxis == w.rank - 2 else w.rank - 2
        if w.shape[in_axis] == channels:
            return "linear"
    return None


# ---------------------------------------------------------------------------- building
class _Builder:
    def __init__(self, g: Graph, uses, order, layers, cache):
        self.g, self.uses, self.order = g, uses, order
        self.weight_ids = {id(w) for w in layers}
        self.producer_of = {id(o): p for p in g.ops for o in p.outputs}
        self.cache = cache
        self.r = Region()
        self.parent: list[int] = []
        self.blocked: set[int] = set()
        self.linked: set[int] = set()  # channel-wise ops (every operand handled at once)
        self.produced: set[int] = set()  # weight layers whose output rows are members
        self.queue: list[Member] = []

    # union-find over units
    def find(self, u: int) -> int:
        while self.parent[u] != u:
            self.parent[u] = self.parent[self.parent[u]]
            u = self.parent[u]
        return u

    def unite(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)

    def member(self, t: Tensor, axis: int, block: int = 1) -> Member:
        m = self.r.members.get(id(t))
        if m is not None:
            if (m.axis, m.block) != (axis, block):
                raise _Stop
            return m
        size = t.shape[axis] if axis < t.rank else None
        if not isinstance(size, int) or size % block:
            raise _Stop
        n = size // block
        m = Member(t, axis, block, list(range(len(self.parent), len(self.parent) + n)))
        self.parent.extend(m.units)
        self.r.members[id(t)] = m
        self.queue.append(m)
        return m

    def block(self, m: Member, channels=None) -> None:
        for c in (range(m.channels) if channels is None else channels):
            self.blocked.add(m.units[c])

    def tie(self, a: Member, b: Member, pairs) -> None:
        for i, j in pairs:
            self.unite(a.units[i], b.units[j])

    def tie_same(self, a: Member, b: Member) -> None:
        if a.channels != b.channels:
            raise _Stop
        self.tie(a, b, ((c, c) for c in range(a.channels)))

    def link(self, op: Op) -> None:
        """``op`` carries channels from member to member (element-wise, layout, concat)."""
        if id(op) not in self.linked:
            self.linked.add(id(op))
            self.r.chain.append(op)

    # following the graph
    def run(self, root: Op) -> Region:
        if root.kind in CONV_KINDS and depthwise_k(root) is not None:
            self.member(root.outputs[0], 1)
        else:
            found = self.source(root)
            if found is None:
                raise _Stop
            self.member(root.outputs[0], found[0])
        while self.queue:
            m = self.queue.pop()
            self.backward(m)
            self.forward(m)
        self.r.chain.sort(key=lambda o: self.order[id(o)])
        return self.r

    def source(self, op: Op):
        """``source(op)``, cached while the weight and bias of ``op`` stay the same."""
        key = (op.args[1], conv_bias(op) if op.kind in CONV_KINDS else None, op.outputs[0])
        hit = self.cache.get(id(op))
        if hit is None or any(a is not b for a, b in zip(hit[0], key)):
            hit = self.cache[id(op)] = (key, source(op))
        return hit[1]

    def backward(self, m: Member) -> None:
        """``m`` from its producer's side."""
        p = self.producer_of.get(id(m.t))
        if p is None or m.t.is_const or len(p.outputs) != 1:
            self.block(m)  # a graph input or a constant keeps its channels
            return
        if id(p) in self.linked or id(p) in self.produced:
            return
        if p.kind in CONV_KINDS + ("matmul",) and id(p) in self.weight_ids and \
                depthwise_k(p) is None:
            found = self.source(p)
            if found is None or found[0] != m.axis or m.block != 1:
                self.block(m)
                return
            self.produced.add(id(p))
            self.r.producers.append(p)
            groups = int(p.attrs.get("groups", 1)) if p.kind in CONV_KINDS else 1
            if groups > 1:
                self.r.balanced.append((m, m.channels // groups))
            return
        if not self.channelwise(p, m):
            self.block(m)

    def forward(self, m: Member) -> None:
        """``m`` from its readers' side."""
        if is_output(self.g, m.t):
            self.block(m)
        for user, pos in self.uses.get(id(m.t), []):
            if id(user) in self.linked:
                continue
            if not isinstance(pos, int):
                if pos[0] == "list" and pos[1] == 0 and user.kind == "concat":
                    if self.concat(user, m):
                        continue
                self.block(m)
                continue
            kind = consumer_kind(user, pos, m.t, m.axis, m.channels * m.block)
            if kind is not None:
                if all(u is not user for u, _, _ in self.r.consumers):
                    self.r.consumers.append((user, m.t, kind))
                    if kind == "conv" and int(user.attrs.get("groups", 1)) > 1:
                        self.r.balanced.append((m, int(user.args[1].shape[1])))
                continue
            if pos == 0 and user.kind in compact_layout.KINDS:
                nxt = compact_layout.through(user, pos, m.t, (m.axis, m.block), m.channels)
                if nxt is not None:
                    self.link(user)
                    self.tie_same(m, self.member(user.outputs[0], *nxt))
                    continue
            if not self.channelwise(user, m):
                self.block(m)

    def channelwise(self, op: Op, m: Member) -> bool:
        """Link ``op`` (a reader or the producer of ``m``) when it works channel by channel."""
        if len(op.outputs) != 1:
            return False
        if op.kind in ELEMENTWISE:
            return self.elementwise(op, m)
        if op.kind == "concat":
            return self.concat(op, m)
        if op.kind in CONV_KINDS and depthwise_k(op) is not None:
            return self.depthwise(op, m)
        if op.kind in compact_layout.KINDS and m.t is op.outputs[0]:
            x = op.args[0] if op.args else None
            if not isinstance(x, Tensor) or x.is_const:
                return False
            for axis in range(x.rank):
                if x.shape[axis] == m.channels and compact_layout.through(
                        op, 0, x, (axis, 1), m.channels) == (m.axis, m.block):
                    self.link(op)
                    self.tie_same(self.member(x, axis), m)
                    return True
        return False

    def elementwise(self, op: Op, m: Member) -> bool:
        if m.block != 1:
            return False
        o, ax, c = op.outputs[0], m.axis, m.channels
        if o.rank <= ax or o.shape[ax] != c:
            return False
        if any(isinstance(v, Tensor) for v in op.attrs.values()):
            return False
        joined = []
        for a in op.args:
            if not isinstance(a, Tensor):
                return False
            if a.is_const or a is o:
                continue
            if a.rank != o.rank:
                return False
            if a.shape[ax] == c:
                joined.append(a)
            elif a.shape[ax] != 1:
                return False
        self.link(op)
        out = self.member(o, ax)
        for a in joined:
            self.tie_same(self.member(a, ax), out)
        return True

    def concat(self, op: Op, m: Member) -> bool:
        o = op.outputs[0]
        parts = op.args[0] if op.args else None
        if not isinstance(parts, (list, tuple)) or m.block != 1:
            return False
        axis = int(op.attrs.get("axis", 0))
        axis = axis + o.rank if axis < 0 else axis
        if axis != m.axis or any(not isinstance(p, Tensor) or p.rank != o.rank
                                 or not isinstance(p.shape[axis], int) for p in parts):
            return False
        self.link(op)
        out = self.member(o, axis)
        offset = 0
        for p in parts:
            n = int(p.shape[axis])
            if p.is_const:
                self.block(out, range(offset, offset + n))
            else:
                self.tie(self.member(p, axis), out, ((c, offset + c) for c in range(n)))
            offset += n
        if offset != out.channels:
            raise _Stop
        return True

    def depthwise(self, op: Op, m: Member) -> bool:
        if m.axis != 1 or m.block != 1:
            return False
        k = depthwise_k(op)
        bias = conv_bias_vector(op, int(op.args[1].shape[0]), op.args[1].dtype)
        if bias is None:
            return False
        self.linked.add(id(op))
        self.r.depthwise.append((op, k))
        x, y = self.member(op.args[0], 1), self.member(op.outputs[0], 1)
        self.tie(x, y, ((o // k, o) for o in range(y.channels)))
        return True


# ---------------------------------------------------------------------------- the plan
def plan(g: Graph, root: Op, uses, order, layers, absorbable, cache) -> Region | None:
    """The region of ``root`` with ``keep``/``gone`` set on every member, or None when no
    channel can go. ``layers``: the weight layers of the graph; ``absorbable(op, m)``
    says per channel whether a consumer can fold what the constant channels of member ``m``
    (``compact_values``: values or maps) contribute; ``cache`` keeps ``source`` results between calls (a dict, empty at first)."""
    b = _Builder(g, uses, order, layers, cache)
    try:
        r = b.run(root)
    except _Stop:
        return None
    if not r.consumers:
        return None
    compact_values.evaluate(r, b.source, lambda o: b.order[id(o)])
    unabsorbed = set()  # channels a consumer reads that are not a constant it can fold
    for op, t, _ in r.consumers:
        m = r.members[id(t)]
        ok = m.known & absorbable(op, m)
        unabsorbed.update(m.units[c] for c in range(m.channels) if not bool(ok[c]))
    root = [b.find(u) for u in range(len(b.parent))]
    stays = {root[u] for u in b.blocked | unabsorbed}
    while _keep_shapes(r, root, stays):
        pass
    any_gone = False
    for m in r.members.values():
        go = torch.tensor([root[u] not in stays for u in m.units], dtype=torch.bool)
        m.keep = torch.nonzero(~go).reshape(-1)
        m.gone = torch.nonzero(go).reshape(-1)
        any_gone |= bool(go.any())
    return r if any_gone else None


def _keep_shapes(r: Region, root: list, stays: set) -> bool:
    """Keep more units where removing them would leave a tensor empty (tract has none) or
    the groups of a grouped conv uneven (each keeps the same count, at least one); True
    when it added any (the caller repeats: a kept unit may sit in several groups)."""
    added = False
    for m in r.members.values():
        if all(root[u] not in stays for u in m.units):
            stays.add(root[m.units[0]])
            added = True
    for m, n in r.balanced:
        goes = [[c for c in range(start, start + n) if root[m.units[c]] not in stays]
                for start in range(0, m.channels, n)]
        least = min(min(len(x) for x in goes), n - 1)
        for x in goes:
            for c in x[least:]:
                stays.add(root[m.units[c]])
                added = True
    return added
