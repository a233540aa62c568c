"""Dynamic axes: which input axes are tract symbols instead of fixed sizes.

Accepts the ``torch.onnx.export`` spelling: ``{"input_ids": {0: "B", 1: "S"}}`` or
``{"x": [0]}`` (symbols then named ``<input>_<axis>``). Wrong specs fail with a clear
message naming the input and the axis.
"""

from __future__ import annotations

import re

from .errors import UsageError

_SYMBOL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def parse_dynamic_axes(dynamic_axes, input_names: list[str], args) -> dict[int, dict[int, str]]:
    if not isinstance(dynamic_axes, dict):
        raise UsageError("dynamic_axes must be a dict {input name: {axis: symbol}}")
    out: dict[int, dict[int, str]] = {}
    for name, axes in dynamic_axes.items():
        if name not in input_names:
            raise UsageError(f"dynamic_axes names {name!r}, which is not an input "
                             f"(inputs: {', '.join(input_names)})")
        i = input_names.index(name)
        rank = args[i].dim()
        if isinstance(axes, (list, tuple)):
            axes = {a: f"{name}_{a % rank if isinstance(a, int) else a}" for a in axes}
        if not isinstance(axes, dict):
            raise UsageError(f"dynamic_axes[{name!r}] must be a dict {{axis: symbol}} or a list")
        spec = {}
        for axis, sym in axes.items():
            if not isinstance(axis, int) or not -rank <= axis < rank:
                raise UsageError(f"dynamic axis {axis!r} of input {name!r} is out of range "
                                 f"(the input has rank {rank})")
            if not isinstance(sym, str) or not _SYMBOL_RE.match(sym):
                raise UsageError(f"symbol {sym!r} for axis {axis} of {name!r} must be an "
                                 "identifier (letters, digits, underscore)")
            spec[axis % rank] = sym
        out[i] = spec
    return out
