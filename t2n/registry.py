"""The table of mapping functions, keyed by aten op name.

A mapping is registered with ``@aten("name", "alias", ...)`` and called as
``fn(g, *args)`` with the node's arguments in schema order, already resolved (tensor handles
for tensors, Python values for everything static). In-place variants (``add_``) need no entry:
the walker runs the functional mapping and writes the result back into the mutated tensor
(and into the tensor it is a view of).
"""

from __future__ import annotations

import importlib
from typing import Callable

_MAPPINGS: dict[str, Callable] = {}


def aten(*names: str):
    """Register a mapping function for one or more aten op names (without ``aten::``)."""

    def register(fn: Callable) -> Callable:
        for name in names:
            old = _MAPPINGS.get(name)
            if old is not None and (old.__module__, old.__qualname__) != \
                    (fn.__module__, fn.__qualname__):
                raise RuntimeError(f"aten::{name} registered twice ({_MAPPINGS[name].__module__}"
                                   f" and {fn.__module__})")
            _MAPPINGS[name] = fn
        return fn

    return register


def own_shapes(fn: Callable) -> Callable:
    """Mark a mapping whose output shapes are exact for dynamic axes too (it derives them
    from its inputs' symbolic shapes): the walker does not ask PyTorch's shape functions,
    which for ops like ``aten::lstm`` have no symbolic answer and are slow to find that."""
    fn.t2n_own_shapes = True
    return fn


# Mappings of aten ops for quantized tensor arguments (op_mappings/quantized.py): the walker
# uses them instead of the float mapping when an argument has a quantized dtype.
_QUANTIZED: dict[str, Callable] = {}


def quantized_variant(*names: str):
    """Register the mapping an aten op takes when one of its tensors is quantized."""

    def register(fn: Callable) -> Callable:
        for name in names:
            _QUANTIZED[name] = fn
        return fn

    return register


def lookup_quantized(name: str) -> Callable | None:
    _load()
    return _QUANTIZED.get(name) or (_QUANTIZED.get(name[:-1]) if is_inplace(name) else None)


def _load() -> None:
    # Importing the mapping package registers every family. Loaded by name: the families
    # import this module (for ``@aten``), the registry never imports them.
    importlib.import_module("op_mappings")


def lookup(name: str) -> Callable | None:
    """The mapping for an aten op name (``index_add`` for ``index_add_`` too)."""
    _load()
    fn = _MAPPINGS.get(name)
    if fn is None and is_inplace(name):
        fn = _MAPPINGS.get(name[:-1])
    return fn


def is_inplace(name: str) -> bool:
    return name.endswith("_") and not name.endswith("__")


def supported_ops() -> list[str]:
    """Every aten name t2n converts (in-place variants of these are converted too)."""
    _load()
    return sorted(_MAPPINGS)


def mapping_module(name: str) -> str:
    _load()
    fn = _MAPPINGS[name]
    return fn.__module__
