"""The state a ``t2n llm`` step carries from one run to the next, for every family.

transformers 5 keeps a causal LM's cache as one ``DynamicCache`` whose layers are of a few
kinds: attention layers keep keys and values that grow by ``S`` positions per step
(``[1, H_kv, P, D]``); the layers of the hybrid and state-space families (Mamba, Jamba,
Mamba 2, Qwen3-Next's gated delta net, LFM2's short convolutions, ...) are
``LinearAttentionLayer`` objects keeping *fixed-size* tensors: a convolution window
(``conv_states``, the last ``K`` inputs of a causal depthwise convolution) and a recurrent
state (``recurrent_states``, an SSM state or a delta-rule memory). A layer can hold both
kinds (``LinearAttentionAndFullAttentionLayer``).

:func:`probe_states` reads that structure from the cache the model builds for one token, so
the archive's inputs are whatever the family keeps: ``past_key_i``/``past_value_i`` per
attention layer, ``past_conv_i``/``past_recurrent_i`` per linear layer (``_j`` appended
when a layer keeps several). :func:`step_cache` rebuilds the cache from those tensors for
one traced step, and :func:`present_states` reads the updated tensors back, in the same
order, as the step's outputs.

The linear layers are always given a previous state (zeros before the prompt): the model
then takes the path that continues from a state for any ``S`` (the convolution reads the
window followed by the new inputs; the recurrence starts from the state), which with a
zero state computes what the stateless prompt path computes, so the prompt and every
decoding step are one graph. Their updates are functional (the new window and state are
new tensors, never written into the inputs with ``copy_``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from t2n.errors import UsageError


@dataclass
class StateSpec:
    """One state tensor of the step: its input/output name suffix, the layer it belongs to,
    its kind (``key``, ``value``, ``conv``, ``recurrent``), the state index inside the layer
    and its shape at the prompt (``P = 0`` for keys and values)."""

    suffix: str
    layer: int
    kind: str
    index: int
    shape: tuple

    @property
    def grows(self) -> bool:
        """Keys and values grow by ``S`` positions along axis 2 per step."""
        return self.kind in ("key", "value")

    @property
    def input_name(self) -> str:
        return f"past_{self.suffix}"

    @property
    def output_name(self) -> str:
        return f"present_{self.suffix}"


@dataclass
class StepStates:
    """Every state of a step: ``n_layers`` cache layers, each ``kv``, ``linear``, ``both``
    or ``none``, and the state tensors in input order."""

    n_layers: int
    kinds: list
    specs: list

    def io_names(self, inplace: bool = False) -> tuple[list[str], list[str]]:
        """The step's inputs and outputs; ``inplace``: those of the archive once the keys
        and values are kept in tract's State (:meth:`cache_option`)."""
        specs = self.io_specs(inplace)
        return (["input_ids"] + [s.input_name for s in specs],
                ["logits"] + [s.output_name for s in specs])

    def io_specs(self, inplace: bool = False) -> list:
        """The states that cross the archive's interface: all of them, or with
        ``inplace`` the fixed-size ones only (conv windows, recurrent states)."""
        return [s for s in self.specs if not (inplace and s.grows)]

    def cache_option(self, kv_cache: str) -> dict:
        """``inplace``: each key/value input and its output become one
        ``tract_transformers_dyn_kv_cache`` (:mod:`t2n.passes.stateful_cache`); the
        fixed-size states keep their inputs and outputs (they are replaced, not grown,
        at each step, which that operator does not do)."""
        if kv_cache != "inplace":
            return {}
        return {"stateful_caches": {s.input_name: s.output_name
                                    for s in self.specs if s.grows}}

    def dynamic_axes(self) -> dict:
        """``S`` on the ids, ``P`` (>= 0: the prompt runs with an empty past) on the
        keys and values; conv windows and recurrent states keep their sizes."""
        dyn = {"input_ids": {1: "S"}}
        dyn.update({s.input_name: {2: ("P", 0)} for s in self.specs if s.grows})
        return dyn

    def example(self, generator, past: int) -> list:
        """Example states: keys and values of ``past`` positions, random windows and
        states (never zeros, so that no value is folded as a constant)."""
        out = []
        for s in self.specs:
            shape = list(s.shape)
            if s.grows:
                shape[2] = past
            out.append(torch.randn(*shape, generator=generator))
        return out

    def properties(self, inplace: bool = False) -> dict:
        """The runtime's view: the kind and the first step's shape of every state input
        of the archive (``P = 0``: keys and values start empty, the others as zeros of
        that shape); none when every state is kept in tract's State (``inplace``)."""
        specs = self.io_specs(inplace)
        if not specs:  # tract's properties hold no empty list
            return {}
        return {"t2n.llm.state_kinds": [s.kind for s in specs],
                "t2n.llm.state_shapes": [",".join(map(str, s.shape)) for s in specs]}


def _classes():
    from transformers import cache_utils as cu

    linear = getattr(cu, "LinearAttentionCacheLayerMixin", None)
    return cu, linear


def linear_layer_states(layer, i: int, model_name: str) -> list[StateSpec]:
    """The conv and recurrent states of a linear layer (those the model initialised)."""
    specs = []
    n = layer.number_of_states
    for kind, states in (("conv", layer.conv_states), ("recurrent", layer.recurrent_states)):
        for j in range(n):
            t = states.get(j)
            if t is None:
                continue
            if t.dim() < 2 or t.shape[0] != 1:
                raise UsageError(f"layer {i} of {model_name} keeps a {kind} state of shape "
                                 f"{list(t.shape)}; t2n llm needs [batch, ...] with batch 1")
            if getattr(layer, "record_past", False):
                raise UsageError(f"layer {i} of {model_name} records its past conv states "
                                 "(speculative decoding); t2n llm exports the plain cache")
            suffix = f"{kind}_{i}" + (f"_{j}" if n > 1 else "")
            specs.append(StateSpec(suffix, i, kind, j, tuple(int(d) for d in t.shape)))
    return specs


