"""Channel compaction: remove the output channels that structured pruning zeroed.

A convolution (or a matrix product with a constant weight) whose filter is all zero for an
output channel computes, for that channel, a constant: its bias (0 for a matrix product)
everywhere. Per-channel ops after it (batch normalization, bias adds, scales, activations)
turn that constant into another constant ``c``. The layers that consume the channel then
see ``c`` in every position, so the channel can be removed:

* the producer's filter (and bias) lose the channel;
* every per-channel op on the way loses it from its per-channel constants;
* each consumer (convolution with ``groups = 1``, matrix product over the channel axis)
  loses the matching input channel, and what ``c`` contributed is folded into its bias:
  ``bias[o] += c * sum(W[o, k, ...])``. That is exact for a matrix product and for a
  convolution without padding; with zero padding the border positions see fewer taps, so
  such a channel is removed only when ``c == 0`` exactly (as after ReLU of a non-positive
  value); otherwise it is kept.

Anything else that reads a channel (a graph output, a residual ``add`` with another tensor,
a concatenation, a grouped or depthwise convolution, a reshape, a pooling) is not understood
as per-channel, so the whole producer is left as it is: the pass never changes a result.
In a residual network that still removes the channels of the inner convolutions of each
block, where most of the parameters are.

The pass works on the NNEF graph (:class:`t2n.builder.Graph`), after the walk, so it does
not depend on how the model was written. It runs for ``t2n.export(..., compact=True)`` and
reports per-layer figures (sparsity, channels removed, parameters before and after) in
``ExportResult.extras["layers"]`` and the report, also without ``compact`` when the model
has ``torch.nn.utils.prune`` pruning attached.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .builder import Graph, Op, Tensor

# Element-wise ops with one tensor operand, evaluated on the per-channel constant.
_UNARY = {
    "copy": lambda x, a: x,
    "relu": lambda x, a: torch.relu(x),
    "sigmoid": lambda x, a: torch.sigmoid(x),
    "tanh": lambda x, a: torch.tanh(x),
    "neg": lambda x, a: -x,
    "abs": lambda x, a: x.abs(),
    "exp": lambda x, a: torch.exp(x),
    "elu": lambda x, a: torch.where(x > 0, x, float(a.get("alpha", 1.0)) * torch.expm1(x)),
    "leaky_relu": lambda x, a: torch.where(x >= 0, x, float(a.get("alpha", 0.01)) * x),
    "softplus": lambda x, a: torch.log1p(torch.exp(x)),
}
# Element-wise ops whose other operands are per-channel constants.
_BINARY = {
    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
    "div": lambda x, y: x / y, "min": torch.minimum, "max": torch.maximum,
}


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
def compact_pass(g: Graph, model=None, args=None, options=None) -> None:
    """The graph pass registered with :func:`t2n.api.register_graph_pass`."""
    options = options or {}
    compact = bool(options.get("compact", False))
    if not compact and not _has_pruning(model):
        return
    uses = _uses(g)
    stats = {id(op): _layer_stats(g, op, uses) for op in _weight_layers(g)}
    if compact:
        compact_graph(g)
        uses = _uses(g)
    for op in _weight_layers(g):
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


def _has_pruning(model) -> bool:
    from torch.nn.utils import prune

    if not isinstance(model, torch.nn.Module):
        return False
    return any(isinstance(h, prune.BasePruningMethod)
               for m in model.modules() for h in m._forward_pre_hooks.values())


# ---------------------------------------------------------------------------- layers
def _weight_layers(g: Graph) -> list[Op]:
    out = []
    for op in g.live_ops():
        if op.kind == "conv" and len(op.args) >= 2 and _const(op.args[1]):
            out.append(op)
        elif op.kind == "matmul" and _linear_weight(op) is not None:
            out.append(op)
    return out


def _const(t) -> bool:
    return isinstance(t, Tensor) and t.is_const


def _linear_weight(op: Op):
    """(weight, out axis of the weight) of ``x @ W`` / ``x @ W^T`` with a constant 2-D-like W."""
    if len(op.args) < 2 or not isinstance(op.args[0], Tensor) or not _const(op.args[1]):
        return None
    if op.attrs.get("transposeA", False):
        return None
    w = op.args[1]
    if w.rank < 2 or any(d != 1 for d in w.shape[:-2]):
        return None
    return w, (w.rank - 2 if op.attrs.get("transposeB", False) else w.rank - 1)


def _conv_bias(op: Op):
    """The conv bias argument (a constant), or None when absent or computed."""
    b = op.args[2] if len(op.args) > 2 else op.attrs.get("bias")
    return b if _const(b) else None


def _set_conv_bias(op: Op, value: Tensor) -> None:
    if len(op.args) > 2:
        op.args[2] = value
    elif "bias" in op.attrs:
        op.attrs["bias"] = value
    else:
        op.args.append(value)


def _linear_bias_add(g: Graph, op: Op, uses) -> tuple[Op, int] | None:
    """The ``add(y, bias)`` right after a matmul, when it is y's only use."""
    y = op.outputs[0]
    u = uses.get(id(y), [])
    if len(u) != 1 or _is_output(g, y):
        return None
    add, pos = u[0]
    if add.kind != "add" or len(add.args) != 2 or not isinstance(pos, int):
        return None
    other = add.args[1 - pos]
    if not _const(other) or _per_channel(other, y.rank, y.rank - 1, y.shape[-1]) is None:
        return None
    return add, 1 - pos


