"""Which quantized element-wise ops of this torch clamp the integers, found by asking it.

PyTorch's quantized ``hardtanh``, ``relu6`` and ``clamp`` keep the input's scale and zero
point and clamp the integers between the bounds quantized with them, rounded the way the
build's ``quantize_val`` rounds (helpers/quantize_rounding.py: the forms differ at ties).
Computed on the dequantized values and requantized, each costs nine element-wise ops per
element (MobileNetV2 runs 35 of them on its largest tensors), and the bound's rounding may
differ from the kernel's at a tie. Instead the op runs once on every integer of the type,
per op, arguments, scale, zero point and engine; when what it returns is
``clamp(q, a, b)``, that one clamp is what the archive computes.
"""

from __future__ import annotations

import functools
import warnings

import torch

_OPS = {"hardtanh": lambda q, *a: torch.nn.functional.hardtanh(q, *a),
        "hardtanh_": lambda q, *a: torch.nn.functional.hardtanh(q, *a),
        "relu6": lambda q, *a: torch.nn.functional.relu6(q),
        "clamp": lambda q, *a: torch.clamp(q, *a)}
_STORAGE = {torch.quint8: (torch.uint8, 0, 255), torch.qint8: (torch.int8, -128, 127)}


def integer_clamp_bounds(name: str, args: tuple, scale: float, zero_point: int,
                         qdtype) -> tuple[int, int] | None:
    """``(a, b)`` when this torch's quantized ``name`` (an aten op) with ``args`` (numbers
    or None) is ``clamp(q, a, b)`` on every integer of ``qdtype`` with that scale and
    zero point, keeping them; None otherwise (another op, arguments that are tensors, an
    output with other parameters)."""
    if name not in _OPS or qdtype not in _STORAGE \
            or any(a is not None and not isinstance(a, (int, float)) for a in args):
        return None
    return _bounds(name, tuple(args), float(scale), int(zero_point), qdtype,
                   torch.backends.quantized.engine)


@functools.lru_cache(maxsize=None)
def _bounds(name, args, scale, zero_point, qdtype, engine):
    storage, lo, hi = _STORAGE[qdtype]
    ints = torch.arange(lo, hi + 1, dtype=torch.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors' deprecation notice (torch 2.14)
        q = torch._make_per_tensor_quantized_tensor(ints.to(storage), scale, zero_point)
        out = _OPS[name](q, *args)
        if not out.is_quantized or out.q_scale() != scale \
                or out.q_zero_point() != zero_point:
            return None
        got = out.int_repr().to(torch.int64)
    a, b = int(got.min()), int(got.max())
    return (a, b) if torch.equal(got, ints.clamp(a, b)) else None
