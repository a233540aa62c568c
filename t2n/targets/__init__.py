"""Targets: which NNEF dialect an archive is written in, and who verifies it.

Mappings always emit the richest form (standard NNEF plus tract's ``tract_core_*`` ops).
A target then decides, from its one capability table (:mod:`t2n.targets.capabilities`),
whether each op stays, is rewritten into operations the target has, or is refused:

- ``tract`` (the default): everything the mappings emit; the archive declares
  ``extension tract_registry tract_core;`` and its symbols; ``check`` runs tract.
- ``khronos``: NNEF 1.0.5 exactly as the Khronos specification and its reference tools
  define it: standard operations and standard-syntax fragments only, static shapes,
  ``check`` runs nnef-tools' PyTorch interpreter on what the ``nnef`` parser reads.

A target is applied once, after the passes and before the writer (see
docs/architecture.md). Everything a target needs to know lives in its table, so a mapping
never asks which target it writes for.
"""

from __future__ import annotations

from t2n.targets.base import Target
from t2n.targets.khronos import KHRONOS
from t2n.targets.tract import TRACT

TARGETS: dict[str, Target] = {t.name: t for t in (TRACT, KHRONOS)}


def get_target(name: str) -> Target:
    """The target called ``name`` (``"tract"`` or ``"khronos"``)."""
    from t2n.errors import UsageError

    if name not in TARGETS:
        raise UsageError(f"unknown target {name!r}: choose one of {', '.join(TARGETS)}")
    return TARGETS[name]


__all__ = ["Target", "TARGETS", "get_target"]