def _label(g: Graph, t: Tensor) -> str | None:
    for v in g.variables:
        if v.tensor is t:
            return v.label
    return None


def _layer_name(g: Graph, op: Op) -> str:
    label = _label(g, op.args[1]) or op.outputs[0].name
    return label[:-len(".weight")] if label.endswith(".weight") else label


def _size(g: Graph, op: Op, uses) -> tuple[int, int]:
    """(output channels, parameter count) of a weight layer as the graph stands."""
    w = op.args[1]
    if op.kind == "conv":
        channels = int(w.shape[0])
        bias = _conv_bias(op)
    else:
        _, axis = _linear_weight(op)
        channels = int(w.shape[axis])
        found = _linear_bias_add(g, op, uses)
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
def _uses(g: Graph) -> dict[int, list]:
    """id(tensor) -> [(op, position)]; position is an arg index, or a tuple when the tensor
    sits inside a list argument or an attribute (never a per-channel use)."""
    uses: dict[int, list] = {}
    for op in g.live_ops():
        for i, a in enumerate(op.args):
            if isinstance(a, Tensor):
                uses.setdefault(id(a), []).append((op, i))
            elif isinstance(a, (list, tuple)):
                for x in a:
                    if isinstance(x, Tensor):
                        uses.setdefault(id(x), []).append((op, ("list", i)))
        for k, v in op.attrs.items():
            for x in (v if isinstance(v, (list, tuple)) else [v]):
                if isinstance(x, Tensor):
                    uses.setdefault(id(x), []).append((op, ("attr", k)))
    return uses


def _is_output(g: Graph, t: Tensor) -> bool:
    return any(o is t for o in g.outputs)


def _per_channel(p: Tensor, rank: int, axis: int, channels: int):
    """``p`` (a constant operand beside a rank-``rank`` tensor whose channel ``axis`` has
    ``channels`` entries) as a vector over the channels, or None when it varies along
    another axis. tract broadcasts from the end (missing axes are trailing), so axis i of
    ``p`` lines up with axis i of the tensor."""
    v = p.value
    if p.rank > rank:
        return None
    for i, d in enumerate(v.shape):
        if i != axis and d != 1:
            return None
    if axis < v.dim() and v.shape[axis] == channels:
        return v.reshape(-1)
    if v.numel() != 1:
        return None
    return v.reshape(-1).expand(channels)


# ---------------------------------------------------------------------------- compaction
@dataclass
class _Plan:
    producer: Op
    axis: int
    zero: torch.Tensor  # bool [C]: filter all zero for the channel
    chain: list  # [(op, tensor operand)] per-channel ops, in graph order
    tensors: list  # chain tensors (their channel axis shrinks)
    values: dict  # id(chain tensor) -> per-channel constant of a zero channel [C]
    consumers: list  # [(op, kind, exact)]


def compact_graph(g: Graph) -> None:
    """Remove every removable zero output channel (see the module docstring)."""
    uses = _uses(g)
    for op in _weight_layers(g):
        plan = _plan(g, op, uses)
        if plan is not None and _apply(g, plan, uses):
            uses = _uses(g)


