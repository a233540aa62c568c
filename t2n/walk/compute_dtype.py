"""bfloat16 models: the export's explicit compute dtype (``dtype="f32"`` or ``"f16"``).

tract has no bfloat16. A model holding bf16 parameters, or taking bf16 inputs, is exported
only with an explicit choice of what the graph computes in (a float model's bf16 buffers and
casts need none: their values are rounded as in PyTorch, t2n/walk/bf16_values.py):

* ``dtype="f32"``: every bf16 value becomes float32 (exact: bf16 is a truncated float32),
  so the archive computes what the model computes when converted with ``.float()``;
* ``dtype="f16"``: every bf16 value becomes float16 (half the memory; bf16 values beyond
  float16's range, |x| > 65504, would overflow and are refused), the archive computes what
  ``.half()`` would, with PyTorch's float16 rules (:mod:`t2n.walk.opmath`).

The user's model is not modified and not copied for the export: it is traced as it is (in
bf16), the graph's bf16 dtypes are read as the chosen one (:meth:`t2n.walk.builder.Graph.
computed`), and each bf16 weight is converted while it streams into its ``.dat`` file.
``check=True`` compares tract with PyTorch running a converted copy of the model on the
converted inputs ("PyTorch run in that dtype").
"""

from __future__ import annotations

import copy

import torch

from t2n.errors import UsageError

CHOICES = {"f32": torch.float32, "f16": torch.float16}


def _bf16_tensors(model, args) -> tuple[list[str], list[str]]:
    """The bf16 parameters and inputs (what makes a model bfloat16), and the bf16 buffers."""
    weights, buffers = [], []
    if isinstance(model, torch.nn.Module):
        weights = [n for n, t in model.named_parameters() if t.dtype == torch.bfloat16]
        buffers = [n for n, t in model.named_buffers() if t.dtype == torch.bfloat16]
    weights += [f"input {i}" for i, a in enumerate(args) if a.dtype == torch.bfloat16]
    return weights, buffers


def resolve(dtype, model, args) -> torch.dtype | None:
    """The compute dtype of bf16 values for this export, or None: no bf16 parameters or
    inputs, the graph rounds its bf16 values as PyTorch does (t2n.walk.bf16_values).

    A bf16 model (bf16 parameters or inputs) without ``dtype`` and a ``dtype`` for a model
    without bf16 are refused, so the choice is always explicit and never a no-op."""
    if dtype is not None and dtype not in CHOICES:
        raise UsageError(f"dtype={dtype!r}: choose 'f32' or 'f16' (the compute dtype of a "
                         "bfloat16 model)")
    found, buffers = _bf16_tensors(model, args)
    if not found and (dtype is None or not buffers):
        # bf16 buffers of a float model (RecurrentGemma's ``normalizer``) are values of
        # that model: held in f32 and computed with PyTorch's bf16 rules (t2n.walk.bf16_values)
        if dtype is not None:
            raise UsageError(f"dtype={dtype!r} sets the compute dtype of a bfloat16 model, "
                             "and this model has no bfloat16 weights or inputs (to store "
                             "float32 weights as float16, use weights='f16')")
        return None
    if dtype is None:
        some = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
        raise UsageError(f"the model is bfloat16 ({some}), which tract cannot compute in: "
                         "pass dtype='f32' (--dtype f32: float32 compute, exact bf16 values) "
                         "or dtype='f16' (--dtype f16: half-precision compute)")
    target = CHOICES[dtype]
    if target == torch.float16 and isinstance(model, torch.nn.Module):
        limit = torch.finfo(torch.float16).max
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if t.dtype == torch.bfloat16 and t.numel() and \
                    t.detach().abs().max().float().item() > limit:
                raise UsageError(f"dtype='f16': bfloat16 weight {name} holds values beyond "
                                 f"float16's range (|x| > {limit:g}); export with "
                                 "dtype='f32'")
    return target


def converted_inputs(args, target: torch.dtype | None) -> list:
    """The example inputs with bf16 tensors in the compute dtype (what tract is fed)."""
    if target is None:
        return list(args)
    return [a.to(target) if a.dtype == torch.bfloat16 else a for a in args]


def reference_model(model, target: torch.dtype):
    """A copy of ``model`` with its bf16 weights in ``target``: what the check compares
    tract with (the user's model is left as it is)."""
    clone = copy.deepcopy(model)
    with torch.no_grad():
        for t in list(clone.parameters()) + list(clone.buffers()):
            if t.dtype == torch.bfloat16:
                t.data = t.data.to(target)
    return clone
