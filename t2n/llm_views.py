"""Views of a user's model for ``t2n llm``: a shallow copy of the module tree with some
modules computed differently (experts as dense products, LoRA layers merged into their base
weights), so the export traces the rewritten model while the user's model stays as it was.

A view is new module objects over the same parameter and buffer tensors: cheap whatever the
model's size (no weight is copied), and nothing of the user's modules, their parameter
tables or their config changes.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch


def module_view(model: torch.nn.Module,
                rewrite: Callable[[torch.nn.Module], torch.nn.Module | None]) -> torch.nn.Module:
    """A shallow copy of ``model``'s module tree in which each module ``m`` is replaced by
    ``rewrite(m)`` when that is not None (its subtree is then not visited), else by a copy
    sharing ``m``'s tensors whose children are views in turn. A module reached twice in the
    tree gives one view (sharing is kept)."""
    memo: dict[int, torch.nn.Module] = {}

    def view(m: torch.nn.Module) -> torch.nn.Module:
        if id(m) in memo:
            return memo[id(m)]
        new = rewrite(m)
        if new is None:
            new = copy.copy(m)
            memo[id(m)] = new
            new.__dict__["_parameters"] = dict(m._parameters)
            new.__dict__["_buffers"] = dict(m._buffers)
            new.__dict__["_modules"] = {k: None if s is None else view(s)
                                        for k, s in m._modules.items()}
        memo[id(m)] = new
        return new

    return view(model)
