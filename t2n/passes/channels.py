"""What channel compaction reads of the NNEF graph: the weight layers (convolutions and matrix
products with constant weights) and their biases, who uses each tensor, per-channel
constants, and the element-wise ops it can evaluate on them (with torch, on the constant
of a zeroed channel). A helper module of :mod:`t2n.passes.compact`, not a pass."""

from __future__ import annotations

import torch

from t2n.walk.builder import Graph, Op, Tensor

# Element-wise NNEF ops, evaluated with torch on the per-channel constants of a zeroed
# channel: fn(operands, attrs). An op not listed here ends the chain (nothing compacted).
_F = torch.nn.functional


ELEMENTWISE = {
    "copy": lambda x, a: x[0], "relu": lambda x, a: torch.relu(x[0]),
    "sigmoid": lambda x, a: torch.sigmoid(x[0]), "tanh": lambda x, a: torch.tanh(x[0]),
    "neg": lambda x, a: -x[0], "abs": lambda x, a: x[0].abs(),
    "exp": lambda x, a: torch.exp(x[0]), "log": lambda x, a: torch.log(x[0]),
    "sqrt": lambda x, a: torch.sqrt(x[0]), "rsqrt": lambda x, a: torch.rsqrt(x[0]),
    "recip": lambda x, a: torch.reciprocal(x[0]), "rcp": lambda x, a: torch.reciprocal(x[0]),
    "sqr": lambda x, a: torch.square(x[0]), "square": lambda x, a: torch.square(x[0]),
    "floor": lambda x, a: torch.floor(x[0]), "ceil": lambda x, a: torch.ceil(x[0]),
    "sign": lambda x, a: torch.sign(x[0]),
    "sin": lambda x, a: torch.sin(x[0]), "cos": lambda x, a: torch.cos(x[0]),
    "tract_core_erf": lambda x, a: torch.erf(x[0]),
    "tract_core_is_nan": lambda x, a: torch.isnan(x[0]),
    "tract_core_silu": lambda x, a: _F.silu(x[0]),
    "tract_core_hard_swish": lambda x, a: _F.hardswish(x[0]),
    "softplus": lambda x, a: torch.log(torch.exp(x[0]) + 1),
    "elu": lambda x, a: torch.where(x[0] > 0, x[0], float(a.get("alpha", 1.0))
                                    * torch.expm1(x[0])),
    "leaky_relu": lambda x, a: torch.where(x[0] >= 0, x[0], float(a.get("alpha", 0.01))
                                           * x[0]),
    "tract_core_cast": lambda x, a: x[0],  # the result is cast to the output dtype
    "add": lambda x, a: x[0] + x[1], "sub": lambda x, a: x[0] - x[1],
    "mul": lambda x, a: x[0] * x[1], "div": lambda x, a: x[0] / x[1],
    "min": lambda x, a: torch.minimum(x[0], x[1]), "max": lambda x, a: torch.maximum(x[0], x[1]),
    "pow": lambda x, a: torch.pow(x[0], x[1]),
    "lt": lambda x, a: x[0] < x[1], "gt": lambda x, a: x[0] > x[1],
    "le": lambda x, a: x[0] <= x[1], "ge": lambda x, a: x[0] >= x[1],
    "eq": lambda x, a: x[0] == x[1], "ne": lambda x, a: x[0] != x[1],
    "and": lambda x, a: x[0] & x[1], "or": lambda x, a: x[0] | x[1],
    "not": lambda x, a: ~x[0],
    "select": lambda x, a: torch.where(x[0], x[1], x[2]),
    "clamp": lambda x, a: torch.minimum(torch.maximum(x[0], x[1]), x[2]),
    "batch_normalization": lambda x, a: (x[0] - x[1]) / torch.sqrt(
        x[2] + float(a.get("epsilon", 0.0))) * x[4] + x[3],
}


ARITY = {"add": 2, "sub": 2, "mul": 2, "div": 2, "min": 2, "max": 2, "pow": 2, "lt": 2,
          "gt": 2, "le": 2, "ge": 2, "eq": 2, "ne": 2, "and": 2, "or": 2, "select": 3,
          "clamp": 3, "batch_normalization": 5}


