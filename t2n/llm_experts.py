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
times the active work, ``k`` times less than the grouped form, no sort or gather. The
products are plain linear layers over views of the expert weights (one product of
``E * N`` outputs where the weight's layout allows it, else one per expert), the layout
tract runs fastest and q4_0 compresses. An expert's activations are selected (``where``),
not only multiplied by a zero weight, so an expert the token does not use cannot bring an
infinity or NaN into the sum.

The user's model is never modified: :func:`dense_experts_view` returns a view of it
(:mod:`t2n.llm_views`: new module objects over the same tensors) whose experts modules run
:func:`dense_experts_forward` (DBRX's, a plain loop outside the switch, the dense form of
:mod:`t2n.llm_experts_dbrx`); everything else runs the model's own code.
"""

from __future__ import annotations

import types

import torch

from t2n.errors import UsageError
from t2n.llm_experts_dbrx import dbrx_dense_experts_forward, is_dbrx_experts
from t2n.llm_views import module_view

# the attributes transformers' ``use_experts_implementation`` gives an experts module
_DECORATED = ("has_gate", "has_bias", "is_transposed", "has_post_expert_norm", "num_experts",
              "_apply_gate")


def is_experts_module(module: torch.nn.Module) -> bool:
    """A transformers experts module whose forward ``config._experts_implementation`` picks."""
    return all(hasattr(module, a) for a in _DECORATED) and hasattr(module, "config")


def _routing(self, top_k_index, top_k_weights):
    """``(weights [T, E], selected [T, E])``: each expert's routing weight for each token
    (0 for the experts not among its top k) and whether the token uses it."""
    experts = torch.arange(self.num_experts, device=top_k_index.device)
    chosen = top_k_index.unsqueeze(-1) == experts  # [T, k, E]
    weights = (chosen.to(top_k_weights.dtype) * top_k_weights.unsqueeze(-1)).sum(1)
    return weights, chosen.any(1)


def _up(self, x):
    """Every expert's up (or gate and up) projection of ``x [T, H]`` -> ``[T, E, N]``.

    ``[E, N, H]`` weights are one product over their ``[E * N, H]`` view (a plain linear
    layer of ``E * N`` outputs); transposed ``[E, H, N]`` ones one product per expert (each
    ``[H, N]`` a view of the weight), so that every weight stays a view of the model's
    (q4_0 compresses views, not reordered copies)."""
    w = self.gate_up_proj if self.has_gate else self.up_proj
    bias = (self.gate_up_proj_bias if self.has_gate else self.up_proj_bias) \
        if self.has_bias else None
    e = w.shape[0]
    if self.is_transposed:
        h = torch.stack([x @ w[i] for i in range(e)], 1)
    else:
        h = torch.nn.functional.linear(x, w.reshape(e * w.shape[1], w.shape[2]))
        h = h.reshape(x.shape[0], e, w.shape[1])
    return h if bias is None else h + bias


def _down(self, g):
    """``sum over e of g[:, e] @ down_e`` for ``g [T, E, I]`` -> ``[T, H]``: transposed
    ``[E, I, H]`` weights as one product over their ``[E * I, H]`` view, ``[E, H, I]`` ones
    one product per expert (the reduced axes e and i are not adjacent in memory)."""
    w = self.down_proj
    e = w.shape[0]
    if self.is_transposed:
        return g.reshape(g.shape[0], -1) @ w.reshape(e * w.shape[1], w.shape[2])
    out = torch.nn.functional.linear(g[:, 0], w[0])
    for i in range(1, e):
        out = out + torch.nn.functional.linear(g[:, i], w[i])
    return out


def _batched(self, x, weights, selected):
    """Experts with a norm after each one (``has_post_expert_norm``): every expert's output
    ``[E, T, H]`` is normalised before it is weighted, so the products stay per expert."""
    up = self.gate_up_proj if self.has_gate else self.up_proj
    up_bias = (self.gate_up_proj_bias if self.has_gate else self.up_proj_bias) \
        if self.has_bias else None
    h = torch.matmul(x, up if self.is_transposed else up.transpose(-1, -2))
    h = h if up_bias is None else h + up_bias.unsqueeze(-2)
    h = self._apply_gate(h) if self.has_gate else self.act_fn(h)
    d = self.down_proj
    out = torch.matmul(h, d if self.is_transposed else d.transpose(-1, -2))
    out = out if not self.has_bias else out + self.down_proj_bias.unsqueeze(-2)
    out = self.post_expert_norm(out) * weights.transpose(0, 1).unsqueeze(-1).to(out.dtype)
    zero = torch.zeros((), dtype=out.dtype)
    return torch.where(selected.transpose(0, 1).unsqueeze(-1), out, zero).sum(0)


def dense_experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                          top_k_weights: torch.Tensor) -> torch.Tensor:
    """``hidden_states [T, H]``, the routing's ``top_k_index`` / ``top_k_weights [T, k]`` ->
    ``[T, H]``: the sum over the token's experts of weight times expert output, as every
    implementation of transformers computes it, with every expert evaluated.

    The routing weight multiplies each expert's activations before its down projection
    (``w * (a @ D) = (w * a) @ D``), so the down projections of all experts sum in one
    reduction; the biases of the down projections are weighted alike."""
    x = hidden_states
    weights, selected = _routing(self, top_k_index, top_k_weights)
    if self.has_post_expert_norm:
        return _batched(self, x.unsqueeze(0), weights, selected).to(x.dtype)
    h = _up(self, x)
    a = self._apply_gate(h) if self.has_gate else self.act_fn(h)  # [T, E, I]
    zero = torch.zeros((), dtype=a.dtype)
    g = torch.where(selected.unsqueeze(-1), a * weights.unsqueeze(-1).to(a.dtype), zero)
    out = _down(self, g)
    if self.has_bias:
        w = torch.where(selected, weights, torch.zeros((), dtype=weights.dtype))
        out = out + w.to(out.dtype) @ self.down_proj_bias
    return out.to(x.dtype)


def _dense_forward(module: torch.nn.Module):
    """The dense forward for ``module`` if it is an experts module t2n knows, else None."""
    if is_experts_module(module):
        return dense_experts_forward
    if is_dbrx_experts(module):
        return dbrx_dense_experts_forward
    return None


_DENSE_FORWARDS = (dense_experts_forward, dbrx_dense_experts_forward)


def dense_experts_view(model: torch.nn.Module) -> tuple[torch.nn.Module, int]:
    """``(view, n)``: ``model`` itself and 0 when it has no experts modules, else a shallow
    copy of its module tree (each module a new object sharing the parameter and buffer
    tensors; a module shared inside the tree stays shared) whose ``n`` experts modules
    compute densely (transformers' ``use_experts_implementation`` ones and DBRX's). Expert-
    parallel modules (sharded experts) are refused."""
    found = [m for m in model.modules() if _dense_forward(m) is not None]
    if not found:
        return model, 0
    if any(getattr(m, "_is_expert_parallel", False) for m in found):
        raise UsageError(f"{type(model).__name__}: its experts are sharded for expert "
                         "parallelism; t2n llm exports a model holding all its experts")

    def dense(m: torch.nn.Module):
        forward = _dense_forward(m)
        if forward is None:
            return None
        c = module_view(m, lambda sub: sub if sub is not m else None)
        c.forward = types.MethodType(forward, c)
        return c

    return module_view(model, dense), len(found)


def own_experts(model: torch.nn.Module) -> torch.nn.Module:
    """Undo :func:`dense_experts_view` on a copy of the view (the rounded-weight model of a
    compressed export): its experts run transformers' own implementation again, so the
    check's reference is transformers' code, not t2n's dense form."""
    for m in model.modules():
        if isinstance(m.__dict__.get("forward"), types.MethodType) \
                and m.__dict__["forward"].__func__ in _DENSE_FORWARDS:
            del m.__dict__["forward"]
    return model
