"""Reading TorchScript values for the walker: tensor dtypes, sizes and strides from the trace,
ScalarType codes, the user's source line of a node, and symbolic (dynamic-axis) values.

Kept apart from the dispatch loop so that a second capture (``torch.export``) can share what
is not TorchScript-specific."""

from __future__ import annotations

import os
import sys

import torch

import t2n
from t2n import dtypes
from t2n.walk.builder import Tensor

_TORCH_DIR = os.path.dirname(torch.__file__)
_T2N_DIR = os.path.dirname(os.path.dirname(os.path.abspath(t2n.__file__)))


def source_location(node) -> str | None:
    """``file.py:LINE`` of the user's code that emitted ``node`` (first frame outside torch)."""
    try:
        text = node.sourceRange()
    except Exception:
        return None
    for line in text.splitlines():
        line = line.strip()
        if "(" not in line or "):" not in line:
            continue
        path, rest = line.split("(", 1)
        lineno = rest.split(")", 1)[0]
        if path.startswith(_TORCH_DIR) or path.startswith(_T2N_DIR + os.sep + "t2n"):
            continue
        return f"{os.path.basename(path)}:{lineno}"
    return None


class _Unsupported(Exception):
    pass


def scalar_type(code: int) -> torch.dtype:
    """TorchScript passes dtypes as ScalarType codes; mappings get torch dtypes."""
    dt = dtypes.from_scalar_type(code)
    if dt is None:
        raise _Unsupported(f"dtype code {code} is not supported")
    return dt


def _flat(xs) -> list:
    out = []
    for x in xs:
        if isinstance(x, (list, tuple)):
            out.extend(_flat(x))
        else:
            out.append(x)
    return out


def _is_symbolic(x) -> bool:
    # Looked up, not imported: no sympy value exists before something imported sympy, and
    # importing it (0.5 s) would tax every export of a static model.
    sympy = sys.modules.get("sympy")
    if sympy is None:
        return False
    return isinstance(x, sympy.Basic) and not x.is_number


def size_remainder(a, b):
    """``a % b`` of sizes, for both walkers; of a symbolic size, ``a - b*floor(a/b)``:
    sympy's ``Mod`` hides from its simplifier that ``(S + (4 - S % 4) % 4) / 4`` (a length
    padded to whole chunks) is whole, and tract then cannot prove the padded length equal to
    the reshape's ``4 * ((S + 3) / 4)``."""
    if _is_symbolic(a) or _is_symbolic(b):
        return a - b * (a // b)
    return a % b


def _has_symbols(inputs) -> bool:
    for x in _flat(inputs):
        if _is_symbolic(x):
            return True
        if isinstance(x, Tensor) and any(not isinstance(d, int) for d in x.shape):
            return True
    return False


def _symbolic_shapes(ts_inputs, inputs):
    """The symbolic shape engine when some input has a dynamic axis, else None."""
    hints = {}
    for v, t in zip(ts_inputs, inputs):
        sizes = _ts_sizes(v) if isinstance(t, Tensor) else None
        for i, d in enumerate(getattr(t, "shape", ())):
            if _is_symbolic(d) and sizes is not None:
                hints[d] = sizes[i]
    if not hints:
        return None
    from t2n.walk.dynamic import SymbolicShapes

    return SymbolicShapes(hints)


def _is_number(x) -> bool:
    return isinstance(x, (int, float, bool)) or (isinstance(x, torch.Tensor) and x.dim() == 0)


def _py(x):
    if isinstance(x, torch.Tensor):
        return x.item()
    return x


def _ts_dtype(v):
    t = v.type()
    if t.kind() == "TensorType":
        return t.dtype()
    return None


def _ts_strides(v):
    t = v.type()
    if t.kind() == "TensorType":
        try:
            return t.strides()
        except RuntimeError:
            return None
    return None


def _ts_sizes(v):
    t = v.type()
    if t.kind() == "TensorType":
        try:
            return t.sizes()
        except RuntimeError:
            return None
    return None