# Convolutions, forward and transposed. In the graph both have their filter as
# ``[C_out, C_in / groups, k...]`` (the mapping regroups PyTorch's transposed-convolution
# weight ``[C_in, C_out / groups, k...]``), so output channels are filter rows and input
# channels filter columns (per group) for both.
CONV_KINDS = ("conv", "deconv")


def weight_layers(g: Graph, live: list[Op] | None = None) -> list[Op]:
    """The convolutions (forward and transposed) and matrix products with a constant
    weight, of ``live`` (the live ops of ``g`` when not given)."""
    out = []
    for op in (g.live_ops() if live is None else live):
        if op.kind in CONV_KINDS and len(op.args) >= 2 and is_const(op.args[1]):
            out.append(op)
        elif op.kind == "matmul" and linear_weight(op) is not None:
            out.append(op)
    return out


def is_const(t) -> bool:
    return isinstance(t, Tensor) and t.is_const


def linear_weight(op: Op):
    """(weight, out axis of the weight) of ``x @ W`` / ``x @ W^T`` with a constant 2-D-like W."""
    if len(op.args) < 2 or not isinstance(op.args[0], Tensor) or not is_const(op.args[1]):
        return None
    if op.attrs.get("transposeA", False):
        return None
    w = op.args[1]
    if w.rank < 2 or any(d != 1 for d in w.shape[:-2]):
        return None
    return w, (w.rank - 2 if op.attrs.get("transposeB", False) else w.rank - 1)


def conv_bias(op: Op):
    """The conv bias argument (a constant), or None when absent or computed."""
    b = op.args[2] if len(op.args) > 2 else op.attrs.get("bias")
    return b if is_const(b) else None


def conv_bias_vector(op: Op, channels: int, dtype):
    """The bias of a convolution as a vector over its output channels (zeros without one);
    None when it is computed or not per-channel."""
    bias = conv_bias(op)
    has_bias = len(op.args) > 2 or "bias" in op.attrs
    if has_bias and bias is None:
        return None  # a computed bias: the channel is not constant
    if bias is None:
        return torch.zeros(channels, dtype=dtype)
    vec = per_channel(bias, 2, 1, channels)
    return None if vec is None else vec.to(dtype).clone()


def set_conv_bias(op: Op, value: Tensor) -> None:
    if len(op.args) > 2:
        op.args[2] = value
    elif "bias" in op.attrs:
        op.attrs["bias"] = value
    else:
        op.args.append(value)


def linear_bias_add(g: Graph, op: Op, uses) -> tuple[Op, int] | None:
    """The ``add(y, bias)`` right after a matmul, when it is y's only use."""
    y = op.outputs[0]
    u = uses.get(id(y), [])
    if len(u) != 1 or is_output(g, y):
        return None
    add, pos = u[0]
    if add.kind != "add" or len(add.args) != 2 or not isinstance(pos, int):
        return None
    other = add.args[1 - pos]
    if not is_const(other) or per_channel(other, y.rank, y.rank - 1, y.shape[-1]) is None:
        return None
    return add, 1 - pos


def variable_label(g: Graph, t: Tensor) -> str | None:
    for v in g.variables:
        if v.tensor is t:
            return v.label
    return None


def tensor_uses(g: Graph, live: list[Op] | None = None) -> dict[int, list]:
    """id(tensor) -> [(op, position)]; position is an arg index, or a tuple when the tensor
    sits inside a list argument or an attribute (never a per-channel use). ``live``: the
    live ops of ``g``, when the caller has them."""
    uses: dict[int, list] = {}
    for op in (g.live_ops() if live is None else live):
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


def op_order(g: Graph) -> dict[int, int]:
    return {id(op): i for i, op in enumerate(g.ops)}


def is_output(g: Graph, t: Tensor) -> bool:
    return any(o is t for o in g.outputs)


def per_channel(p: Tensor, rank: int, axis: int, channels: int):
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
