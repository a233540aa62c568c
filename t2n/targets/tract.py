"""The tract target: the archive is read by tract with its ``tract_core`` registry."""

from __future__ import annotations

from t2n.targets.base import Target
from t2n.targets.capabilities import FEATURES

TRACT = Target(name="tract", extensions=("tract_registry tract_core",), declares_symbols=True,
               checker="tract", shallow_text=True, features=frozenset(FEATURES),
               help="tract's dialect: tract_core ops, dynamic shapes")
