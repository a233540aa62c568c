"""The check's quantization step of outputs computed in float from dequantized values.

tract and PyTorch compute the float ops of a quantized model (a pt2e model's convolutions
on dequantized integers, a layer norm) with their own summation order and last-bit
rounding; where a value then lies within that rounding of a quantization tie, the two
round it to neighbouring integers. The check accepts one quantization step on an output
dequantized from integers (:func:`t2n.check.verify.quantization_steps`). A pt2e model's
last layer often outputs float (X86InductorQuantizer leaves the classifier's output
unquantized), so the step of its dequantized input is carried through the float ops after
it, as the one step of one input element each op can pass on:

* ops that move or select values, and activations whose slope is at most ``k``: the step
  times ``k``;
* sums of two stepped tensors: the sum of their steps;
* products with a weight (linear, convolution, matmul) whose values are known (a constant,
  or an int8 weight dequantized in the graph, whose mapping notes its largest magnitude in
  ``session.quantized.bounds``): the step times the weight's largest magnitude (one
  element's step through its largest weight, as for the int8 recurrent layers);
* anything else (a normalisation, a softmax, a product of two activations): nothing
  carried, the float tolerance stays.

Each op reads only its own inputs' entries: one dictionary look-up per op.
"""

from __future__ import annotations

import torch

# registry names -> the largest slope of the op (its output moves at most that much for a
# one-step move of one input element)
_SLOPE = {name: 1.0 for name in (
    "reshape", "view", "_unsafe_view", "flatten", "permute", "transpose", "t", "contiguous",
    "clone", "squeeze", "unsqueeze", "expand", "slice", "select", "narrow", "cat",
    "relu", "relu6", "hardtanh", "dropout", "max_pool1d", "max_pool2d", "max_pool3d",
    "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_avg_pool3d", "mean", "to", "_to_copy", "type_as", "tanh", "sigmoid",
    "leaky_relu", "identity", "alias", "detach", "max_pool2d_with_indices")}
_SLOPE.update({"gelu": 1.13, "silu": 1.1, "hardswish": 1.5, "elu": 1.0, "mish": 1.09})
_SUMS = {"add", "sub"}
# products: (argument position of the weight); the activation is argument 0
_PRODUCTS = {"linear": 1, "conv1d": 1, "conv2d": 1, "conv3d": 1, "convolution": 1,
             "_convolution": 1, "matmul": 1, "mm": 1, "addmm": 2, "bmm": 1}


def carry(g, name: str, args: list, results: list) -> None:
    """Record on ``results`` the step the op passes on from its stepped inputs."""
    steps = g.session.quantized.steps
    if not steps:
        return
    name = name[:-1] if name.endswith("_") and not name.endswith("__") else name
    step = _carried(g, name, args, steps)
    if step:
        for r in results:
            if hasattr(r, "shape") and getattr(r, "dtype", None) is not None \
                    and r.dtype.is_floating_point and id(r) not in steps:
                steps[id(r)] = step


def _step_of(steps, x) -> float:
    if isinstance(x, (list, tuple)):
        return max((_step_of(steps, v) for v in x), default=0.0)
    return steps.get(id(x), 0.0)


def _carried(g, name, args, steps) -> float:
    if name in _SLOPE:
        return _SLOPE[name] * _step_of(steps, args[:1] if name != "cat" else args[0])
    if name in _SUMS:
        return sum(_step_of(steps, a) for a in args[:2])
    if name in _PRODUCTS:
        x = args[0] if name != "addmm" else args[1]
        w = args[_PRODUCTS[name]]
        s = _step_of(steps, x)
        if not s or _step_of(steps, w):
            return 0.0
        bound = _bound(g, w)
        return s * bound if bound is not None else 0.0
    return 0.0


def _bound(g, w) -> float | None:
    if isinstance(w, torch.Tensor):
        return float(w.detach().abs().max()) if w.numel() else 0.0
    known = g.session.quantized.bounds.get(id(w))
    if known is not None:
        return known
    if getattr(w, "value", None) is not None and not w.value.is_complex():
        return float(w.value.detach().abs().max()) if w.value.numel() else 0.0
    return None
