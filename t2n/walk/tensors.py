"""The handles the builder hands out: :class:`Tensor` (name, shape, dtype, known value),
:class:`Op`, :class:`Variable` (a stored weight) and :class:`Unavailable`, with shape
broadcasting and torch's tensor/scalar type promotion."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

# sign and equality proofs for size expressions, for mappings (the builder layer they may
# import)
from t2n.walk.dim_equal import known_equal  # noqa: F401
from t2n.walk.dim_sign import known_nonnegative  # noqa: F401

Dim = Any  # int or sympy.Expr


class Tensor:
    """A value of the NNEF graph: what a mapping function receives for a tensor argument.

    A complex tensor (``complex=True``) is held as tract holds one: its real and imaginary
    parts on a trailing axis of size 2, ``shape`` being that real form (PyTorch's shape + 2)
    and ``dtype`` the parts' float dtype (``dtypes.complex_part``). Only the mappings of the
    complex table (``registry.complex_variant``) receive such tensors."""

    __slots__ = ("name", "shape", "dtype", "value", "literal", "complex")

    def __init__(self, name: str, shape: Sequence[Dim], dtype: torch.dtype,
                 value: torch.Tensor | None = None, literal: str | None = None,
                 complex: bool = False):
        self.name = name
        self.shape = tuple(shape)
        self.dtype = dtype
        self.value = value  # known constant data (weights, folded constants), else None
        self.literal = literal  # inline NNEF text for small constants, else None
        self.complex = complex  # (re, im) on a trailing axis of 2

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def torch_shape(self) -> tuple:
        """PyTorch's shape of the value (a complex tensor's without its pair axis)."""
        return self.shape[:-1] if self.complex else self.shape

    @property
    def is_const(self) -> bool:
        return self.value is not None

    def static_shape(self) -> tuple[int, ...] | None:
        """The shape as plain ints, or None when an axis is symbolic."""
        if all(isinstance(d, int) for d in self.shape):
            return self.shape
        return None

    def __repr__(self) -> str:
        kind = f"complex {self.dtype}" if self.complex else str(self.dtype)
        return f"Tensor({self.name}, {list(self.shape)}, {kind})"


def marked_complex(t: Tensor) -> Tensor:
    """``t``, a fresh float handle of shape [..., 2], marked as the complex tensor whose
    (re, im) pairs it holds."""
    t.complex = True
    return t


class Unavailable:
    """An output a mapping does not compute (e.g. embedding_bag's offset2bag).

    Harmless while nothing uses it; the walker reports ``op: reason`` at the first node
    (or model output) that consumes it, so unused extra outputs never block an export."""

    __slots__ = ("op", "reason")

    def __init__(self, op: str, reason: str):
        self.op = op
        self.reason = reason

    def __repr__(self) -> str:
        return f"Unavailable({self.op}: {self.reason})"


@dataclass
class Op:
    kind: str
    args: list
    attrs: dict
    outputs: list
    origin: Any = None  # the NodeContext of the aten node that emitted it (None in passes)


@dataclass
class Variable:
    tensor: Tensor
    label: str
    data: torch.Tensor  # written once, straight from its storage


# Symbols named so are data-dependent sizes (x[mask]): known only at run time, never writable.
DATA_DEPENDENT_PREFIX = "t2n_data_"


def broadcast_shapes(*shapes: Sequence[Dim]) -> tuple:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        dims = [s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0]
        non1 = [d for d in dims if not (isinstance(d, int) and d == 1)]
        out.append(non1[0] if non1 else 1)
    return tuple(out)


def _python_dtype(value) -> torch.dtype:
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    return torch.float32


def _result_type(a, b) -> torch.dtype:
    """torch's promotion for a tensor/scalar pair (a Python scalar does not widen a tensor
    of its own kind; a float scalar makes an int tensor float)."""
    da = a.dtype if isinstance(a, Tensor) else None
    db = b.dtype if isinstance(b, Tensor) else None
    if da is not None and db is not None:
        return torch.promote_types(da, db)
    if da is None and db is None:
        return torch.promote_types(_python_dtype(a), _python_dtype(b))
    d, other = (da, b) if da is not None else (db, a)
    if isinstance(other, float) and not d.is_floating_point:
        return torch.get_default_dtype()
    if isinstance(other, int) and not isinstance(other, bool) and d == torch.bool:
        return torch.int64
    return d
