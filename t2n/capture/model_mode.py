"""The user's model in eval mode for one capture or eager run, then exactly as it was.

Rule 6: the user's model is never modified. Switching to eval mode is the one change t2n
makes while it traces and runs a model, and it is undone on the way out: every submodule's
own ``training`` flag is restored (a model in eval mode with one submodule left in train
mode keeps that submodule in train mode; ``model.train(was_training)`` alone would not).

Modules that forbid switching modes are used as they are: a ``torch.export``-ed program's
``.module()`` (what torchao's pt2e quantization produces) raises ``NotImplementedError``
from ``train()``/``eval()``, because its graph was captured in one mode and cannot change.
t2n then captures and runs it in the mode it was exported in (export it in eval mode, or
call ``torch.ao.quantization.move_exported_model_to_eval`` on it first).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch


@contextmanager
def eval_mode(model):
    """Run the body with ``model`` (an ``nn.Module``; anything else passes through) in eval
    mode as far as it allows; restore every submodule's flag afterwards."""
    if not isinstance(model, torch.nn.Module):
        yield model
        return
    flags = [(m, m.training) for m in model.modules()]
    switched: list = []  # modules whose own train() ran, undone with it (last first)
    try:
        _to_eval(model, switched)
        yield model
    finally:
        for module, before in reversed(switched):
            try:
                module.train(before)
            except NotImplementedError:
                pass
        for module, training in flags:
            if module.training != training:
                module.training = training


def _to_eval(module, switched: list) -> None:
    """``module.train(False)``, except in the parts that refuse it (NotImplementedError):
    those keep their mode, the rest of the model is switched."""
    before = module.training
    try:
        module.train(False)
        switched.append((module, before))
        return
    except NotImplementedError:
        pass
    # nn.Module.train sets the module's flag, then its children's in order: a module whose
    # flag did not move refused itself (an exported program); otherwise one below it did
    if module.training == before and before:
        return
    module.training = False
    for child in module.children():
        _to_eval(child, switched)
