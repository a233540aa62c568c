"""Mixture-of-experts layers of ``transformers`` as dense products, for ``t2n llm``.

transformers 5 runs the experts of Mixtral, Qwen3-MoE, OLMoE, GPT-OSS, DeepSeek-V3 and the
other families decorated with ``use_experts_implementation`` through a switch
(``config._experts_implementation``): ``eager`` loops over the experts the routing hit
(``nonzero()``, a loop a trace would freeze to the example's experts), ``grouped_mm`` sorts
the (token, expert) pairs and multiplies each group by its expert. t2n lowers
``aten::_grouped_mm`` exactly, but with data-dependent group sizes it must compute every
expert's product for every one of the ``T * k`` sorted rows: ``E`` times the active work.

The dense form computes every expert once per token and weights each result by its
routing weight (zero for the experts not among the token's top ``k``; the router, with its
family's top-k, grouping and renormalisation, is left as transformers wrote it): ``E / k``
times the active work, ``k`` times less than the grouped form, no sort or gather, and
two batched products per layer whose weights are constants (q4_0 compresses them).
An expert's result is selected (``where``), not multiplied by a zero weight, so an expert
the token does not use cannot bring an infinity or NaN into the sum.

The user's model is never modified: :func:`dense_experts_view` returns a view of it
(:mod:`t2n.llm_views`: new module objects over the same tensors) whose experts modules run
:func:`dense_experts_forward`; everything else runs the model's own code.
"""

from __future__ import annotations

import types

import torch

from t2n.errors import UsageError
from t2n.llm_views import module_view

# the attributes transformers' ``use_experts_implementation`` gives an experts module
_DECORATED = ("has_gate", "has_bias", "is_transposed", "has_post_expert_norm", "num_experts",
              "_apply_gate")


def is_experts_module(module: torch.nn.Module) -> bool:
    """A transformers experts module whose forward ``config._experts_implementation`` picks."""
    return all(hasattr(module, a) for a in _DECORATED) and hasattr(module, "config")


def _product(x, weight, bias, transposed: bool):
    """``x [.., T, K]`` times every expert's ``weight`` (``[E, N, K]``, or ``[E, K, N]`` when
    ``transposed``) -> ``[E, T, N]``, plus the expert's bias."""
    out = torch.matmul(x, weight if transposed else weight.transpose(-1, -2))
    return out if bias is None else out + bias.unsqueeze(-2)


def dense_experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                          top_k_weights: torch.Tensor) -> torch.Tensor:
    """``hidden_states [T, H]``, the routing's ``top_k_index`` / ``top_k_weights [T, k]`` ->
    ``[T, H]``: the sum over the token's experts of weight times expert output, as every
    implementation of transformers computes it, with every expert evaluated."""
    experts = torch.arange(self.num_experts, device=hidden_states.device)
    chosen = top_k_index.unsqueeze(-1) == experts  # [T, k, E]
    weights = (chosen.to(top_k_weights.dtype) * top_k_weights.unsqueeze(-1)).sum(1)  # [T, E]
    selected = chosen.any(1).transpose(0, 1).unsqueeze(-1)  # [E, T, 1]
    if self.has_gate:
        up, up_bias = self.gate_up_proj, getattr(self, "gate_up_proj_bias", None)
    else:
        up, up_bias = self.up_proj, getattr(self, "up_proj_bias", None)
    h = _product(hidden_states.unsqueeze(0), up, up_bias if self.has_bias else None,
                 self.is_transposed)  # [E, T, I or 2I]
    h = self._apply_gate(h) if self.has_gate else self.act_fn(h)
    out = _product(h, self.down_proj, self.down_proj_bias if self.has_bias else None,
                   self.is_transposed)  # [E, T, H]
    if self.has_post_expert_norm:
        out = self.post_expert_norm(out)
    weighted = out * weights.transpose(0, 1).unsqueeze(-1).to(out.dtype)
    out = torch.where(selected, weighted, torch.zeros((), dtype=out.dtype)).sum(0)
    return out.to(hidden_states.dtype)


def dense_experts_view(model: torch.nn.Module) -> tuple[torch.nn.Module, int]:
    """``(view, n)``: ``model`` itself and 0 when it has no experts modules, else a shallow
    copy of its module tree (each module a new object sharing the parameter and buffer
    tensors; a module shared inside the tree stays shared) whose ``n`` experts modules
    compute densely. Expert-parallel modules (sharded experts) are refused."""
    found = [m for m in model.modules() if is_experts_module(m)]
    if not found:
        return model, 0
    if any(getattr(m, "_is_expert_parallel", False) for m in found):
        raise UsageError(f"{type(model).__name__}: its experts are sharded for expert "
                         "parallelism; t2n llm exports a model holding all its experts")

    def dense(m: torch.nn.Module):
        if not is_experts_module(m):
            return None
        c = module_view(m, lambda sub: sub if sub is not m else None)
        c.forward = types.MethodType(dense_experts_forward, c)
        return c

    return module_view(model, dense), len(found)


def own_experts(model: torch.nn.Module) -> torch.nn.Module:
    """Undo :func:`dense_experts_view` on a copy of the view (the rounded-weight model of a
    compressed export): its experts run transformers' own implementation again, so the
    check's reference is transformers' code, not t2n's dense form."""
    for m in model.modules():
        if isinstance(m.__dict__.get("forward"), types.MethodType) \
                and m.__dict__["forward"].__func__ is dense_experts_forward:
            del m.__dict__["forward"]
    return model
