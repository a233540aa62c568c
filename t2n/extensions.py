"""User mappings: ``@t2n.mapping("mylib::op")`` converts an op t2n has no mapping for (a
``torch.library`` custom op) or, with ``override=True``, replaces a built-in aten mapping.

A user's mapping has the contract of t2n's own (``t2n/mappings/gather.py``): it is called as
``fn(g, *args)`` with the node's arguments in schema order, tensors as builder handles and
everything static as Python values, and emits NNEF/tract ops through the builder ``g``
(``g.op``, ``g.constant``, ``g.error``; docs/extensions.md). Both captures reach it: the
tracer records a custom op as a ``mylib::op`` node, torch.export as
``torch.ops.mylib.op.default``.

Modules holding mappings are loaded by importing them (``t2n export --extension MODULE``,
a manifest's ``extensions``), and installed packages declare theirs as entry points of the
group ``t2n.mappings``, loaded on the first export of the process.
"""

from __future__ import annotations

import functools
import re
from typing import Callable

from t2n.walk import registry
from t2n.errors import ConversionError, T2NError, UsageError
from t2n.specs import first_line, import_user_module

ENTRY_POINT_GROUP = "t2n.mappings"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*$")
_entry_points_loaded = False


def mapping(name: str, *, override: bool = False) -> Callable:
    """Register the decorated function as the mapping of the op ``name``
    (``"namespace::op"``, the name in the op's schema: ``"mylib::scaled_tanh"``,
    ``"aten::gelu"``). A name that already has a mapping (t2n's or another extension's) is
    an error unless ``override=True``; ``override=True`` on a name without one is an
    error too (a misspelt override must not pass silently)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise UsageError(f"t2n.mapping({name!r}): give the op's qualified name "
                         "'namespace::op', e.g. 'mylib::scaled_tanh' or 'aten::gelu' (no "
                         "overload name)")
    if name.startswith(("prim::", "quantized::")):
        raise UsageError(f"t2n.mapping({name!r}): {name.split('::')[0]}:: ops are t2n's own "
                         "plumbing and cannot be mapped by users")

    def register(fn: Callable) -> Callable:
        if not callable(fn):
            raise UsageError(f"t2n.mapping({name!r}) decorates a function, not a "
                             f"{type(fn).__name__}")
        registry.register_user(name, _reported(name, fn), override)
        return fn

    return register


def _reported(name: str, fn: Callable) -> Callable:
    """``fn`` with its own failures (a bug in the user's mapping, not in t2n) reported as
    a conversion error of the op that names the mapping function."""

    @functools.wraps(fn)
    def call(g, *args):
        try:
            return fn(g, *args)
        except T2NError:
            raise
        except Exception as e:
            raise ConversionError(name, f"the user mapping {fn.__module__}.{fn.__qualname__} "
                                  f"failed: {type(e).__name__}: {first_line(e)}") from e

    call.t2n_user_mapping = True  # the walkers give it ScalarTypes as torch dtypes
    return call


def load_modules(names) -> None:
    """Import each module named in ``names`` (``--extension``, a manifest's
    ``extensions``): importing it runs its ``t2n.mapping`` registrations. The current
    directory is importable, as for ``package.module:callable`` models."""
    for name in names:
        try:
            import_user_module(name)
        except T2NError as e:
            raise UsageError(f"extension {name}: {e}") from None
        except Exception as e:
            raise UsageError(f"extension {name} failed to import: {type(e).__name__}: "
                             f"{first_line(e)}") from None


def _group_entry_points() -> list:
    """``importlib.metadata.entry_points(group=...)``, parsing only the entry points of the
    distributions whose ``entry_points.txt`` has the group: parsing every installed
    package's took 50-65 ms of each process's first export.
    The first distribution of a name on the path wins, as there."""
    from importlib.metadata import distributions

    seen, found = set(), []
    for dist in distributions():
        name = getattr(dist, "_normalized_name", None) or dist.metadata["Name"]
        if name in seen:
            continue
        seen.add(name)
        text = dist.read_text("entry_points.txt")
        if text and f"[{ENTRY_POINT_GROUP}]" in text:
            found.extend(ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP)
    return found


def load_entry_points() -> None:
    """Load the ``t2n.mappings`` entry points of the installed packages, once per process
    (an entry point names a module, imported, or ``module:function``, called with no
    arguments). A failing one raises, naming it, at every export until it loads."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    for ep in sorted(_group_entry_points(), key=lambda e: e.name):
        where = f"entry point {ep.name} = {ep.value} (group {ENTRY_POINT_GROUP}" + \
            (f", package {ep.dist.name})" if getattr(ep, "dist", None) else ")")
        try:
            obj = ep.load()
            if ep.attr:
                obj()
        except T2NError as e:
            raise UsageError(f"{where}: {e}") from None
        except Exception as e:
            raise UsageError(f"{where} failed to load: {type(e).__name__}: "
                             f"{first_line(e)}") from None
    _entry_points_loaded = True
