"""LoRA adapters of ``peft`` merged into the base weights at export, for ``t2n llm``.

A ``PeftModel`` computes ``W x + s * B (A x)`` in every adapted layer. Exported as it is,
the archive would carry the two small products per layer; merged, it computes
``(W + s * B A) x`` with the base model's own graph and cost, which is what peft's
``merge_and_unload`` gives. peft merges in place (into the user's weights), so t2n merges
into copies instead: :func:`merged_lora_view` returns a view of the base model
(:mod:`t2n.llm_views`) in which each adapted layer is a copy of its base layer holding the
merged weight (``W + sum over the active adapters of get_delta_weight``, peft's own delta,
which applies the scaling, rsLoRA and ``fan_in_fan_out``); the user's ``PeftModel`` and its
base weights are left as they were.

What a layer computes is followed exactly as peft's forward decides it: disabled adapters
give the base layer (less the adapters already merged into it), merged ones the base layer
as it is, otherwise the base weight plus every active adapter's delta (and ``lora_bias``).
Adapter kinds whose forward is not a weight delta (DoRA's magnitude, aLoRA's token-dependent
activation and the other LoRA variants, or tuners other than LoRA) are refused by name.
"""

from __future__ import annotations

import copy

import torch

from t2n.errors import UsageError
from t2n.llm_views import module_view


def _tuner_layer_class():
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
    except Exception:  # peft absent (or broken): the model cannot hold peft layers
        return None
    return BaseTunerLayer


def is_peft_model(model) -> bool:
    """A PeftModel, or a model peft injected adapter layers into (``get_peft_model`` adapts
    the base model in place and returns a wrapper: either may be given)."""
    tuner = _tuner_layer_class()
    return tuner is not None and any(isinstance(m, tuner) for m in model.modules())


def _adapters(layer) -> tuple[list[str], int]:
    """(adapters whose delta is added, sign): peft's forward, adapter by adapter."""
    known = set(layer.lora_A) | set(getattr(layer, "lora_embedding_A", {}))
    names = [a for a in layer.active_adapters if a in known]
    if layer.disable_adapters:
        return [a for a in layer.merged_adapters if a in known], -1
    if layer.merged:
        return [], 1
    return names, 1


def _merged_layer(layer, model_name: str) -> torch.nn.Module:
    """A copy of ``layer``'s base layer holding the merged weight (and bias)."""
    kind = type(layer).__name__
    if not hasattr(layer, "lora_A") or not hasattr(layer, "get_delta_weight"):
        raise UsageError(f"{model_name}: a peft {kind} layer; t2n llm merges LoRA adapters "
                         "only (merge other adapters with peft's merge_and_unload first)")
    names, sign = _adapters(layer)
    variants = sorted({type(layer.lora_variant[a]).__name__ for a in names
                       if a in getattr(layer, "lora_variant", {})})
    if variants:
        raise UsageError(f"{model_name}: LoRA variant {', '.join(variants)} in {kind}; t2n llm "
                         "merges plain LoRA adapters (a variant's output is not a weight "
                         "delta t2n can add to the base weight)")
    base = layer.get_base_layer()
    weight = getattr(base, "weight", None)
    if not isinstance(weight, torch.Tensor):
        raise UsageError(f"{model_name}: the base layer of a peft {kind} has no weight tensor")
    new = copy.copy(base)
    new.__dict__["_parameters"] = dict(base._parameters)
    new.__dict__["_modules"] = dict(base._modules)
    new.__dict__["_buffers"] = dict(base._buffers)
    if not names:
        return new
    with torch.no_grad():
        merged = weight.detach().clone()
        bias = None if getattr(base, "bias", None) is None else base.bias.detach().clone()
        for a in names:
            merged += sign * layer.get_delta_weight(a).to(merged.dtype)
            if layer.lora_bias.get(a, False):
                if bias is None:
                    raise UsageError(f"{model_name}: lora_bias on a layer without a bias")
                lora_b = layer.lora_B[a] if hasattr(layer, "lora_B") else None
                bias += sign * (lora_b.bias * layer.scaling[a]).to(bias.dtype)
    new._parameters["weight"] = torch.nn.Parameter(merged, requires_grad=False)
    if bias is not None:
        new._parameters["bias"] = torch.nn.Parameter(bias, requires_grad=False)
    return new


def merged_lora_view(model) -> tuple[torch.nn.Module, int]:
    """``(base, n)``: for a peft model (or a model holding peft layers), a view of its base
    model with the ``n`` adapted layers merged into copies of their base layers; any other
    model: ``(model, 0)``."""
    if not is_peft_model(model):
        return model, 0
    tuner = _tuner_layer_class()
    base = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    name = type(base).__name__
    layers = [m for m in base.modules() if isinstance(m, tuner)]
    view = module_view(base, lambda m: _merged_layer(m, name) if isinstance(m, tuner)
                       else None)
    return view, len(layers)
