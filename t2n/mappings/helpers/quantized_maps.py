"""Quantized element-wise ops of this torch as maps of the integers, found by asking it.

An element-wise quantized op (hardtanh, relu6, clamp, sigmoid, hardsigmoid, tanh, gelu,
hardswish, leaky_relu) turns each input integer into one output integer: which one depends
only on the integer, the input's scale and zero point and the op's arguments. PyTorch's
kernels compute it their own way: the clamps compare integers with bounds quantized the
way the build rounds (helpers/quantize_rounding.py), the others dequantize with a fused
multiply-add, run a float function (Sleef's, in vectors) and requantize to fixed or given
output parameters. Lowered in float with tract's functions, the integers differ at rounding
ties, and a clamp costs nine element-wise ops per element. Instead the op runs once on
every integer of the type, per op, arguments, input parameters and engine, and the table
it returns is what the archive computes: one clamp when the table is a clamp, else a
lookup of the 256 entries (as exact float32, so float consumers read them directly).
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import torch

from t2n import dtypes
from t2n.mappings.helpers.quantized_tensors import RANGE

F = torch.nn.functional
_OPS = {"hardtanh": lambda q, *a: F.hardtanh(q, *a),
        "relu6": lambda q, *a: F.relu6(q),
        "clamp": lambda q, *a: torch.clamp(q, *a),
        "sigmoid": lambda q, *a: torch.sigmoid(q),
        "hardsigmoid": lambda q, *a: F.hardsigmoid(q),
        "tanh": lambda q, *a: torch.tanh(q),
        "gelu": lambda q, *a: F.gelu(q, approximate=a[0] if a else "none"),
        "leaky_relu": lambda q, *a: F.leaky_relu(q, *a),
        "quantized::hardswish": lambda q, *a: torch.ops.quantized.hardswish(q, *a),
        "quantized::sigmoid": lambda q, *a: torch.ops.quantized.sigmoid(q, *a),
        "quantized::leaky_relu": lambda q, *a: torch.ops.quantized.leaky_relu(q, *a),
        "quantized::relu6": lambda q, *a: torch.ops.quantized.relu6(q)}
_EIGHT_BIT = (torch.quint8, torch.qint8)


@dataclass(frozen=True)
class IntegerMap:
    """What the op does to every integer of the input type: ``table[q - lowest]`` is the
    output integer of ``q``, in ``dtype`` with ``scale`` and ``zero_point``; ``clamp``: the
    bounds when the table is ``clamp(q, a, b)`` with the input's parameters kept."""

    table: tuple
    lowest: int
    dtype: torch.dtype
    scale: float
    zero_point: int
    clamp: tuple | None


class ScrambledLayout(Exception):
    """The running kernel does not return, for a channels-last input, the integers it
    returns for the same integers laid out plainly (measured: qnnpack's hardtanh/ReLU6 on
    a channels-last tensor writes the channels-last buffer into a plainly laid out result,
    so every element lands elsewhere)."""


def integer_map(name: str, args: tuple, scale: float, zero_point: int, qdtype,
                channels_last: bool = False) -> IntegerMap | None:
    """The map of quantized ``name`` (an aten name or ``quantized::...``) with ``args``
    (numbers, strings or None; the arguments after the input) on ``qdtype`` integers of
    that scale and zero point, under the selected quantized engine; None when t2n does not
    know the op, an argument is a tensor, or the output is not an 8-bit quantized tensor.
    ``channels_last``: the input is a channels-last 4-d tensor in the model; raises
    :class:`ScrambledLayout` when the kernel's output for such a tensor is not the map's."""
    name = name.removeprefix("aten::").rstrip("_") if not name.startswith("quantized::") \
        else name
    if name not in _OPS or qdtype not in _EIGHT_BIT \
            or any(a is not None and not isinstance(a, (bool, int, float, str)) for a in args):
        return None
    m = _map(name, tuple(args), float(scale), int(zero_point), qdtype,
             torch.backends.quantized.engine)
    if m is not None and channels_last and not _keeps_layout(name, tuple(args), float(scale),
                                                             int(zero_point), qdtype, m,
                                                             torch.backends.quantized.engine):
        raise ScrambledLayout(name)
    return m


@functools.lru_cache(maxsize=None)
def _keeps_layout(name, args, scale, zero_point, qdtype, m, engine) -> bool:
    """Whether the op maps a channels-last 1x16x4x4 tensor of every integer element by
    element as ``m`` says."""
    storage, (lo, hi) = dtypes.QUANTIZED[qdtype], RANGE[qdtype]
    ints = torch.arange(lo, hi + 1, dtype=torch.int64).reshape(1, 16, 4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch._make_per_tensor_quantized_tensor(ints.to(storage), scale, zero_point)
        try:
            out = _OPS[name](q.contiguous(memory_format=torch.channels_last), *args)
        except (RuntimeError, TypeError, ValueError):
            return True  # no kernel for that layout: nothing of the model's to compare with
        got = out.int_repr().to(torch.int64)
    return torch.equal(got, torch.tensor(m.table, dtype=torch.int64)[ints - lo])


@functools.lru_cache(maxsize=None)
def _map(name, args, scale, zero_point, qdtype, engine):
    storage, (lo, hi) = dtypes.QUANTIZED[qdtype], RANGE[qdtype]
    ints = torch.arange(lo, hi + 1, dtype=torch.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors' deprecation notice (torch 2.14)
        q = torch._make_per_tensor_quantized_tensor(ints.to(storage), scale, zero_point)
        try:
            out = _OPS[name](q, *args)
        except (RuntimeError, TypeError, ValueError):
            return None  # no quantized kernel for these arguments
        if not out.is_quantized or out.dtype not in _EIGHT_BIT \
                or out.qscheme() != torch.per_tensor_affine:
            return None
        got = out.int_repr().to(torch.int64)
    same = out.dtype == qdtype and out.q_scale() == scale and out.q_zero_point() == zero_point
    a, b = int(got.min()), int(got.max())
    clamp = (a, b) if same and torch.equal(got, ints.clamp(a, b)) else None
    return IntegerMap(tuple(got.tolist()), lo, out.dtype, float(out.q_scale()),
                      int(out.q_zero_point()), clamp)
