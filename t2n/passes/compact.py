"""Channel compaction: remove the output channels that structured pruning zeroed.

A convolution (or a matrix product with a constant weight) whose filter is all zero for an
output channel computes a constant for it (its bias); per-channel ops after it (batch norm,
scales, activations) make it another constant ``c``, and pooling, reductions, squeezes and
a flatten carry it on (``compact_layout``). So the channel goes: the producer's filter and
bias lose it, so do the per-channel constants on the way, and each consumer (a convolution
with ``groups = 1``, a matrix product over the channel axis) loses the matching input and
folds what ``c`` contributed into its bias, ``bias[o] += c * sum(W[o, k, ...])`` (exact; a
zero-padded consumer gets a border map instead, see ``_add_border_map``). A residual
``add`` (any element-wise op combining the channels with another computed tensor) joins
the weight layers behind its other operand to the plan: the channels zero in all of them
go, from all of them. Anything else that reads a channel (a graph output, a
concatenation, a grouped convolution) leaves the producer as it is: the pass never changes
a result. Layers are
visited last first, so a border map added after a consumer never blocks its own plan.

The pass runs for ``t2n.export(..., compact=True)`` and reports per-layer figures
(sparsity, channels removed, parameters) in ``ExportResult.extras["layers"]`` and the
report, also without ``compact`` when the model has ``torch.nn.utils.prune`` attached.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..builder import Graph, Op, Tensor
from . import GraphPass, PassContext, compact_layout
from .channels import (ARITY, ELEMENTWISE, conv_bias, is_const, is_output, linear_bias_add,
                       linear_weight, op_order, per_channel, set_conv_bias, tensor_uses,
                       variable_label, weight_layers)


@dataclass
class LayerStats:
    """What the pass saw and did for one layer with a constant weight."""

    name: str
    kind: str  # "conv" or "linear"
    sparsity: float  # fraction of exact zeros in the weight (the pruned product)
    channels_before: int
    channels_after: int
    params_before: int
    params_after: int = 0

    @property
    def channels_removed(self) -> int:
        return self.channels_before - self.channels_after

    def line(self) -> str:
        return (f"{self.name} ({self.kind}): {100 * self.sparsity:.1f}% zero, channels "
                f"{self.channels_before} -> {self.channels_after} "
                f"(-{self.channels_removed}), params {self.params_before:,} -> "
                f"{self.params_after:,}")


# ---------------------------------------------------------------------------- entry point
def compact_pass(g: Graph, ctx: PassContext) -> None:
    """Compact with ``compact=True``; report the pruned layers of a pruned model anyway."""
    compact = bool(ctx.options.get("compact", False))
    if not compact and not _has_pruning(ctx.model):
        return
    uses = tensor_uses(g)
    stats = {id(op): _layer_stats(g, op, uses) for op in weight_layers(g)}
    if compact:
        compact_graph(g)
        uses = tensor_uses(g)
    for op in weight_layers(g):
        if id(op) in stats:
            stats[id(op)].channels_after, stats[id(op)].params_after = _size(g, op, uses)
    layers = list(stats.values())
    extras = g.__dict__.setdefault("extras", {})
    extras["layers"] = layers
    before = sum(s.params_before for s in layers)
    after = sum(s.params_after for s in layers)
    title = "compaction" if compact else "pruning (export with compact=True to remove channels)"
    extras.setdefault("report_lines", []).extend(
        [f"{title}: layer parameters {before:,} -> {after:,}"] + ["  " + s.line() for s in layers])


PASS = GraphPass("compact", compact_pass, options=("compact",))


def _has_pruning(model) -> bool:
    from torch.nn.utils import prune

    if not isinstance(model, torch.nn.Module):
        return False
    return any(isinstance(h, prune.BasePruningMethod)
               for m in model.modules() for h in m._forward_pre_hooks.values())


# ---------------------------------------------------------------------------- layers


def _layer_name(g: Graph, op: Op) -> str:
    label = variable_label(g, op.args[1]) or op.outputs[0].name
    return label[:-len(".weight")] if label.endswith(".weight") else label


def _size(g: Graph, op: Op, uses) -> tuple[int, int]:
    """(output channels, parameter count) of a weight layer as the graph stands."""
    w = op.args[1]
    if op.kind == "conv":
        channels = int(w.shape[0])
        bias = conv_bias(op)
    else:
        _, axis = linear_weight(op)
        channels = int(w.shape[axis])
        found = linear_bias_add(g, op, uses)
        bias = found[0].args[found[1]] if found else None
    params = w.value.numel() + (bias.value.numel() if bias is not None and bias.rank else 0)
    return channels, params


def _layer_stats(g: Graph, op: Op, uses) -> LayerStats:
    w = op.args[1].value
    channels, params = _size(g, op, uses)
    sparsity = float((w == 0).sum()) / max(w.numel(), 1)
    return LayerStats(_layer_name(g, op), op.kind if op.kind == "conv" else "linear",
                      sparsity, channels, channels, params, params)


# ---------------------------------------------------------------------------- graph index


# ---------------------------------------------------------------------------- compaction
@dataclass
class _Plan:
    producers: list  # the weight layers whose output channels these are
    axis: int
    zero: torch.Tensor  # bool [C]: filter all zero for the channel
    chain: list  # per-channel element-wise ops, in graph order
    tensors: list  # chain tensors (their channel axis shrinks)
    values: dict  # id(chain tensor) -> per-channel constant of a zero channel [C]
    consumers: list  # [(op, kind, exact)]
    layout: dict  # id(chain tensor) -> (channel axis, features per channel): compact_layout


def compact_graph(g: Graph) -> None:
    """Remove every removable zero output channel (see the module docstring)."""
    uses, order = tensor_uses(g), op_order(g)
    for op in reversed(weight_layers(g)):  # last first (see the module docstring)
        plan = _plan(g, op, uses, order)
        if plan is not None and _apply(g, plan, uses):
            uses, order = tensor_uses(g), op_order(g)


def _source(op: Op):
    """``(axis, channels, zero, c0)`` of a weight layer whose zero filters make constant
    output channels: the channel axis of its output, the zero-filter mask and the constant
    (its bias) of each channel; None when its channels cannot be removed."""
    w = op.args[1]
    if not w.dtype.is_floating_point:
        return None
    if op.kind == "conv":
        if int(op.attrs.get("groups", 1)) != 1 or w.rank < 3:
            return None
        axis, channels = 1, int(w.shape[0])
        zero = (w.value.reshape(channels, -1) == 0).all(dim=1)
        bias = conv_bias(op)
        has_bias = len(op.args) > 2 or "bias" in op.attrs
        if has_bias and bias is None:
            return None  # a computed bias: the channel is not constant
        c0 = torch.zeros(channels, dtype=w.dtype)
        if bias is not None:
            vec = per_channel(bias, 2, 1, channels)
            if vec is None:
                return None
            c0 = vec.to(w.dtype).clone()
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


def _plan(g: Graph, op: Op, uses, order) -> _Plan | None:
    """The channels of ``op`` and of every weight layer they are combined with.

    From ``op``'s output, the pass follows every reader: per-channel ops and the layout ops
    of ``compact_layout`` carry the channels on, weight layers contracting the channel axis
    consume them, anything else ends the plan. An element-wise op that combines the
    channels with another computed tensor (a residual ``add``) pulls that tensor in, back
    through per-channel ops and pooling to the weight layers producing it: their channels
    are the same channels, so the group removes only the channels zero in every producer
    (the intersection), from every producer and every consumer alike."""
    first = _source(op)
    if first is None:
        return None
    axis, channels, zero, c0 = first
    if not bool(zero.any()):
        return None
    out = op.outputs[0]
    plan = _Plan([op], axis, zero.clone(), [], [out], {id(out): c0}, [], {id(out): (axis, 1)})
    producer_of = {id(o): p for p in g.ops for o in p.outputs}
    moved = set()  # ops that carry the channels without computing (compact_layout)
    reached: dict[int, Op] = {}  # the ops computing channel tensors
    stack: list = [out]

    def pull(t: Tensor, lay: tuple) -> bool:
        """Bring ``t`` (a computed operand beside the channels, layout ``lay``) into the
        plan: back through its producers to weight layers of the same channels."""
        if id(t) in plan.layout:
            return plan.layout[id(t)] == lay
        if lay[1] != 1 or t.rank <= lay[0] or t.shape[lay[0]] != channels:
            return False
        p = producer_of.get(id(t))
        if p is None or len(p.outputs) != 1:
            return False  # a graph input
        plan.layout[id(t)] = lay
        plan.tensors.append(t)
        stack.append(t)
        if p.kind in ("conv", "matmul") and id(p) in weight_set:
            src = _source(p)
            if src is None or src[:2] != (lay[0], channels) or src[3].dtype != c0.dtype:
                return False
            plan.producers.append(p)
            plan.zero &= src[2]
            plan.values[id(t)] = src[3]
            return True
        reached[id(p)] = p
        if p.kind in ELEMENTWISE:
            ins = [(a, lay) for a in p.args if isinstance(a, Tensor) and not a.is_const]
        elif compact_layout.through(p, 0, p.args[0], lay, channels) == lay \
                and p.kind in compact_layout.POOLING:
            moved.add(id(p))
            ins = [(p.args[0], lay)]
        else:
            return False
        return all(pull(a, la) for a, la in ins)

    weight_set = {id(w) for w in weight_layers(g)}
    seen = set()
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if is_output(g, t):
            return None
        for user, pos in uses.get(id(t), []):
            if not isinstance(pos, int):
                return None
            lay = plan.layout[id(t)]
            kind = _consumer_kind(user, pos, t, lay[0], channels * lay[1])
            nxt = None if kind else compact_layout.through(user, pos, t, lay, channels)
            if kind is not None:
                plan.consumers.append((user, t, kind))
            elif nxt is None and (user.kind not in ELEMENTWISE or len(user.outputs) != 1
                                  or lay[1] != 1):
                return None
            elif id(user) not in reached:
                reached[id(user)] = user
                plan.layout[id(user.outputs[0])] = nxt or lay
                moved.update([id(user)] if nxt else [])
                stack.append(user.outputs[0])
                if nxt is None:  # element-wise: computed operands are the same channels
                    for a in user.args:
                        if isinstance(a, Tensor) and not a.is_const and a is not t \
                                and _same_shape(a, user.outputs[0]) and not pull(a, lay):
                            return None
    if not bool(plan.zero.any()):
        return None
    # evaluate them in graph order: an op may combine several chain tensors (x * sigmoid(x))
    for user in sorted(reached.values(), key=lambda o: order[id(o)]):
        ax = plan.layout[id(user.outputs[0])][0]
        value = plan.values.get(id(user.args[0])) if id(user) in moved else \
            _through(user, ax, channels, plan.values)
        if value is None:
            return None
        o = user.outputs[0]
        plan.chain.append(user)
        if all(o is not t for t in plan.tensors):
            plan.tensors.append(o)
        plan.values[id(o)] = value
    if not plan.consumers:
        return None
    return plan


def _same_shape(a: Tensor, b: Tensor) -> bool:
    return a.rank == b.rank and tuple(a.shape) == tuple(b.shape)


def _consumer_kind(op: Op, pos: int, t: Tensor, axis: int, channels: int) -> str | None:
    """'conv'/'linear' when ``op`` contracts the channel axis of ``t`` with a constant weight."""
    if pos != 0 or len(op.outputs) != 1:
        return None
    if op.kind == "conv" and axis == 1 and len(op.args) >= 2 and is_const(op.args[1]) \
            and int(op.attrs.get("groups", 1)) == 1 and op.args[1].shape[1] == channels:
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


def _through(op: Op, axis: int, channels: int, values: dict):
    """The per-channel constant of a zeroed channel after the element-wise ``op``, whose
    tensor operands are chain tensors (in ``values``) or per-channel constants; None when
    ``op`` is anything else."""
    o = op.outputs[0]
    chain = [a for a in op.args if isinstance(a, Tensor) and id(a) in values]
    if not chain or o.rank != chain[0].rank or o.shape[axis] != channels:
        return None
    if op.kind in ARITY and len(op.args) != ARITY[op.kind]:
        return None
    if op.kind not in ARITY and len(op.args) != 1:
        return None
    if any(isinstance(v, Tensor) for v in op.attrs.values()):
        return None
    operands = []
    for a in op.args:
        if not isinstance(a, Tensor):
            return None
        if id(a) in values:
            operands.append(values[id(a)])
            continue
        if not a.is_const:
            return None
        v = per_channel(a, o.rank, axis, channels)
        if v is None:
            return None
        operands.append(v)
    floats = [v.dtype for v in operands if v.dtype.is_floating_point]
    if floats:  # tract has no implicit promotion: float operands share one dtype
        operands = [v.to(floats[0]) if v.dtype.is_floating_point else v for v in operands]
    with torch.no_grad():
        try:
            return ELEMENTWISE[op.kind](operands, op.attrs).to(o.dtype)
        except (RuntimeError, TypeError):
            return None


def _removable(plan: _Plan) -> torch.Tensor:
    """bool [C]: zero channels whose constant every consumer can absorb exactly."""
    ok = plan.zero.clone()
    for op, t, kind in plan.consumers:
        c = plan.values[id(t)]
        ok &= torch.isfinite(c)
        if kind == "conv" and not _no_padding(op) and not _border_map_ok(op):
            ok &= c == 0
    if bool(ok.all()):  # keep one channel: tract has no empty convolutions
        ok[0] = False
    return ok


def _border_map_ok(op: Op) -> bool:
    """Whether a zero-padded conv can absorb constant channels through a border map: the
    map needs explicit zero padding and static spatial sizes."""
    x = op.args[0]
    return op.attrs.get("border", "constant") == "constant" and bool(op.attrs.get("padding")) \
        and all(isinstance(d, int) for d in x.shape[2:])


def _no_padding(op: Op) -> bool:
    pad = op.attrs.get("padding")
    if not pad:  # [] means automatic ("same") padding in NNEF
        return False
    return all(int(a) == 0 and int(b) == 0 for a, b in pad)


def _apply(g: Graph, plan: _Plan, uses) -> bool:
    """Rewrite the graph for ``plan``; False when no channel can go."""
    removed = _removable(plan)
    if not bool(removed.any()):
        return False
    keep = torch.nonzero(~removed).reshape(-1)
    gone = torch.nonzero(removed).reshape(-1)
    axis, channels = plan.axis, int(removed.numel())
    for op in plan.producers:
        w = op.args[1]
        if op.kind == "conv":
            op.args[1] = _replace(g, w, w.value.index_select(0, keep))
            bias = conv_bias(op)
            if bias is not None and bias.rank:
                set_conv_bias(op, _replace(g, bias, _take(bias.value, 1, keep, channels)))
        else:
            _, waxis = linear_weight(op)
            op.args[1] = _replace(g, w, w.value.index_select(waxis, keep))
    for user in plan.chain:
        axis = plan.layout[id(user.outputs[0])][0]
        for i, a in enumerate(user.args):
            if isinstance(a, Tensor) and id(a) not in plan.values and a.is_const \
                    and axis < a.rank and a.shape[axis] == channels:
                user.args[i] = _replace(g, a, a.value.index_select(axis, keep))
    for t in plan.tensors:
        shape, (axis, block) = list(t.shape), plan.layout[id(t)]
        shape[axis] = int(keep.numel()) * block
        t.shape = tuple(shape)
    for user in plan.chain:
        compact_layout.resize(user)
    for user, t, kind in plan.consumers:
        c, block = plan.values[id(t)][gone], plan.layout[id(t)][1]
        if kind == "conv":
            _shrink_conv_input(g, user, keep, gone, c)
        else:
            _shrink_linear_input(g, user, compact_layout.features(keep, block),
                                 compact_layout.features(gone, block),
                                 c.repeat_interleave(block), uses)
    return True


def _take(v: torch.Tensor, axis: int, keep: torch.Tensor, channels: int) -> torch.Tensor:
    """``v`` without the removed channels, when it has them (size-1 axes broadcast)."""
    if axis < v.dim() and v.shape[axis] == channels:
        return v.index_select(axis, keep)
    return v


def _replace(g: Graph, old: Tensor, data: torch.Tensor) -> Tensor:
    """A new constant for ``data``: inline when ``old`` was, else a variable keeping the
    label (the old variable, now unused, is not written)."""
    data = data.contiguous()
    if old.literal is not None:
        return g.const(data)
    return g.variable(data.clone(), variable_label(g, old))


def _shrink_conv_input(g: Graph, op: Op, keep, gone, c) -> None:
    w = op.args[1]
    wv = w.value
    delta = None
    if bool((c != 0).any()):
        spatial = list(range(2, wv.dim()))
        sums = wv.index_select(1, gone).sum(dim=spatial)  # [O, removed]
        delta = (sums.to(torch.float64) @ c.to(torch.float64)).to(wv.dtype)
    op.args[1] = _replace(g, w, wv.index_select(1, keep))
    if delta is None:
        return
    if not _no_padding(op):
        _add_border_map(g, op, wv.index_select(1, gone), c)
        return
    out_ch = int(wv.shape[0])
    bias = conv_bias(op)
    if bias is not None and bias.rank:
        vec = per_channel(bias, 2, 1, out_ch)
        new = (vec.to(torch.float64) + delta.to(torch.float64)).to(bias.dtype)
        set_conv_bias(op, _replace(g, bias, new.reshape(bias.value.shape)))
    else:
        base = float(bias.value) if bias is not None else 0.0
        new = (delta.to(torch.float64) + base).to(wv.dtype).reshape(1, out_ch)
        label = variable_label(g, w)
        label = label[:-len("weight")] + "bias" if label and label.endswith("weight") else None
        set_conv_bias(op, g.variable(new, label) if label else g.const(new))


def _add_border_map(g: Graph, op: Op, w_gone: torch.Tensor, c: torch.Tensor) -> None:
    """What constant channels contribute through a zero-padded conv depends on the position
    (border outputs see fewer taps): it is ``conv(ones, sum_k c_k W[:, k])`` with the same
    padding, an input-independent map. It is added after ``op``; the archive stores only
    the one-channel filter, and tract folds the constant subgraph when it loads the model."""
    shape = (w_gone.shape[0], 1) + tuple(w_gone.shape[2:])
    w_eff = (w_gone.to(torch.float64) * c.to(torch.float64).reshape(1, -1, *[1] * (
        w_gone.dim() - 2))).sum(dim=1).reshape(shape).to(w_gone.dtype)
    x, y = op.args[0], op.outputs[0]
    start = len(g.ops)
    ones = g.broadcast_to(g.scalar(1.0, x.dtype), [1, 1] + list(x.shape[2:]))
    label = variable_label(g, op.args[1])
    label = label[:-len("weight")] + "border_map" if label and label.endswith("weight") \
        else None
    attrs = {k: v for k, v in op.attrs.items() if k != "bias"}
    attrs["groups"] = 1
    fmap = g.op("conv", ones, g.variable(w_eff, label), g.scalar(0.0, y.dtype),
                out_shape=[1] + list(y.shape[1:]), out_dtype=y.dtype, **attrs)
    inner = Tensor(g.fresh_name(op.kind), y.shape, y.dtype)
    op.outputs[0] = inner
    g.ops.append(Op("add", [inner, fmap], {}, [y]))
    new = g.ops[start:]
    del g.ops[start:]
    at = g.ops.index(op) + 1
    g.ops[at:at] = new


def _shrink_linear_input(g: Graph, op: Op, keep, gone, c, uses) -> None:
    w, waxis = linear_weight(op)
    in_axis = w.rank - 1 if waxis == w.rank - 2 else w.rank - 2
    wv = w.value
    delta = None
    if bool((c != 0).any()):
        w2 = wv.reshape(wv.shape[-2:])
        if waxis == w.rank - 1:
            w2 = w2.t()  # [out, in]
        delta = (w2[:, gone].to(torch.float64) @ c.to(torch.float64)).to(wv.dtype)
    op.args[1] = _replace(g, w, wv.index_select(in_axis, keep))
    if delta is None:
        return
    y = op.outputs[0]
    found = linear_bias_add(g, op, uses)
    if found is not None:
        add, i = found
        b = add.args[i]
        vec = per_channel(b, y.rank, y.rank - 1, y.shape[-1])
        new = (vec.to(torch.float64) + delta.to(torch.float64)).to(b.dtype)
        shape = [1] * (y.rank - 1) + [-1]  # a broadcast scalar bias becomes per-channel
        add.args[i] = _replace(g, b, new.reshape(shape))
        return
    _insert_add(g, op, delta.reshape([1] * (y.rank - 1) + [-1]), variable_label(g, w))


def _insert_add(g: Graph, op: Op, value: torch.Tensor, label: str | None) -> None:
    """``y = op(...)`` becomes ``y' = op(...); y = add(y', value)`` (uses of y unchanged)."""
    y = op.outputs[0]
    inner = Tensor(g.fresh_name(op.kind), y.shape, y.dtype)
    op.outputs[0] = inner
    if label and label.endswith("weight"):
        label = label[:-len("weight")] + "bias"
    const = g.variable(value, label) if value.numel() > 8 else g.const(value)
    g.ops.insert(g.ops.index(op) + 1, Op("add", [inner, const], {}, [y]))

