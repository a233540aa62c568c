"""What a compaction region's channels hold when they do not depend on the input (for
``compact_region.plan``): a per-channel constant, or a per-position constant (a *map*).

A zeroed weight layer's channel is its bias ``c`` at every position. Per-channel ops keep it
one constant; so do pooling, reductions and reshapes (``compact_layout``). Two kinds of op
make it depend on the position, input-independent still:

* a zero-padded convolution, a transposed convolution (a depthwise one is followed through
  the region): border outputs (and, with a stride, outputs between the taps) see fewer
  filter taps, so the output is ``c * conv(ones, W) + b``;
* a ``pad`` with a constant other than ``c`` (``reflect``/``replicated`` pads keep ``c``).

Such a channel is evaluated as a map (its exact values at every position, with torch, on the
static spatial sizes of the graph) and followed on: element-wise ops apply to it, a
concatenation carries it, a reduction over the spatial axes (global pooling, the squeeze of
a squeeze-excitation) makes it one constant again. A map that is the same at every position
(an activation that clips it, filter taps that are zero on the border, a pad of the
channel's own value) *is* a constant, and the consumers fold it like any other; a map that
varies stays a map. What a map adds through a consumer depends on the position, so it
cannot go into a bias: a conv gets it as an input-independent tensor
(``compact._add_position_map``, stored as its few distinct slices); any other op reading
a map keeps the channel. ``Member.known`` marks both kinds, ``Member.mapped`` the maps (``Member.field``
holds them, ``[C, *spatial]``, for the mapped channels).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from t2n.walk.builder import Op
from t2n.passes.channels import ARITY, CONV_KINDS, ELEMENTWISE, conv_bias_vector, per_channel

_REDUCE = {"mean_reduce": torch.mean, "max_reduce": torch.amax, "min_reduce": torch.amin}
_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicated": "replicate"}


def evaluate(r, source, order) -> None:
    """Constants (``value``/``known``/``mapped``/``field``) of every member of region
    ``r``, in graph order. ``source(op)`` gives a producer's zero mask and bias,
    ``order(op)`` its place in the graph."""
    for m in r.members.values():
        m.value = torch.zeros(m.channels, dtype=m.t.dtype)
        m.known = torch.zeros(m.channels, dtype=torch.bool)
        m.mapped = torch.zeros(m.channels, dtype=torch.bool)
        m.field = None
    for p in r.producers:
        m = r.members[id(p.outputs[0])]
        _, _, zero, c0 = source(p)
        m.value, m.known = c0.to(m.t.dtype), zero.clone()
    ops = r.chain + [op for op, _ in r.depthwise]
    for op in sorted(ops, key=order):
        out = r.members[id(op.outputs[0])]
        if op.kind == "concat":
            _concat(op, out, r.members)
        elif op.kind in ELEMENTWISE:
            _elementwise(op, out, r.members)
        elif op.kind in CONV_KINDS:
            _depthwise(op, out, r.members[id(op.args[0])])
        elif op.kind == "pad":
            _pad(op, out, r.members[id(op.args[0])])
        else:
            _layout(op, out, r.members[id(op.args[0])])


# ---------------------------------------------------------------------------- maps
def spatial(m):
    """The static spatial sizes of a member a map can describe (channels on axis 1 of a
    tensor with spatial axes after it), else None."""
    t = m.t
    if m.axis != 1 or m.block != 1 or t.rank < 3 or not all(
            isinstance(d, int) for d in t.shape[2:]):
        return None
    return tuple(int(d) for d in t.shape[2:])


def field(m, dtype=None) -> torch.Tensor:
    """``[C, *spatial]``: the map of each mapped channel, the constant of the others."""
    s = spatial(m)
    v = m.value if dtype is None else m.value.to(dtype)
    f = v.reshape(-1, *[1] * len(s)).expand(m.channels, *s)
    if m.field is not None and bool(m.mapped.any()):
        f = torch.where(m.mapped.reshape(-1, *[1] * len(s)), m.field.to(f.dtype), f)
    return f


def _settle(out, f: torch.Tensor, which: torch.Tensor) -> None:
    """Channels ``which`` of ``out`` hold the maps ``f`` (``[C, *spatial]``): uniform ones
    become constants, the others maps."""
    flat = f.reshape(out.channels, -1)
    uniform = (flat == flat[:, :1]).all(dim=1) if flat.shape[1] else \
        torch.ones(out.channels, dtype=torch.bool)
    const = which & uniform
    first = flat[:, 0] if flat.shape[1] else torch.zeros(out.channels, dtype=f.dtype)
    out.value = torch.where(const, first.to(out.t.dtype), out.value)
    out.known = out.known | which
    out.mapped = (out.mapped & ~which) | (which & ~uniform)
    if bool(out.mapped.any()):
        out.field = f.to(out.t.dtype) if out.field is None else torch.where(
            (which & ~uniform).reshape(-1, *[1] * (f.dim() - 1)), f.to(out.t.dtype),
            out.field)
    else:
        out.field = None


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _scalar(m) -> torch.Tensor:
    """Channels of ``m`` holding one constant."""
    return m.known & ~m.mapped


# ---------------------------------------------------------------------------- op kinds
def _layout(op: Op, out, src) -> None:
    """Pooling, reductions, squeeze, unsqueeze, reshape: a constant stays the same
    constant; a map is reshaped by a reshape that keeps the batch and channel axes,
    reduced by a reduction, and not followed through pooling."""
    out.value, out.known = src.value.to(out.t.dtype), _scalar(src)
    if not bool(src.mapped.any()) or spatial(src) is None:
        return
    if op.kind in ("reshape", "squeeze", "unsqueeze"):  # the same entries, in order
        s = spatial(out)
        if s is not None and out.t.shape[0] == src.t.shape[0] and \
                _numel(s) == _numel(spatial(src)):
            _settle(out, field(src).reshape(out.channels, *s), src.mapped.clone())
        return
    if op.kind not in _REDUCE:
        return
    axes = {int(a) for a in op.attrs.get("axes", [])}
    rank = src.t.rank
    if 1 in axes or out.t.rank != rank:
        return
    f = field(src, torch.float64)
    dims = [a - 1 for a in sorted(axes) if a >= 2]  # axes of the field (batch: no axis)
    if dims:
        f = _REDUCE[op.kind](f, dim=dims, keepdim=True)
    if spatial(out) is None or tuple(f.shape[1:]) != spatial(out):
        return
    _settle(out, f, src.mapped.clone())


def _concat(op: Op, out, members) -> None:
    vals, known, parts_mapped = [], [], False
    for p in op.args[0]:
        pm = members.get(id(p))
        n = int(p.shape[out.axis])
        vals.append(pm.value.to(out.t.dtype) if pm else torch.zeros(n, dtype=out.t.dtype))
        known.append(_scalar(pm) if pm else torch.zeros(n, dtype=torch.bool))
        parts_mapped |= bool(pm is not None and pm.mapped.any())
    out.value, out.known = torch.cat(vals), torch.cat(known)
    if not parts_mapped or spatial(out) is None:
        return
    fields, which = [], []
    for p in op.args[0]:
        pm = members.get(id(p))
        if pm is None or spatial(pm) != spatial(out):
            return
        fields.append(field(pm, out.t.dtype))
        which.append(pm.mapped)
    _settle(out, torch.cat(fields), torch.cat(which))


def _elementwise(op: Op, out, members: dict) -> None:
    ax, c = out.axis, out.channels
    if (op.kind in ARITY and len(op.args) != ARITY[op.kind]) or \
            (op.kind not in ARITY and len(op.args) != 1):
        return
    maps = any(bool(members[id(a)].mapped.any()) for a in op.args if id(a) in members)
    s = spatial(out) if maps else ()
    if s is None:
        maps = False  # the maps are not followed: their channels are unknown here
    operands, known, which = [], torch.ones(c, dtype=torch.bool), torch.zeros(c, dtype=torch.bool)
    for a in op.args:
        m = members.get(id(a))
        if m is not None:
            if maps and spatial(m) is not None and len(spatial(m)) == len(s):
                operands.append(field(m))
                known &= m.known
                which |= m.mapped
            else:
                operands.append(m.value.reshape(-1, *[1] * len(s)))
                known &= _scalar(m)
        elif a.is_const:
            v = per_channel(a, out.t.rank, ax, c)
            if v is None:
                return
            operands.append(v.reshape(-1, *[1] * len(s)))
        else:
            return  # a computed operand broadcast over the channels: not a constant
    floats = [v.dtype for v in operands if v.dtype.is_floating_point]
    if floats:  # tract has no implicit promotion: float operands share one dtype
        operands = [v.to(floats[0]) if v.dtype.is_floating_point else v for v in operands]
    with torch.no_grad():
        try:
            value = ELEMENTWISE[op.kind](operands, op.attrs).to(out.t.dtype)
        except (RuntimeError, TypeError):
            return
    if not maps:
        if value.shape == (c,):
            out.value, out.known = value, known
        return
    value = value.expand(c, *s) if value.dim() == len(s) + 1 else value
    if tuple(value.shape) != (c,) + s:
        return
    out.known = torch.zeros(c, dtype=torch.bool)
    _settle(out, value, known)


def _depthwise(op: Op, out, src) -> None:
    """Output channel ``o`` of a depthwise (transposed) convolution of constant channels:
    its bias when its filter or its input is zero (a transposed convolution adds the bias
    at every position), ``c * sum(W[o]) + b[o]`` for a constant ``c`` through an unpadded
    convolution, else the map of ``c`` (or of an input map) through the convolution."""
    w = op.args[1].value
    k = w.shape[0] // src.channels
    bias = conv_bias_vector(op, int(w.shape[0]), w.dtype).to(torch.float64)
    flat = w.reshape(w.shape[0], -1).to(torch.float64)
    zero = (flat == 0).all(dim=1)
    c = src.value.to(torch.float64).repeat_interleave(k)
    ck = _scalar(src).repeat_interleave(k) & torch.isfinite(c)
    value = torch.where(zero, bias, c * flat.sum(dim=1) + bias)
    known = zero | (ck & (c == 0))
    if op.kind == "conv" and _unpadded(op):
        known |= ck
    out.value, out.known = value.to(out.t.dtype), known
    out.mapped, out.field = torch.zeros_like(known), None
    need = (ck | src.mapped.repeat_interleave(k)) & ~known
    if bool(need.any()):
        f = _conv_map(op, src, out)
        if f is not None:
            _settle(out, f, need)


def _unpadded(op: Op) -> bool:
    pad = op.attrs.get("padding")
    return bool(pad) and all(int(a) == 0 and int(b) == 0 for a, b in pad)


def _conv_map(op: Op, src, out):
    """``[C_out, *spatial]``: the depthwise (transposed) convolution of ``src``'s maps and
    constants, bias included, computed in float64; None when the sizes are not static or
    the padding is automatic."""
    s_in, s_out = spatial(src), spatial(out)
    if s_in is None or s_out is None:
        return None
    w = op.args[1].value.to(torch.float64)
    k = int(w.shape[0]) // src.channels
    y = torch.zeros((int(w.shape[0]),) + s_out, dtype=torch.float64)
    scalar = _scalar(src)
    if bool(scalar.any()):  # c * conv(ones, W): one input channel, torch's fast dense path
        base = conv_constant(op, torch.ones((1,) + s_in, dtype=torch.float64), w, 1)
        if base is None or tuple(base.shape[1:]) != s_out:
            return None
        c = torch.where(scalar, src.value.to(torch.float64), 0.0).repeat_interleave(k)
        y += c.reshape(-1, *[1] * len(s_out)) * base
    if bool(src.mapped.any()):  # the input maps, through their own filters
        idx = torch.nonzero(src.mapped).reshape(-1)
        rows = (idx.reshape(-1, 1) * k + torch.arange(k)).reshape(-1)
        part = conv_constant(op, field(src, torch.float64)[idx], w[rows], int(idx.numel()))
        if part is None or tuple(part.shape[1:]) != s_out:
            return None
        y[rows] = part
    return y + conv_bias_vector(op, int(y.shape[0]), torch.float64).reshape(
        -1, *[1] * len(s_out))


def conv_constant(op: Op, x: torch.Tensor, w: torch.Tensor | None = None,
                  groups: int | None = None):
    """``[C_out, *spatial]``: conv (or deconv) ``op`` without its bias applied to the
    input-independent ``x`` (``[C_in, *spatial]``), in float64 with torch, with ``op``'s
    filter and groups unless ``w`` (graph layout) and ``groups`` are given; None when the
    padding is automatic or not zeros."""
    pad = op.attrs.get("padding")
    n = x.dim() - 1
    conv = {1: (F.conv1d, F.conv_transpose1d), 2: (F.conv2d, F.conv_transpose2d),
            3: (F.conv3d, F.conv_transpose3d)}.get(n)
    if conv is None or not pad or len(pad) != n or \
            op.attrs.get("border", "constant") != "constant":
        return None
    stride = [int(v) for v in op.attrs.get("stride") or [1] * n]
    dilation = [int(v) for v in op.attrs.get("dilation") or [1] * n]
    groups = int(op.attrs.get("groups", 1)) if groups is None else groups
    w = (op.args[1].value if w is None else w).to(torch.float64)
    x = x.to(torch.float64).unsqueeze(0)
    with torch.no_grad():
        if op.kind == "conv":
            flat_pad = [int(v) for a, b in reversed(pad) for v in (a, b)]
            y = conv[0](F.pad(x, flat_pad), w, None, stride, 0, dilation, groups)
        else:  # tract's filter [C_out, C_in/g, k...] is torch's [C_in, C_out/g, k...]
            w = w.reshape(groups, -1, *w.shape[1:]).transpose(1, 2)
            wt = w.reshape(-1, *w.shape[2:])
            y = conv[1](x, wt, None, stride, 0, 0, groups, dilation)
            crop = [slice(None), slice(None)] + [
                slice(int(a), y.shape[2 + i] - int(b)) for i, (a, b) in enumerate(pad)]
            y = y[tuple(crop)]
    return y[0]


def _pad(op: Op, out, src) -> None:
    """A ``reflect``/``replicated`` pad keeps a constant, a constant pad keeps the
    constant equal to its value; other channels become maps."""
    border = op.attrs.get("border", "constant")
    fill = float(op.attrs.get("value", 0.0))
    scalar = _scalar(src)
    same = scalar & ((src.value == fill) if border == "constant" else torch.ones_like(scalar))
    out.value, out.known = src.value.to(out.t.dtype), same
    need = src.known & ~same
    s_in = spatial(src)
    if not bool(need.any()) or s_in is None or spatial(out) is None or \
            border not in _PAD_MODES:
        return
    pads = op.attrs.get("padding") or []
    if len(pads) != src.t.rank or any(int(a) or int(b) for a, b in pads[:2]):
        return
    flat_pad = [int(v) for a, b in reversed(pads[2:]) for v in (a, b)]
    x = field(src, torch.float64).unsqueeze(0)
    try:
        if border == "constant":
            y = F.pad(x, flat_pad, mode="constant", value=fill)
        else:
            y = F.pad(x, flat_pad, mode=_PAD_MODES[border])
    except (RuntimeError, NotImplementedError, ValueError):
        return
    if tuple(y.shape[2:]) == spatial(out):
        _settle(out, y[0], need)
