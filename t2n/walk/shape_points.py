"""Output shapes of common ops on dynamic axes from three runs on meta tensors.

:class:`t2n.walk.dynamic.SymbolicShapes` asks PyTorch's symbolic shape functions for the
output sizes of every node that reads a dynamic axis: fake tensors over a fresh
``ShapeEnv``, 3-80 ms a node (a linear 40 ms, an einsum 280 ms), three quarters of the
export time of a transformer with dynamic axes. For the ops of :data:`PASSING_SIZES_OPS`,
every output size is either fixed or one of the sizes the op was given (an input's axis, a
size argument such as a reshape's ``B*S``): an element-wise op, a norm, a linear, a
permute, an einsum. Such an op is run here on meta tensors (sizes, no data: microseconds)
at the example sizes and at two other sets of sizes of the symbols. An output size that
stays the same at all three is that number; one that equals the same given size at all
three is that size's expression. Anything else (a size no given one matches, two given
sizes that match with different expressions, an op that fails at the other sizes, which is
how broadcasting ``S`` against ``T`` or a reshape to the example's numbers shows) gives
None, and PyTorch's symbolic functions answer (and raise what they raise) as before.
"""

from __future__ import annotations

import sympy
import torch

from t2n.walk.builder import Tensor, _is_sym

# aten ops whose output sizes are fixed numbers or sizes the op is given; none of them
# computes a size (a sum, a product, a floor division) from a dynamic one
PASSING_SIZES_OPS = frozenset({
    # element-wise, unary
    "abs", "neg", "exp", "relu_", "silu_", "gelu_", "sigmoid_", "tanh_", "hardtanh_",
    "clamp_", "add_", "sub_", "mul_", "div_", "masked_fill_", "fill_", "zero_", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "relu", "gelu", "silu",
    "erf", "sin", "cos", "reciprocal", "softplus", "hardtanh", "hardswish", "hardsigmoid",
    "leaky_relu", "elu", "mish", "logical_not", "bitwise_not", "sign", "floor", "ceil",
    "round", "clamp", "clamp_min", "clamp_max", "pow", "contiguous", "clone", "to",
    "type_as", "detach", "dropout", "alias", "_to_copy", "isnan", "isinf", "nan_to_num",
    # element-wise, broadcasting
    "add", "sub", "rsub", "mul", "div", "floor_divide", "remainder", "fmod", "maximum",
    "minimum", "eq", "ne", "lt", "le", "gt", "ge", "__and__", "__or__", "__xor__",
    "logical_and", "logical_or", "bitwise_and", "bitwise_or", "where", "masked_fill",
    "lerp", "addcmul", "addcdiv", "copy_", "expand_as",
    # norms, softmax, cumulative and masking ops: the input's sizes
    "layer_norm", "group_norm", "batch_norm", "instance_norm", "rms_norm", "softmax",
    "log_softmax", "_softmax", "cumsum", "cumprod", "tril", "triu",
    # products: every output size is one of an input's
    "linear", "matmul", "bmm", "mm", "addmm", "einsum",
    "scaled_dot_product_attention", "embedding",
    # axes moved, added, taken or given: sizes passed through or given as arguments
    "permute", "transpose", "t", "unsqueeze", "squeeze", "reshape", "view", "expand",
    "select", "slice", "narrow", "index_select", "repeat", "flatten", "unflatten",
    "arange", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like",
    "new_zeros", "new_ones", "new_full", "mean", "sum", "amax", "amin", "max", "min",
    "argmax", "argmin", "any", "all", "prod", "var", "std", "norm",
    "_convolution", "conv1d", "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
    "pad", "constant_pad_nd", "split", "split_with_sizes", "chunk", "unbind", "stack", "cat",
})

_OFFSETS = ((0, 0), (3, 2), (7, 3))  # point k gives the i-th symbol hint + a + b*i


class _NotShown(Exception):
    """A given size the points cannot tell apart from a number."""


