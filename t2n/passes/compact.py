"""Channel compaction: remove the output channels that structured pruning zeroed.

A convolution, transposed or not (or a matrix product with a constant weight), whose filter
is all zero for an output channel computes a constant for it (its bias); per-channel ops after it (batch norm,
scales, activations) make it another constant ``c``, and pooling, reductions, squeezes and
a flatten carry it on (``compact_layout``). So the channel goes: the producer's filter and
bias lose it, so do the per-channel constants on the way, and each consumer (a convolution,
transposed or not, grouped or not, a matrix product over the channel axis) loses the
matching input and folds what ``c`` contributed into its bias,
``bias[o] += c * sum(W[o, k, ...])`` (exact; a zero-padded consumer, or a transposed one
whose outputs do not all see every tap, gets a border map instead, see
``_add_border_map``). A zero-padded depthwise conv turns ``c`` into a per-position map; it
is followed as such (``compact_values``): where it is the same everywhere or is reduced
to one constant it is folded like one, and a conv reading a varying map adds it as a
position map (``_add_position_map``). Which channels
go is decided per *region* (``compact_region``): a residual ``add`` ties the channels of
the weight layers behind both operands (the channels zero in all of them go, from all of
them), a concatenation ties each input's channels to its slice of the result, and a
depthwise convolution (transposed too) ties each input channel to its filters (a group whose filters are
all zero makes its input channel dead: the layer producing it drops that channel too).
A grouped convolution loses as many channels from every group (the fewest any group can
lose). Anything else that reads a channel (a graph input or output, a
consumer reading it as a varying map, an op the pass does not know) keeps it: the pass never changes a result. Layers are visited
last first, so a border map added after a consumer never blocks its own plan.

The pass runs for ``t2n.export(..., compact=True)`` and reports per-layer figures
(sparsity, channels removed, parameters) in ``ExportResult.extras["layers"]`` and the
report, also without ``compact`` when the model has ``torch.nn.utils.prune`` attached.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from t2n.walk.builder import Graph, Op, Tensor
from t2n.passes import GraphPass, compact_layout, compact_region, compact_values
from t2n.session import ExportSession
from t2n.passes.channels import (CONV_KINDS, conv_bias, linear_bias_add, linear_weight, op_order,
                       per_channel, set_conv_bias, tensor_uses, variable_label, weight_layers)


@dataclass
class LayerStats:
    """What the pass saw and did for one layer with a constant weight."""

    name: str
    kind: str  # "conv", "deconv" (transposed) or "linear"
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
def compact_pass(g: Graph, session: ExportSession) -> None:
    """Compact with ``compact=True``; report the pruned layers of a pruned model anyway."""
    compact = bool(session.options.get("compact", False))
    if not compact and not _has_pruning(session.model):
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
    extras = session.extras
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
    if op.kind in CONV_KINDS:
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
    return LayerStats(_layer_name(g, op), op.kind if op.kind in CONV_KINDS else "linear",
                      sparsity, channels, channels, params, params)



# ---------------------------------------------------------------------------- compaction
def compact_graph(g: Graph) -> None:
    """Remove every removable channel (see the module docstring and ``compact_region``)."""
    done: set[int] = set()  # weight layers whose region was planned already
    cache: dict = {}  # compact_region.source of unchanged weight layers
    live = g.live_ops()
    uses, order = tensor_uses(g, live), op_order(g)
    layers = weight_layers(g, live)
    for op in reversed(layers):  # last first (see the module docstring)
        if id(op) in done:
            continue
        region = compact_region.plan(g, op, uses, order, layers, _absorbable, cache)
        done.add(id(op))
        if region is None:
            continue
        done.update(id(p) for p in region.producers)
        done.update(id(p) for p, _ in region.depthwise)
        before = len(g.ops)
        _apply(g, region, uses)
        if len(g.ops) != before:  # a border map or a bias add: the index is stale
            live = g.live_ops()
            uses, order = tensor_uses(g, live), op_order(g)
            layers = weight_layers(g, live)


def _absorbable(op: Op, m) -> torch.Tensor:
    """bool [C]: the constant input channels of member ``m`` that consumer ``op`` can fold
    exactly: a constant into its bias (a zero-padded or transposed conv needs a border map,
    or a zero constant); a map (``compact_values``) only into a conv (transposed or not),
    as the position map of ``_add_position_map``."""
    value = m.value
    ok = torch.isfinite(value) if value.dtype.is_floating_point else \
        torch.zeros(value.shape, dtype=torch.bool)
    if op.kind in CONV_KINDS and not _uniform_response(op) and not _border_map_ok(op):
        ok &= value == 0
    if bool(m.mapped.any()):
        if op.kind in CONV_KINDS and _border_map_ok(op) and \
                len(compact_values.spatial(m) or ()) in (1, 2, 3) and all(
                isinstance(d, int) for d in op.outputs[0].shape[2:]) and \
                m.field.dtype.is_floating_point:
            finite = torch.isfinite(m.field.reshape(m.channels, -1)).all(dim=1)
            ok = torch.where(m.mapped, finite, ok)
        else:
            ok &= ~m.mapped
    return ok


def _border_map_ok(op: Op) -> bool:
    """Whether a zero-padded conv can absorb constant channels through a border map: the
    map needs explicit zero padding and static spatial sizes."""
    x = op.args[0]
    return op.attrs.get("border", "constant") == "constant" and bool(op.attrs.get("padding")) \
        and all(isinstance(d, int) for d in x.shape[2:])


def _uniform_response(op: Op) -> bool:
    """Whether a constant input makes a constant output of conv ``op`` (``c * sum(W)``
    at every position): a conv without padding; a transposed conv with stride 1 whose
    padding crops the ``d * (k - 1)`` border outputs on both sides (every output then
    sees every tap)."""
    pad = op.attrs.get("padding")
    if not pad:  # [] means automatic ("same") padding in NNEF
        return False
    if op.kind == "conv":
        return all(int(a) == 0 and int(b) == 0 for a, b in pad)
    w = op.args[1]
    n = w.rank - 2
    stride = [int(v) for v in op.attrs.get("stride") or [1] * n]
    dilation = [int(v) for v in op.attrs.get("dilation") or [1] * n]
    return len(pad) == n and all(
        s == 1 and int(a) == int(b) == d * (int(k) - 1)
        for s, d, k, (a, b) in zip(stride, dilation, w.shape[2:], pad))



def _apply(g: Graph, r, uses) -> None:
    """Rewrite the graph for the region ``r`` (``compact_region.plan``)."""
    members = r.members
    for op in r.producers:
        m = members[id(op.outputs[0])]
        w, keep, channels = op.args[1], m.keep, m.channels
        if op.kind in CONV_KINDS:
            op.args[1] = _replace(g, w, w.value.index_select(0, keep))
            bias = conv_bias(op)
            if bias is not None and bias.rank:
                set_conv_bias(op, _replace(g, bias, _take(bias.value, 1, keep, channels)))
        else:
            _, waxis = linear_weight(op)
            op.args[1] = _replace(g, w, w.value.index_select(waxis, keep))
    for op, _ in r.depthwise:
        x, y = members[id(op.args[0])], members[id(op.outputs[0])]
        w = op.args[1]
        op.args[1] = _replace(g, w, w.value.index_select(0, y.keep))
        bias = conv_bias(op)
        if bias is not None and bias.rank:
            set_conv_bias(op, _replace(g, bias, _take(bias.value, 1, y.keep, y.channels)))
        op.attrs["groups"] = int(x.keep.numel())
    for user in r.chain:  # per-channel constant operands of element-wise ops
        if user.kind == "concat" or user.kind in compact_layout.KINDS:
            continue
        m = members[id(user.outputs[0])]
        for i, a in enumerate(user.args):
            if isinstance(a, Tensor) and id(a) not in members and a.is_const \
                    and m.axis < a.rank and a.shape[m.axis] == m.channels:
                user.args[i] = _replace(g, a, a.value.index_select(m.axis, m.keep))
    for m in members.values():
        shape = list(m.t.shape)
        shape[m.axis] = int(m.keep.numel()) * m.block
        m.t.shape = tuple(shape)
    for user in r.chain:
        compact_layout.resize(user)
    for user, t, kind in r.consumers:
        m = members[id(t)]
        mapped = m.mapped[m.gone]
        c = torch.where(mapped, torch.zeros((), dtype=m.value.dtype), m.value[m.gone])
        if kind == "conv":
            if bool(mapped.any()):  # with the filter as it was
                _add_position_map(g, user, m, m.gone[mapped])
            _shrink_conv_input(g, user, m.keep, m.gone, c)
        else:
            _shrink_linear_input(g, user, compact_layout.features(m.keep, m.block),
                                 compact_layout.features(m.gone, m.block),
                                 c.repeat_interleave(m.block), uses)


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


def _input_columns(wv: torch.Tensor, groups: int, keep, gone):
    """(filter without the removed input channels, filter of the removed ones as
    ``[O, removed, k...]``) of a conv with ``groups``: output channel ``o`` of group ``G``
    reads input channel ``G * a + j`` through column ``j``, so each group keeps its own
    columns (the plan removes as many from every group) and a removed channel's column is
    zero for the other groups' outputs."""
    if groups == 1:
        return wv.index_select(1, keep), wv.index_select(1, gone)
    a, per = int(wv.shape[1]), int(wv.shape[0]) // groups
    kept, lost = [], torch.zeros((wv.shape[0], gone.numel()) + tuple(wv.shape[2:]),
                                 dtype=wv.dtype)
    for grp in range(groups):
        rows = slice(grp * per, (grp + 1) * per)
        mine = keep[(keep // a) == grp] - grp * a
        kept.append(wv[rows].index_select(1, mine))
        for j, i in enumerate(gone.tolist()):
            if i // a == grp:
                lost[rows, j] = wv[rows, i - grp * a]
    return torch.cat(kept, 0), lost


def _shrink_conv_input(g: Graph, op: Op, keep, gone, c) -> None:
    w = op.args[1]
    wv = w.value
    w_keep, w_gone = _input_columns(wv, int(op.attrs.get("groups", 1)), keep, gone)
    delta = None
    if bool((c != 0).any()):
        spatial = list(range(2, wv.dim()))
        sums = w_gone.sum(dim=spatial)  # [O, removed]
        delta = (sums.to(torch.float64) @ c.to(torch.float64)).to(wv.dtype)
    op.args[1] = _replace(g, w, w_keep)
    if delta is None:
        return
    if not _uniform_response(op):
        _add_border_map(g, op, w_gone, c)
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
        label = _renamed(variable_label(g, w), "bias")
        set_conv_bias(op, g.variable(new, label) if label else g.const(new))


def _add_border_map(g: Graph, op: Op, w_gone: torch.Tensor, c: torch.Tensor) -> None:
    """What constant channels contribute through a zero-padded conv depends on the position
    (border outputs see fewer taps; so do the outputs of a transposed conv between its
    strided taps): it is ``conv(ones, sum_k c_k W[:, k])`` (``deconv`` for a transposed
    conv) with the same padding, an input-independent map. It is added after ``op``; the archive stores only
    the one-channel filter, and tract folds the constant subgraph when it loads the model."""
    shape = (w_gone.shape[0], 1) + tuple(w_gone.shape[2:])
    w_eff = (w_gone.to(torch.float64) * c.to(torch.float64).reshape(1, -1, *[1] * (
        w_gone.dim() - 2))).sum(dim=1).reshape(shape).to(w_gone.dtype)
    x, y = op.args[0], op.outputs[0]
    start = len(g.ops)
    ones = g.broadcast_to(g.scalar(1.0, x.dtype), [1, 1] + list(x.shape[2:]))
    label = _renamed(variable_label(g, op.args[1]), "border_map")
    attrs = {k: v for k, v in op.attrs.items() if k != "bias"}
    attrs["groups"] = 1
    fmap = g.op(op.kind, ones, g.variable(w_eff, label), g.scalar(0.0, y.dtype),
                out_shape=[1] + list(y.shape[1:]), out_dtype=y.dtype, **attrs)
    _add_after(g, op, fmap, start)


def _add_position_map(g: Graph, op: Op, m, channels: torch.Tensor) -> None:
    """What the removed map channels ``channels`` of member ``m`` contribute through conv
    ``op`` (transposed or not; its filter still whole), ``conv(maps)``: an input-independent
    ``[1, C_out, *spatial]``, added after ``op``. It repeats along each spatial axis
    (the interior positions see the same taps of the same maps), so the archive stores
    its distinct slices and an index per axis, gathered back; tract folds the constant
    subgraph when it loads the model."""
    y = op.outputs[0]
    if int(op.attrs.get("groups", 1)) == 1:  # only the filter columns of those channels
        full = compact_values.conv_constant(op, m.field[channels],
                                            op.args[1].value[:, channels], 1)
    else:
        x = torch.zeros(m.field.shape, dtype=torch.float64)
        x[channels] = m.field[channels].to(torch.float64)
        full = compact_values.conv_constant(op, x)
    small, index = full, []
    for axis in range(1, full.dim()):
        uniq, inv = torch.unique(small, dim=axis, return_inverse=True)
        if uniq.shape[axis] < small.shape[axis]:
            small = uniq
            index.append((axis + 1, inv))
    label = _renamed(variable_label(g, op.args[1]), "position_map")
    start = len(g.ops)
    value = small.to(y.dtype).unsqueeze(0).contiguous()
    t = g.variable(value, label) if value.numel() > 8 else g.const(value)
    for axis, inv in index:
        t = g.gather(t, g.const(inv.to(torch.int64)), axis)
    _add_after(g, op, t, start)


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


def _add_after(g: Graph, op: Op, term: Tensor, start: int) -> None:
    """``y = op(...)`` becomes ``y' = op(...); y = add(y', term)``, with the ops that compute
    ``term`` (appended to the graph from ``start`` on) moved to just after ``op``."""
    y = op.outputs[0]
    inner = Tensor(g.fresh_name(op.kind), y.shape, y.dtype)
    op.outputs[0] = inner
    g.ops.append(Op("add", [inner, term], {}, [y]))
    new = g.ops[start:]
    del g.ops[start:]
    at = g.ops.index(op) + 1
    g.ops[at:at] = new


def _insert_add(g: Graph, op: Op, value: torch.Tensor, label: str | None) -> None:
    """``y = op(...)`` becomes ``y' = op(...); y = add(y', value)`` (uses of y unchanged)."""
    label = _renamed(label, "bias") or label
    const = g.variable(value, label) if value.numel() > 8 else g.const(value)
    _add_after(g, op, const, len(g.ops))


def _renamed(weight_label: str | None, name: str) -> str | None:
    """The label of a tensor derived from a weight: ``conv1.weight`` -> ``conv1.<name>``."""
    if weight_label and weight_label.endswith("weight"):
        return weight_label[:-len("weight")] + name
    return None
