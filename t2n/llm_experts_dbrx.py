"""DBRX's experts as dense products, for ``t2n llm`` (see :mod:`t2n.llm_experts`).

transformers' ``DbrxExperts`` is not under ``use_experts_implementation``: its forward loops
in Python over ``expert_mask...nonzero()`` (the experts the routing hit), a loop the trace
unrolls for the example's experts (t2n refuses it). Its weights are three flat parameters
of its ``mlp`` (``DbrxExpertGLU``), ``w1``, ``v1`` and ``w2``, each ``[E * N, H]`` and viewed
per expert as ``[E, N, H]``; an expert computes ``(act(x @ w1_e.T) * (x @ v1_e.T)) @ w2_e``
and its output is weighted by the token's routing weight (the router, ``DbrxFFN``'s softmax,
top-k and p-norm, runs as transformers wrote it).

Densely, the gate and up projections of all experts are each one linear product over the
flat ``w1`` / ``v1`` (``E * N`` outputs), and the down projections of all experts sum in one
product of the weighted activations ``[T, E * N]`` with the flat ``w2``: every product reads
a parameter as the model holds it, so ``--weights q4_0`` compresses them all.
"""

from __future__ import annotations

import torch


def is_dbrx_experts(module: torch.nn.Module) -> bool:
    """transformers' ``DbrxExperts``: an ``mlp`` holding flat ``w1``, ``v1``, ``w2`` of
    ``[num_experts * ffn_hidden_size, hidden_size]`` and an ``activation_fn``."""
    if type(module).__name__ != "DbrxExperts":
        return False
    mlp = getattr(module, "mlp", None)
    try:
        shape = (module.num_experts * module.ffn_hidden_size, module.hidden_size)
    except (AttributeError, TypeError):
        return False
    return mlp is not None and hasattr(mlp, "activation_fn") and all(
        isinstance(getattr(mlp, w, None), torch.Tensor) and tuple(getattr(mlp, w).shape) == shape
        for w in ("w1", "v1", "w2"))


def dbrx_dense_experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                               top_k_weights: torch.Tensor) -> torch.Tensor:
    """``DbrxExperts.forward`` with every expert evaluated: ``hidden_states [B, S, H]``, the
    routing's ``top_k_index`` / ``top_k_weights [B * S, k]`` -> ``[B, S, H]``.

    The routing weight multiplies each expert's activations before the down projection
    (``w * (a @ W2) = (w * a) @ W2``); the activations of experts outside the token's top k
    are selected away (``where``), so their overflow cannot reach the sum."""
    mlp, e, n = self.mlp, self.num_experts, self.ffn_hidden_size
    b = hidden_states.shape[0]
    x = hidden_states.reshape(-1, self.hidden_size)
    chosen = top_k_index.unsqueeze(-1) == torch.arange(e, device=x.device)  # [T, k, E]
    weights = (chosen.to(top_k_weights.dtype) * top_k_weights.unsqueeze(-1)).sum(1)  # [T, E]
    selected = chosen.any(1)
    gate = torch.nn.functional.linear(x, mlp.w1)  # [T, E * N]
    up = torch.nn.functional.linear(x, mlp.v1)
    a = (mlp.activation_fn(gate) * up).reshape(x.shape[0], e, n)
    zero = torch.zeros((), dtype=a.dtype)
    g = torch.where(selected.unsqueeze(-1), a * weights.unsqueeze(-1).to(a.dtype), zero)
    out = g.reshape(x.shape[0], e * n) @ mlp.w2  # [T, H]
    return out.to(hidden_states.dtype).view(b, -1, self.hidden_size)
