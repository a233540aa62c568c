"""Sequence recurrences of the state-space and linear-attention families, as ops a trace
keeps whole (``t2n llm`` only).

transformers' PyTorch kernels for these layers loop over the sequence in Python: Mamba's
``mamba_selective_scan`` per token, the gated delta rule (``torch_chunk_gated_delta_rule``)
per chunk of 64 tokens; Mamba 2's ``mamba2_chunk_scan`` reshapes into ``ceil(S / chunk)``
chunks. A trace freezes such a loop or chunk count at the example length, so the graph
would be right for that length only. While a ``t2n llm`` step runs (the trace, and the
eager run its check compares with), :func:`substituted_kernels` replaces those functions
in the model's modeling module by ones that compute the same recurrence token by token
through a ``torch.library`` custom op (``t2n_llm::selective_scan``, ``t2n_llm::ssd_scan``,
``t2n_llm::gated_delta_scan``): eagerly a Python loop, in the archive one
``tract_core_scan`` (t2n/mappings/state_space.py) that runs any number of tokens.

The gated delta rule is computed by its recurrent form for every length: transformers'
prompt path computes the same sums by chunks (a different rounding, identical
mathematics) and its decoding path is this recurrent form. Its chunked form would need a
loop over ``ceil(S / 64)`` chunks, each with a 64 x 64 triangular solve, which costs more
than it saves at the lengths a CPU prompt has, and pads every decoding token to 64.

Mamba's full-sequence kernel starts from a zero state (transformers only calls it for a
prompt); the substitute starts from the layer's cached state, read from the step's cache,
so the same graph continues a sequence. The layer being run is known from a forward
pre-hook on the modules carrying ``layer_idx`` (removed afterwards).
"""

from __future__ import annotations

import contextlib
import inspect
import sys

import torch
import torch.nn.functional as F
from torch import Tensor

from t2n.errors import UsageError


@torch.library.custom_op("t2n_llm::selective_scan", mutates_args=())
def selective_scan(decay: Tensor, update: Tensor, c: Tensor,
                   state: Tensor) -> tuple[Tensor, Tensor]:
    """``decay, update [B, D, S, N]``, ``c [B, S, N]``, ``state [B, D, N]``."""
    ys = []
    for i in range(decay.shape[2]):
        state = decay[:, :, i] * state + update[:, :, i]
        ys.append(torch.matmul(state, c[:, i, :].unsqueeze(-1))[:, :, 0])
    return torch.stack(ys, dim=-1), state.clone()


@selective_scan.register_fake
def _(decay, update, c, state):
    return decay.new_empty(decay.shape[:3]), torch.empty_like(state)


@torch.library.custom_op("t2n_llm::gated_delta_scan", mutates_args=())
def gated_delta_scan(query: Tensor, key: Tensor, value: Tensor, decay: Tensor, beta: Tensor,
                     state: Tensor) -> tuple[Tensor, Tensor]:
    """``query, key [B, H, S, Dk]``, ``value [B, H, S, Dv]``, ``decay, beta [B, H, S]``,
    ``state [B, H, Dk, Dv]``."""
    out = []
    for i in range(query.shape[2]):
        state = state * decay[:, :, i].exp()[..., None, None]
        k_t = key[:, :, i]
        read = (state * k_t.unsqueeze(-1)).sum(dim=-2)
        delta = (value[:, :, i] - read) * beta[:, :, i].unsqueeze(-1)
        state = state + k_t.unsqueeze(-1) * delta.unsqueeze(-2)
        out.append((state * query[:, :, i].unsqueeze(-1)).sum(dim=-2))
    return torch.stack(out, dim=2), state.clone()


@gated_delta_scan.register_fake
def _(query, key, value, decay, beta, state):
    return value.new_empty(value.shape), torch.empty_like(state)