class PointShapes:
    """Three sets of sizes of the symbols (the example's first), and each size
    expression's value at them (memoised: a layer repeats its expressions)."""

    def __init__(self, hints: dict):
        ordered = sorted(hints, key=lambda s: s.name)
        self.points = [{s: sympy.Integer(int(hints[s]) + a + b * i)
                        for i, s in enumerate(ordered)} for a, b in _OFFSETS]
        self._values: dict = {}

    def values(self, expr) -> tuple:
        """``expr`` at each point; a size that is not a polynomial of the symbols (a
        rounding up to a multiple, a min) is given the same value twice, so it is never
        read from the points (it may be constant around the example and vary elsewhere)."""
        v = self._values.get(expr)
        if v is None:
            v = tuple(int(expr.xreplace(p)) for p in self.points)
            if not expr.is_polynomial(*self.points[0]):
                v = (v[0],) * len(v)
            self._values[expr] = v
        return v

    def out_shapes(self, schema, inputs: list):
        """Output shapes as :meth:`SymbolicShapes.out_shapes` gives them, or None when this
        op is not one of :data:`PASSING_SIZES_OPS` or its sizes do not show as above."""
        ns, name = schema.name.split("::", 1)
        if ns != "aten" or name not in PASSING_SIZES_OPS:
            return None
        op = getattr(getattr(torch.ops.aten, name), schema.overload_name or "default")
        given: dict = {}  # the values of a given size at the points -> its expression(s)
        runs = []
        try:
            if name == "cat":  # the sum of the sizes along the axis joined is given too
                self._joined(inputs, given)
            for k in range(len(self.points)):
                args, kwargs = [], {}
                for arg, value in zip(schema.arguments, inputs):
                    v = self._at(value, k, given if k == 0 else None)
                    if arg.kwarg_only:
                        kwargs[arg.name] = v
                    else:
                        args.append(v)
                result = op(*args, **kwargs)
                runs.append(list(result) if isinstance(result, (tuple, list)) else [result])
        except Exception:  # a size the op refuses at other sizes, no meta kernel, ...
            return None
        out = []
        for results in zip(*runs):
            if not isinstance(results[0], torch.Tensor):
                out.append(None)
                continue
            if any(not isinstance(r, torch.Tensor) or r.dim() != results[0].dim()
                   for r in results):
                return None
            shape = []
            for sizes in zip(*(r.shape for r in results)):
                sizes = tuple(int(s) for s in sizes)
                if len(set(sizes)) == 1:
                    shape.append(sizes[0])
                    continue
                exprs = given.get(sizes, ())
                if len(exprs) != 1:
                    return None  # no given size, or several, varies like this one
                shape.append(next(iter(exprs)))
            # a shape with no dynamic size is the traced one (PyTorch's answer there: None)
            out.append(tuple(shape) if any(not isinstance(d, int) for d in shape) else None)
        return out

    def _joined(self, inputs: list, given: dict) -> None:
        """``cat``'s output size along its axis: the sum of its inputs' sizes there."""
        tensors, dim = inputs[0], inputs[1] if len(inputs) > 1 else 0
        if not isinstance(dim, int) or not all(isinstance(t, Tensor) and t.shape
                                               for t in tensors):
            return
        total = sympy.Add(*[sympy.sympify(t.shape[dim]) for t in tensors])
        if total.is_number:
            return
        values = self.values(total)
        if len(set(values)) == len(values):
            given.setdefault(values, set()).add(total)

    def _at(self, x, k: int, given: dict | None):
        """``x`` at point ``k``: a tensor as a meta tensor of its sizes there, a size as its
        value there; ``given`` collects the dynamic sizes met (at the first point)."""
        if isinstance(x, Tensor):
            if x.is_const and x.static_shape() is not None:
                return torch.empty(x.value.shape, dtype=x.value.dtype, device="meta")
            return torch.empty([self._size(d, k, given) for d in x.shape], dtype=x.dtype,
                               device="meta")
        if isinstance(x, (list, tuple)):
            return type(x)(self._at(v, k, given) for v in x)
        if _is_sym(x):
            return self._size(x, k, given)
        if isinstance(x, torch.Tensor):
            return torch.empty(x.shape, dtype=x.dtype, device="meta")
        if isinstance(x, torch.device):
            return torch.device("meta")
        return x

    def _size(self, d, k: int, given: dict | None) -> int:
        if not _is_sym(d):
            return int(d)
        values = self.values(d)
        if len(set(values)) < len(values):  # a floor, a min ...: sizes the points do not show
            raise _NotShown(d)
        if given is not None:
            given.setdefault(values, set()).add(d)
        return values[k]