def kv_states(i: int, layer) -> list[StateSpec]:
    """Keys and values of attention layer ``i`` (a ``CacheLayer``: values may differ in
    size from the keys, as in DeepSeek's latent attention)."""
    return [StateSpec(f"key_{i}", i, "key", 0, (1, layer.heads, 0, layer.head_dim)),
            StateSpec(f"value_{i}", i, "value", 0,
                      (1, layer.value_heads, 0, layer.value_head_dim))]


def is_linear(layer) -> bool:
    _, linear = _classes()
    return linear is not None and isinstance(layer, linear)


def is_dummy(layer) -> bool:
    cu, _ = _classes()
    dummy = getattr(cu, "DummyLayer", None)
    return dummy is not None and isinstance(layer, dummy)


# ---------------------------------------------------------------------------- the cache
def _layer_classes():
    """Cache layers holding given tensors, whose updates return new tensors."""
    cu, _ = _classes()

    class TensorKV(cu.DynamicLayer):
        """Keys and values given as tensors; the length is read from their shape, so the
        trace keeps it symbolic (``P``) instead of testing ``numel() == 0``."""

        def __init__(self, keys, values):
            super().__init__()
            self.keys, self.values = keys, values
            self.device = keys.device
            self.is_initialized = True

        def get_seq_length(self) -> int:
            return self.keys.shape[-2]

    class TensorLinear(cu.LinearAttentionLayer):
        """Conv windows and recurrent states given as tensors, always "previous"."""

        def __init__(self, conv: dict, recurrent: dict, n: int):
            super().__init__(number_of_states=n)
            for j in range(n):
                c, r = conv.get(j), recurrent.get(j)
                if c is not None:
                    self.conv_states[j] = c
                    self.conv_kernel_size[j] = c.shape[-1]
                    self.is_conv_states_initialized[j] = True
                    self.dtype, self.device = c.dtype, c.device
                if r is not None:
                    self.recurrent_states[j] = r
                    self.is_recurrent_states_initialized[j] = True
                self.has_previous_state[j] = True

        def update_conv_state(self, conv_states, state_idx: int = 0, **kwargs):
            # the window followed by the new inputs (what the convolution reads); the next
            # window is its last K columns
            full = torch.cat([self.conv_states[state_idx], conv_states.to(self.dtype)], -1)
            self.conv_states[state_idx] = full[..., -self.conv_kernel_size[state_idx]:]
            return full

        def update_recurrent_state(self, recurrent_states, state_idx: int = 0, **kwargs):
            self.recurrent_states[state_idx] = recurrent_states
            return recurrent_states

    class TensorBoth(TensorLinear):
        """A layer keeping keys and values as well as linear states (``hybrid`` layers)."""

        def __init__(self, keys, values, conv, recurrent, n):
            TensorLinear.__init__(self, conv, recurrent, n)
            self._kv = TensorKV(keys, values)

        def update(self, key_states, value_states, *args, **kwargs):
            return self._kv.update(key_states, value_states, *args, **kwargs)

        def get_seq_length(self) -> int:
            return self._kv.get_seq_length()

        @property
        def keys(self):
            return self._kv.keys

        @property
        def values(self):
            return self._kv.values

    return TensorKV, TensorLinear, TensorBoth


def kv_cache(past, n_layers: int):
    """A ``DynamicCache`` of ``n_layers`` attention layers holding ``past`` (keys and values
    of each layer in turn)."""
    cu, _ = _classes()
    TensorKV, _, _ = _layer_classes()
    cache = cu.DynamicCache()
    cache.layers = [TensorKV(past[2 * i], past[2 * i + 1]) for i in range(n_layers)]
    return cache


def step_cache(specs: list[StateSpec], tensors, n_layers: int, layer_kinds: list[str]):
    """A ``DynamicCache`` holding ``tensors`` (one per spec, in order) for one step."""
    cu, _ = _classes()
    TensorKV, TensorLinear, TensorBoth = _layer_classes()
    by_layer: dict[int, dict] = {}
    for s, t in zip(specs, tensors):
        by_layer.setdefault(s.layer, {}).setdefault(s.kind, {})[s.index] = t
    layers = []
    for i in range(n_layers):
        got = by_layer.get(i, {})
        kind = layer_kinds[i]
        n = 1 + max([j for k in ("conv", "recurrent") for j in got.get(k, {})] or [0])
        if kind == "kv":
            layers.append(TensorKV(got["key"][0], got["value"][0]))
        elif kind == "linear":
            layers.append(TensorLinear(got.get("conv", {}), got.get("recurrent", {}), n))
        elif kind == "both":
            layers.append(TensorBoth(got["key"][0], got["value"][0], got.get("conv", {}),
                                     got.get("recurrent", {}), n))
        else:
            layers.append(cu.DummyLayer())
    cache = cu.DynamicCache()
    cache.layers = layers
    return cache


def present_states(cache, specs: list[StateSpec]) -> list:
    """The updated state tensors of ``cache``, in the order of ``specs``."""
    out = []
    for s in specs:
        layer = cache.layers[s.layer]
        if s.kind == "key":
            out.append(layer.keys)
        elif s.kind == "value":
            out.append(layer.values)
        elif s.kind == "conv":
            out.append(layer.conv_states[s.index])
        else:
            out.append(layer.recurrent_states[s.index])
    return out