@torch.library.custom_op("t2n_llm::ssd_scan", mutates_args=())
def ssd_scan(x: Tensor, dt: Tensor, a: Tensor, b: Tensor, c: Tensor,
             state: Tensor) -> tuple[Tensor, Tensor]:
    """Mamba 2's state-space recurrence: ``x [B, S, H, P]``, ``dt [B, S, H]``, ``a [H]``,
    ``b, c [B, S, H, N]``, ``state [B, H, P, N]``."""
    ys = []
    for i in range(x.shape[1]):
        dt_i = dt[:, i, :, None, None]
        state = state * torch.exp(dt_i * a[:, None, None]) \
            + (dt_i * x[:, i, :, :, None]) * b[:, i, :, None, :]
        ys.append(torch.matmul(state, c[:, i, :, :, None])[..., 0])
    return torch.stack(ys, dim=1), state.clone()


@ssd_scan.register_fake
def _(x, dt, a, b, c, state):
    return torch.empty_like(x), torch.empty_like(state)


# ---------------------------------------------------------------------------- substitutes
class _Step:
    """What a substitute needs to know about the running step."""

    cache = None
    layer = None


_STEP = _Step()


def _l2norm(x, eps: float = 1e-6):
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def gated_delta_rule(query, key, value, g, beta, chunk_size: int = 64, initial_state=None,
                     output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                     **kwargs):
    """The gated delta rule with transformers' kernel signature (``[B, S, H, D]`` in and
    out), token by token from ``initial_state``."""
    dtype = query.dtype
    bsz, _, k_heads, k_dim = key.shape
    v_heads, v_dim = value.shape[-2:]
    if k_heads != v_heads:  # grouped: each key head serves consecutive value heads
        query = query.repeat_interleave(v_heads // k_heads, dim=2)
        key = key.repeat_interleave(v_heads // k_heads, dim=2)
    query, key, value, beta, g = [x.transpose(1, 2).to(torch.float32).contiguous()
                                  for x in (query, key, value, beta, g)]
    if use_qk_l2norm_in_kernel:
        query, key = _l2norm(query), _l2norm(key)
    query = query / (query.shape[-1] ** 0.5)
    if initial_state is None:
        state = value.new_zeros(bsz, v_heads, k_dim, v_dim)
    else:
        state = initial_state.to(value)
    out, state = torch.ops.t2n_llm.gated_delta_scan(query, key, value, g, beta, state)
    out = out.transpose(1, 2).contiguous().to(dtype)
    return out, (state if output_final_state else None)


def mamba_selective_scan(hidden_states, dt, A, B, C, D=None, z=None, delta_bias=None,
                         delta_softplus: bool = False, return_last_state: bool = False,
                         use_mambapy: bool = False, use_associative_scan: bool = False,
                         **kwargs):
    """Mamba's selective scan with transformers' kernel signature, continuing from the
    running layer's cached state (``use_mambapy``/``use_associative_scan`` choose other
    algorithms for the same recurrence: one scan serves all)."""
    dtype = hidden_states.dtype
    if delta_bias is not None:
        dt = dt + delta_bias.to(dt.dtype)[..., None]
    if delta_softplus:
        dt = F.softplus(dt)
    B, C = B.transpose(1, 2), C.transpose(1, 2)  # [B, S, N]
    decay = torch.exp(A[None, :, None, :] * dt[:, :, :, None])
    update = dt[:, :, :, None] * B[:, None, :, :].float()
    update = update * hidden_states[:, :, :, None].float()
    state = _cached_recurrent_state()
    if state is None:
        state = hidden_states.new_zeros(hidden_states.shape[0], hidden_states.shape[1],
                                        A.shape[-1])
    y, state = torch.ops.t2n_llm.selective_scan(decay, update, C.to(dtype), state.to(dtype))
    if D is not None:
        y = y + hidden_states * D[None, :, None]
    if z is not None:
        y = y * F.silu(z)
    return (y, state) if return_last_state else y


def mamba2_chunk_scan(hidden_states, dt, A, B, C, chunk_size: int = 256, D=None,
                      dt_bias=None, initial_states=None, dt_softplus: bool = False,
                      dt_limit=(0.0, float("inf")), return_final_states: bool = False,
                      **kwargs):
    """Mamba 2's chunked scan with transformers' kernel signature, token by token from
    ``initial_states`` (the chunks only group the same sums; a decoding token is not
    padded to a chunk)."""
    bsz, _, heads, head_dim = hidden_states.shape
    groups, n = B.shape[2], B.shape[3]
    if dt_bias is not None:
        dt = dt + dt_bias.to(dt.dtype)
    if dt_softplus:
        dt = F.softplus(dt)
    dt = torch.clamp(dt, min=dt_limit[0], max=dt_limit[1]).float()
    x = hidden_states.float()
    B = B.float().repeat_interleave(heads // groups, dim=2)
    C = C.float().repeat_interleave(heads // groups, dim=2)
    if initial_states is None:
        state = x.new_zeros(bsz, heads, head_dim, n)
    else:
        state = initial_states.float()
    y, state = torch.ops.t2n_llm.ssd_scan(x, dt, A.float(), B, C, state)
    if D is not None:
        y = y + D[..., None] * x
    return (y, state) if return_final_states else y


def _cached_recurrent_state():
    cache, layer = _STEP.cache, _STEP.layer
    if cache is None or layer is None:
        return None
    states = getattr(cache.layers[layer], "recurrent_states", None) or {}
    return states.get(0)


# function name in a modeling module -> (substitute, the parameters it understands)
SUBSTITUTES = {
    "torch_chunk_gated_delta_rule": gated_delta_rule,
    "torch_recurrent_gated_delta_rule": gated_delta_rule,
    "mamba_selective_scan": mamba_selective_scan,
    "mamba2_chunk_scan": mamba2_chunk_scan,
}


def _params(fn) -> set:
    fn = inspect.unwrap(fn)
    return {p.name for p in inspect.signature(fn).parameters.values()
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def modeling_modules(model) -> list:
    """The modules defining the classes of ``model``'s submodules (the modeling files)."""
    names = {type(m).__module__ for m in model.modules()}
    return [sys.modules[n] for n in sorted(names) if n in sys.modules]


def kernels_to_substitute(model) -> list[tuple]:
    """``(module name, function name)`` for every sequence loop of the model's families
    (names, so that a step holding them can be copied); a kernel taking arguments the
    substitute does not know is refused."""
    found = []
    for mod in modeling_modules(model):
        for name, sub in SUBSTITUTES.items():
            fn = getattr(mod, name, None)
            if fn is None or not callable(fn):
                continue
            unknown = sorted(_params(fn) - _params(sub))
            if unknown:
                raise UsageError(f"{type(model).__name__}: {mod.__name__}.{name} takes "
                                 f"{', '.join(unknown)}, which t2n llm's token-by-token "
                                 "substitute does not compute; this family is not supported")
            found.append((mod.__name__, name))
    return found


@contextlib.contextmanager
def substituted_kernels(model, cache, kernels: list[tuple]):
    """Run ``model`` with ``kernels`` (from :func:`kernels_to_substitute`) replaced and
    ``cache`` readable by the substitutes; everything is put back on exit."""
    kernels = [(sys.modules[m], name, SUBSTITUTES[name]) for m, name in kernels]
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in kernels]
    hooks = []
    if kernels:
        def enter(module, args):
            _STEP.layer = module.layer_idx

        for m in model.modules():
            if isinstance(getattr(m, "layer_idx", None), int):
                hooks.append(m.register_forward_pre_hook(enter))
    try:
        for mod, name, sub in kernels:
            setattr(mod, name, sub)
        _STEP.cache, _STEP.layer = cache, None
        yield
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
        for h in hooks:
            h.remove()
        _STEP.cache, _STEP.layer = None, None