def _plan(g: Graph, op: Op, uses) -> _Plan | None:
    w = op.args[1]
    if not w.dtype.is_floating_point:
        return None
    if op.kind == "conv":
        if int(op.attrs.get("groups", 1)) != 1 or w.rank < 3:
            return None
        axis, channels = 1, int(w.shape[0])
        zero = (w.value.reshape(channels, -1) == 0).all(dim=1)
        bias = _conv_bias(op)
        has_bias = len(op.args) > 2 or "bias" in op.attrs
        if has_bias and bias is None:
            return None  # a computed bias: the channel is not constant
        c0 = torch.zeros(channels, dtype=w.dtype)
        if bias is not None:
            vec = _per_channel(bias, 2, 1, channels)
            if vec is None:
                return None
            c0 = vec.to(w.dtype).clone()
    else:
        _, waxis = _linear_weight(op)
        channels = int(w.shape[waxis])
        other = w.rank - 1 if waxis == w.rank - 2 else w.rank - 2
        zero = (w.value == 0).all(dim=other).reshape(-1)
        y = op.outputs[0]
        axis = y.rank - 1
        c0 = torch.zeros(channels, dtype=w.dtype)
    if not bool(zero.any()):
        return None
    out = op.outputs[0]
    if out.rank <= axis or out.shape[axis] != channels:
        return None
    plan = _Plan(op, axis, zero, [], [out], {id(out): c0}, [])
    queue = [out]
    while queue:
        t = queue.pop(0)
        if _is_output(g, t):
            return None
        for user, pos in uses.get(id(t), []):
            if not isinstance(pos, int):
                return None
            kind = _consumer_kind(user, pos, t, axis, channels)
            if kind is not None:
                plan.consumers.append((user, t, kind))
                continue
            value = _through(user, pos, t, axis, channels, plan.values[id(t)])
            if value is None:
                return None
            o = user.outputs[0]
            plan.chain.append((user, t))
            plan.tensors.append(o)
            plan.values[id(o)] = value
            queue.append(o)
    if not plan.consumers:
        return None
    return plan


def _consumer_kind(op: Op, pos: int, t: Tensor, axis: int, channels: int) -> str | None:
    """'conv'/'linear' when ``op`` contracts the channel axis of ``t`` with a constant weight."""
    if pos != 0 or len(op.outputs) != 1:
        return None
    if op.kind == "conv" and axis == 1 and len(op.args) >= 2 and _const(op.args[1]) \
            and int(op.attrs.get("groups", 1)) == 1 and op.args[1].shape[1] == channels:
        bias = op.args[2] if len(op.args) > 2 else op.attrs.get("bias")
        if bias is not None and not _const(bias):
            return None
        if bias is not None and bias.rank and _per_channel(bias, 2, 1, op.args[1].shape[0]) \
                is None:
            return None
        return "conv"
    if op.kind == "matmul" and axis == t.rank - 1 and _linear_weight(op) is not None:
        w, waxis = _linear_weight(op)
        in_axis = w.rank - 1 if waxis == w.rank - 2 else w.rank - 2
        if w.shape[in_axis] == channels:
            return "linear"
    return None


def _through(op: Op, pos: int, t: Tensor, axis: int, channels: int, c: torch.Tensor):
    """The per-channel constant after ``op`` (t is its only tensor operand), or None when
    ``op`` is not a per-channel element-wise op."""
    if len(op.outputs) != 1:
        return None
    o = op.outputs[0]
    if o.rank != t.rank or o.shape[axis] != channels:
        return None
    others = [a for i, a in enumerate(op.args) if i != pos]
    if any(isinstance(a, Tensor) and not a.is_const for a in others) or \
            any(isinstance(v, Tensor) for v in op.attrs.values()):
        return None
    vecs = []
    for a in others:
        if not isinstance(a, Tensor):
            return None
        v = _per_channel(a, t.rank, axis, channels)
        if v is None:
            return None
        vecs.append(v.to(c.dtype))
    with torch.no_grad():
        if op.kind in _UNARY and not others:
            return _UNARY[op.kind](c, op.attrs).to(c.dtype)
        if op.kind in _BINARY and len(op.args) == 2:
            x, y = (c, vecs[0]) if pos == 0 else (vecs[0], c)
            return _BINARY[op.kind](x, y).to(c.dtype)
        if op.kind == "batch_normalization" and pos == 0 and len(op.args) == 5:
            mean, var, offset, scale = vecs
            eps = float(op.attrs.get("epsilon", 0.0))
            return ((c - mean) / torch.sqrt(var + eps) * scale + offset).to(c.dtype)
        if op.kind == "clamp" and pos == 0 and len(op.args) == 3:
            return torch.minimum(torch.maximum(c, vecs[0]), vecs[1])
    return None


