"""What every target provides to the export pipeline and the writer."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from t2n import dtypes
from t2n.targets.capabilities import FEATURES
from t2n.walk.builder import Graph, Tensor, format_dim


@dataclass(frozen=True)
class Target:
    """One NNEF dialect: how to prepare a graph for it, how to declare it, who checks it.

    ``extensions`` are the ``extension ...;`` lines of graph.nnef (before symbols);
    ``declares_symbols`` whether dynamic axes are written as ``extension tract_symbol``;
    ``checker`` names the engine the check runs (``"tract"`` or ``"nnef-tools"``);
    ``shallow_text`` whether the writer moves literal lists into shared fragments, which
    tract's parser reads several times faster (t2n.write.shallow_text).
    """

    name: str
    extensions: tuple[str, ...]
    declares_symbols: bool
    checker: str
    shallow_text: bool = False
    features: frozenset[str] = frozenset()  # of t2n.targets.capabilities.FEATURES
    help: str = ""  # one line for the CLI's --target choices

    def can(self, feature: str) -> bool:
        """Whether this target's reader takes the graph form ``feature`` (a name of
        :data:`t2n.targets.capabilities.FEATURES`; another name is a programming error)."""
        if feature not in FEATURES:
            raise KeyError(f"unknown target feature {feature!r}")
        return feature in self.features

    def lower(self, g: Graph) -> None:
        """Rewrite ``g`` in place into what this target can express, or refuse with one
        error listing every op it cannot (with the model's source lines)."""

    def header_lines(self, g: Graph) -> list[str]:
        lines = [f"extension {e};" for e in self.extensions]
        # registries some ops of this graph need (t2n.passes.stateful_cache)
        lines += [f"extension {e};" for e in g.shared.get("extensions", ())
                  if e not in self.extensions]
        if self.declares_symbols:
            lines += [f"extension tract_symbol {s};" for s in g.symbols]
            lines += [f"extension tract_assert {s} >= {least};"
                      for s, least in g.symbols.items()]
            # a user-given most size (dynamic_axes ("S", 1, 512)): tract bounds B*S with it
            lines += [f"extension tract_assert {s} <= {most};"
                      for s, most in g.symbol_maxima.items() if s in g.symbols]
        return lines

    def external(self, t: Tensor) -> str:
        """The right-hand side declaring graph input ``t``."""
        shape = ", ".join(format_dim(d) for d in t.shape)
        if t.dtype == torch.float32:
            return f"external<scalar>(shape = [{shape}])"
        if t.dtype == torch.int64:
            return f"external<integer>(shape = [{shape}])"
        if t.dtype == torch.bool:
            return f"external<logical>(shape = [{shape}])"
        return (f"tract_core_external(shape = [{shape}], "
                f"datum_type = '{dtypes.tract_name(t.dtype)}')")
