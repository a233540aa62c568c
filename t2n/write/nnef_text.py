"""NNEF text for names, dims and values: which identifiers tract reads back as themselves,
and how floats, symbolic dims (tract TDim expressions) and literal arrays are spelled. The
writer and the builder share these; mapping functions never write NNEF text."""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import numpy as np
import torch

from t2n.errors import ConversionError
from t2n.walk.tensors import DATA_DEPENDENT_PREFIX, Dim, Tensor


_IDENT_BAD_START = re.compile(r"^(inf|true|false|nan)", re.IGNORECASE)


IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


_NNEF_KEYWORDS = {"version", "extension", "graph", "fragment", "tensor", "integer", "scalar",
                  "logical", "string", "true", "false", "for", "in", "if", "else", "yield",
                  "length_of", "shape_of", "range_of"}


def safe_identifier(name: str) -> bool:
    """Whether ``name`` can be an NNEF identifier that tract reads back as itself."""
    return bool(IDENT_RE.match(name)) and not _IDENT_BAD_START.match(name) \
        and name not in _NNEF_KEYWORDS


def sanitize(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not s or not (s[0].isalpha() or s[0] == "_") or not safe_identifier(s):
        s = "v_" + s
    return s


def nnef_type(dtype) -> str:
    """The NNEF element type of a torch dtype (``scalar``, ``integer``, ``logical``)."""
    if dtype.is_floating_point:
        return "scalar"
    if dtype == torch.bool:
        return "logical"
    return "integer"


def format_float(v: float) -> str:
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    r = repr(float(v))
    if "e" not in r and "." not in r:
        r += ".0"
    return r


def format_dim(d: Dim) -> str:
    if isinstance(d, (int, np.integer)):
        return str(int(d))
    return dim_expr_text(d)


@functools.lru_cache(maxsize=4096)
def _known_nonnegative(expr) -> bool:
    from t2n.walk.dim_sign import known_nonnegative

    return known_nonnegative(expr)


def dim_expr_text(expr) -> str:
    """A sympy expression over tract symbols, spelled the way tract's TDim parser reads it.

    tract reads integers, symbols, ``+``, ``*``, ``/k`` (floor division by a positive
    integer), ``max(a,b)``, ``min(a,b)`` and parentheses (probed on tract 0.23.9); ``a-b`` is
    written ``a+-1*b``, ``a%k`` (``a`` known non-negative) ``a+-k*(a/k)``. Anything else (a
    fraction outside a floor, ``%`` of what may be negative) is refused."""
    import sympy

    if isinstance(expr, (int, sympy.Integer)):
        return str(int(expr))
    if isinstance(expr, sympy.Symbol):
        if expr.name.startswith(DATA_DEPENDENT_PREFIX):
            raise ConversionError("shape", "a size that depends on tensor values (the count of "
                                  "a boolean mask's true elements, a value read with "
                                  "`.item()`) cannot be written into a "
                                  "shape for tract; compute with it without reading its size")
        return expr.name
    if isinstance(expr, (sympy.floor, sympy.ceiling)):
        num, den = sympy.together(expr.args[0]).as_numer_denom()
        if den.is_Integer and int(den) > 0 and (-num).is_positive:
            # tract's division truncates: floor(-m/k) = -ceiling(m/k) keeps it non-negative
            inner = (sympy.ceiling if isinstance(expr, sympy.floor) else sympy.floor)
            return f"-1*{dim_expr_text(inner(-num / den))}"
        if den.is_Integer and int(den) > 0:
            if isinstance(expr, sympy.ceiling):
                num = sympy.expand(num + int(den) - 1)
            if den == 1:
                return dim_expr_text(num)
            k = int(den)
            if not _known_nonnegative(num):
                # tract's division truncates toward zero, which is floor division only for
                # n >= 0; for n of either sign, floor(n/k) = max(n,0)/k - ceil(max(-n,0)/k)
                n, m = dim_expr_text(num), dim_expr_text(sympy.expand(-num))
                return f"((max({n},0))/{k}+-1*((max({m},0)+{k - 1})/{k}))"
            # parenthesised whole: tract reads ``2*(H+-1)/2`` as ``(2*(H+-1))/2``
            return f"(({dim_expr_text(num)})/{k})"
    if isinstance(expr, sympy.Mod) and expr.args[1].is_Integer and int(expr.args[1]) > 0 \
            and expr.args[0].is_nonnegative:
        # a % k = a - k*(a/k): tract has no modulo, and its division truncates, which is
        # floor division only for a numerator known to be non-negative
        a, k = dim_expr_text(expr.args[0]), int(expr.args[1])
        return f"({a}+-{k}*(({a})/{k}))"
    if isinstance(expr, (sympy.Max, sympy.Min)):
        fn = "max" if isinstance(expr, sympy.Max) else "min"
        text = dim_expr_text(expr.args[0])
        for a in expr.args[1:]:
            text = f"{fn}({text},{dim_expr_text(a)})"
        return text
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) > 0:
        return "(" + "*".join([dim_expr_text(expr.base)] * int(expr.exp)) + ")"
    if isinstance(expr, sympy.Add):
        from t2n.write.dim_floor import fold_single_floor

        folded = fold_single_floor(expr)
        if folded is not expr:
            return dim_expr_text(folded)
        parts = [dim_expr_text(a) for a in expr.args]
        return "(" + "+".join(parts) + ")"
    if isinstance(expr, sympy.Mul) and all(not (a.is_Rational and not a.is_Integer)
                                           for a in expr.args):
        return "*".join(dim_expr_text(a) for a in expr.args)
    raise ConversionError("shape", f"symbolic dimension {expr} cannot be written for tract")


def format_value(v: Any) -> str:
    """An attribute value as NNEF text."""
    if isinstance(v, Tensor):
        return v.literal if v.literal is not None else v.name
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return format_float(float(v))
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(v, tuple):
        return "(" + ", ".join(format_value(x) for x in v) + ")"
    if isinstance(v, list):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    if isinstance(v, _SymDim):
        return str(v)
    if v is None:
        raise TypeError("None is not an NNEF value")
    return format_dim(v)


def _literal_array(a: np.ndarray, fmt) -> str:
    if a.ndim == 0:
        return fmt(a.item())
    return "[" + ", ".join(_literal_array(x, fmt) for x in a) + "]"


class _SymDim:
    """A symbolic dimension inside an attribute list (printed as a TDim expression)."""

    def __init__(self, expr):
        self.expr = expr

    def __str__(self):
        return format_dim(self.expr)