def _removable(plan: _Plan) -> torch.Tensor:
    """bool [C]: zero channels whose constant every consumer can absorb exactly."""
    ok = plan.zero.clone()
    for op, t, kind in plan.consumers:
        c = plan.values[id(t)]
        ok &= torch.isfinite(c)
        if kind == "conv" and not _no_padding(op):
            ok &= c == 0
    if bool(ok.all()):  # keep one channel: tract has no empty convolutions
        ok[0] = False
    return ok


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
    op = plan.producer
    w = op.args[1]
    if op.kind == "conv":
        op.args[1] = _replace(g, w, w.value.index_select(0, keep))
        bias = _conv_bias(op)
        if bias is not None and bias.rank:
            _set_conv_bias(op, _replace(g, bias, _take(bias.value, 1, keep, channels)))
    else:
        _, waxis = _linear_weight(op)
        op.args[1] = _replace(g, w, w.value.index_select(waxis, keep))
    for user, t in plan.chain:
        for i, a in enumerate(user.args):
            if isinstance(a, Tensor) and a is not t and a.is_const \
                    and axis < a.rank and a.shape[axis] == channels:
                user.args[i] = _replace(g, a, a.value.index_select(axis, keep))
    for t in plan.tensors:
        shape = list(t.shape)
        shape[axis] = int(keep.numel())
        t.shape = tuple(shape)
    for user, t, kind in plan.consumers:
        c = plan.values[id(t)][gone]
        if kind == "conv":
            _shrink_conv_input(g, user, keep, gone, c)
        else:
            _shrink_linear_input(g, user, keep, gone, c, uses)
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
    return g.variable(data.clone(), _label(g, old))


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
    out_ch = int(wv.shape[0])
    bias = _conv_bias(op)
    if bias is not None and bias.rank:
        vec = _per_channel(bias, 2, 1, out_ch)
        new = (vec.to(torch.float64) + delta.to(torch.float64)).to(bias.dtype)
        _set_conv_bias(op, _replace(g, bias, new.reshape(bias.value.shape)))
    else:
        base = float(bias.value) if bias is not None else 0.0
        new = (delta.to(torch.float64) + base).to(wv.dtype).reshape(1, out_ch)
        label = _label(g, w)
        label = label[:-len("weight")] + "bias" if label and label.endswith("weight") else None
        _set_conv_bias(op, g.variable(new, label) if label else g.const(new))


def _shrink_linear_input(g: Graph, op: Op, keep, gone, c, uses) -> None:
    w, waxis = _linear_weight(op)
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
    found = _linear_bias_add(g, op, uses)
    if found is not None:
        add, i = found
        b = add.args[i]
        vec = _per_channel(b, y.rank, y.rank - 1, y.shape[-1])
        new = (vec.to(torch.float64) + delta.to(torch.float64)).to(b.dtype)
        shape = [1] * (y.rank - 1) + [-1]  # a broadcast scalar bias becomes per-channel
        add.args[i] = _replace(g, b, new.reshape(shape))
        return
    _insert_add(g, op, delta.reshape([1] * (y.rank - 1) + [-1]), _label(g, w))


def _insert_add(g: Graph, op: Op, value: torch.Tensor, label: str | None) -> None:
    """``y = op(...)`` becomes ``y' = op(...); y = add(y', value)`` (uses of y unchanged)."""
    y = op.outputs[0]
    inner = Tensor(g.fresh_name(op.kind), y.shape, y.dtype)
    op.outputs[0] = inner
    if label and label.endswith("weight"):
        label = label[:-len("weight")] + "bias"
    const = g.variable(value, label) if value.numel() > 8 else g.const(value)
    g.ops.insert(g.ops.index(op) + 1, Op("add", [inner, const], {}, [y]))

