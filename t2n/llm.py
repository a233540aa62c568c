"""``t2n llm``: a transformers causal language model as ONE archive for prefill and decoding.

The archive computes one step: ``input_ids [1, S]`` and the cache's states in; ``logits
[1, 1, V]`` (the last position's, which is all greedy or sampled decoding reads;
``all_logits=True`` gives ``[1, S, V]``) and the updated states out, in the same order.
Attention layers carry ``past_key_i`` / ``past_value_i [1, H_kv, P, D]`` ->
``present_key_i`` / ``present_value_i [1, H_kv, P+S, D]``; the layers of hybrid and
state-space families carry fixed-size ``past_conv_i`` / ``past_recurrent_i`` (conv windows,
SSM or delta-rule states; :mod:`t2n.llm_state`). ``S`` and ``P`` are tract symbols: the
prompt runs with ``P = 0`` and zero states, each decoding step with ``S = 1`` and the
previous step's present tensors as its past. With ``kv_cache="inplace"`` tract keeps the
keys and values in the run's ``State`` instead (:mod:`t2n.passes.stateful_cache`); the
fixed-size states stay inputs/outputs. Positions (``P .. P+S-1``) and the causal mask
(with the sliding window of the families that have one) are computed inside the graph from
``P`` and ``S``. The layout goes into the archive's ``tract_core_properties``
(``t2n.llm.*``), so a runtime can feed the archive without knowing the model (see
:mod:`t2n.llm_generate`).

The export itself is :func:`t2n.export` on :class:`CausalLMStep`, a wrapper that turns the
cache tensors into the ``DynamicCache`` transformers expects and returns the updated cache
as tensors; nothing of the export path is duplicated here. ``check=True`` generates greedily
in tract (in a child process) and requires exactly the token ids of transformers'
``generate(do_sample=False)`` on the same model (with compressed weights: on the model with
the same rounded weights).
"""

from __future__ import annotations

import inspect
import json
import os
import warnings

import torch

from t2n.errors import CheckFailedError, ModelLoadError, T2NError, TractError, UsageError
from t2n.capture.model_mode import eval_mode
from t2n.llm_experts import dense_experts_view, own_experts
from t2n.llm_kernels import kernels_to_substitute, substituted_kernels
from t2n.llm_lora import merged_lora_view
from t2n.llm_result import CacheLayer, LLMExportResult
from t2n.llm_state import (StepStates, is_dummy, is_linear, kv_cache, kv_states,
                           linear_layer_states, present_states, step_cache)
from t2n.write.staging import check_destination, staged

DEFAULT_NEW_TOKENS = 16
# how the key/value cache crosses steps: as input/output tensors, or kept in tract's State
KV_CACHES = ("concat", "inplace")
PROMPT_LENGTH = 8
# Example sizes of the trace: S != P, both > 1, so that no size-1 or "cache is empty" special
# case of transformers is baked into the graph (the graph is then checked at P = 0, S = 1).
_EXAMPLE_S, _EXAMPLE_P = 3, 2


# ---------------------------------------------------------------------------- loading
def _transformers():
    try:
        import transformers
    except Exception as e:  # ImportError, or a broken optional dependency of transformers
        raise UsageError(f"t2n llm needs the transformers package, which did not import: "
                         f"{type(e).__name__}: {str(e).strip().splitlines()[0]}") from None
    return transformers


def _import_hint(e: BaseException) -> str:
    """transformers imports its optional dependencies lazily; name the one that broke."""
    seen = 0
    while e is not None and seen < 10:
        if "torchvision::" in str(e):
            return ("\n  transformers could not import torchvision: its compiled operators do "
                    "not load with the installed torch (install the torchvision build that "
                    "matches torch, or uninstall torchvision)")
        e, seen = e.__cause__ or e.__context__, seen + 1
    return ""


def _auto_class(transformers, folder: str):
    """A config with a ``vision_config`` is a vision-language model (SmolVLM: loaded as
    image-text-to-text, which the causal-LM auto class refuses)."""
    try:
        with open(os.path.join(folder, "config.json")) as fh:
            vision = "vision_config" in json.load(fh)
    except (OSError, ValueError):
        vision = False  # transformers names the problem
    return transformers.AutoModelForImageTextToText if vision \
        else transformers.AutoModelForCausalLM


def load_causal_lm(ref):
    """The model behind ``MODEL``: a directory written by ``save_pretrained`` (loaded from
    the local files only, in float32) or ``package.module:callable`` returning a model."""
    if isinstance(ref, torch.nn.Module):
        return ref
    ref = os.fspath(ref)
    if os.path.isdir(ref):
        if not os.path.isfile(os.path.join(ref, "config.json")):
            raise ModelLoadError(f"{ref} has no config.json: save the model with "
                                 "save_pretrained(DIR)")
        transformers = _transformers()
        verbosity = transformers.logging.get_verbosity()
        bars = transformers.utils.logging.is_progress_bar_enabled()
        try:
            transformers.logging.set_verbosity_error()  # no loading bars or notices
            transformers.utils.logging.disable_progress_bar()
            return _auto_class(transformers, ref).from_pretrained(
                ref, local_files_only=True, dtype=torch.float32)
        except Exception as e:
            text = str(e).strip().splitlines()
            raise ModelLoadError(f"transformers could not load a causal LM from {ref}: "
                                 f"{type(e).__name__}: {text[0] if text else ''}"
                                 + _import_hint(e)) from None
        finally:
            transformers.logging.set_verbosity(verbosity)
            if bars:
                transformers.utils.logging.enable_progress_bar()
    from t2n import specs

    if specs.is_callable_ref(ref):
        model, _ = specs.load_model(ref)
        return model
    raise ModelLoadError(f"{ref} is neither a directory saved with save_pretrained nor "
                         "package.module:callable")


# ---------------------------------------------------------------------------- the step
class CausalLMStep(torch.nn.Module):
    """``(input_ids, past_key_0, past_value_0, ...) -> (logits, present_key_0, ...)``.

    Every layer gets a full (non-sliding) cache: sliding-window layers apply their window
    through the mask transformers builds from the config, over all ``P + S`` positions, which
    is the same attention as the cropped cache ``generate`` keeps.

    With ``all_logits=False`` only the last position's logits are returned: the model's own
    ``logits_to_keep=1`` (transformers' causal LMs) applies the head to that position only,
    which saves the head over the whole prompt (a fifth of a 128-token prefill) and the copy
    of ``[1, S, V]`` logits; a model without it has its logits sliced."""

    def __init__(self, model, n_layers: int, all_logits: bool = False, states=None):
        super().__init__()
        self.model = model
        self.n_layers = n_layers
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._last_only = not all_logits
        self._keep_kw = self._last_only and "logits_to_keep" in params
        # the states of every layer (t2n.llm_state); None: keys and values of n_layers
        self.states = states
        self._kernels = kernels_to_substitute(model) if states is not None else []
        # generate() passes the positions explicitly; some models count them from 0 at
        # every step without them (Bamba in transformers 5.24): the input whose length is P
        grows = [i for i, s in enumerate(states.specs) if s.grows] if states else []
        self._positions = grows[0] if grows and "position_ids" in params else None

    def forward(self, input_ids, *past):
        return self.run({"input_ids": input_ids}, input_ids, past)

    def run(self, inputs: dict, ids, past):
        """One step on the model's ``inputs`` (``input_ids``, or ``inputs_embeds`` for a
        vision-language step, :mod:`t2n.llm_vision`); ``ids`` gives the step's length."""
        if self.states is None:
            cache = kv_cache(past, self.n_layers)
        else:
            cache = step_cache(self.states.specs, past, self.states.n_layers,
                               self.states.kinds)
        keep = {"logits_to_keep": 1} if self._keep_kw else {}
        if self._positions is not None:  # P .. P+S-1, as generate() passes them
            p = past[self._positions].shape[2]
            keep["position_ids"] = (torch.arange(ids.shape[1]) + p).unsqueeze(0)
        with substituted_kernels(self.model, cache, self._kernels):
            out = self.model(**inputs, use_cache=True, return_dict=True,
                             **{self._cache_kw: cache}, **keep)
        logits = out.logits[:, -1:] if self._last_only and not self._keep_kw else out.logits
        flat = [logits]
        if self.states is not None:
            return tuple(flat + present_states(cache, self.states.specs))
        for layer in cache.layers:
            flat += [layer.keys, layer.values]
        return tuple(flat)


def cache_layout(model) -> list[CacheLayer]:
    """Per attention layer heads, head size and sliding window (see :func:`step_layout`)."""
    return step_layout(model)[0]


def step_layout(model) -> tuple[list[CacheLayer], StepStates]:
    """The attention layers' heads, head size and sliding window, and every state the
    step carries (keys and values, conv windows, recurrent states), read from the cache
    the model itself builds for one token (so every family's own arithmetic is
    respected)."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        raise UsageError("t2n llm exports decoder-only causal language models "
                         f"({type(model).__name__} is not one)")
    try:
        with eval_mode(model), torch.no_grad():
            out = model(input_ids=torch.zeros(1, 1, dtype=torch.long), use_cache=True,
                        return_dict=True)
    except Exception as e:
        raise UsageError(f"{type(model).__name__} failed on one token with use_cache=True: "
                         f"{type(e).__name__}: {str(e).strip().splitlines()[0]}") from None
    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    if cache is None or not hasattr(cache, "layers") or getattr(out, "logits", None) is None:
        raise UsageError(f"{type(model).__name__} returned no logits or no key/value cache "
                         "(t2n llm needs a causal LM whose forward takes use_cache=True)")
    name = type(model).__name__
    layers, specs, kinds = [], [], []
    for i, layer in enumerate(cache.layers):
        if is_dummy(layer):
            kinds.append("none")
            continue
        linear = is_linear(layer)
        has_kv = isinstance(layer, DynamicLayer)
        if not linear and type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer):
            raise UsageError(f"layer {i} of {name} keeps a {type(layer).__name__} cache; "
                             "t2n llm supports key/value caches and the conv/recurrent "
                             "states of linear-attention layers")
        if has_kv:
            k, v = layer.keys, layer.values
            if k is None or v is None or k.dim() != 4 or v.dim() != 4 \
                    or k.shape[:1] != (1,) or v.shape[:1] != (1,) \
                    or k.shape[2] != 1 or v.shape[2] != 1:
                raise UsageError(f"layer {i} of {name} caches keys of shape "
                                 f"{None if k is None else list(k.shape)} and values of "
                                 f"{None if v is None else list(v.shape)}; t2n llm needs "
                                 "[batch, heads, positions, head_dim] for both")
            window = getattr(layer, "sliding_window", 0) if layer.is_sliding else 0
            c = CacheLayer(int(k.shape[1]), int(k.shape[3]), int(window or 0),
                           int(v.shape[1]), int(v.shape[3]))
            layers.append(c)
            specs += kv_states(i, c)
        if linear:
            specs += linear_layer_states(layer, i, name)
        kinds.append("both" if has_kv and linear else "linear" if linear else "kv")
    if not specs:
        raise UsageError(f"{name} has no layers with a cache")
    return layers, StepStates(len(cache.layers), kinds, specs)


def _refuse_what_the_trace_cannot_follow(model) -> None:
    """Refuse models whose graph would be right for the example sizes only.

    Rotary embeddings of type ``dynamic`` (NTK scaling) and ``longrope`` switch their
    frequencies once the sequence outgrows the pretraining length, by Python branches or
    in-place buffer updates that a trace freezes; the archive would silently compute the
    short-context frequencies for long contexts. Parameters must be float32 (the cache
    inputs are float32): a float16/bfloat16 model is converted with ``model.float()``, and
    ``weights="f16"`` gives the small archive."""
    cfg = model.config
    types = set()

    def collect(params):
        if isinstance(params, dict):
            if isinstance(params.get("rope_type"), str):
                types.add(params["rope_type"])
            for v in params.values():
                collect(v)

    collect(getattr(cfg, "rope_parameters", None))
    collect(getattr(cfg, "rope_scaling", None))
    bad = sorted(t for t in types if "dynamic" in t or t == "longrope")
    if bad:
        raise UsageError(f"{type(model).__name__}: rope_type {', '.join(bad)} (config."
                         "rope_parameters) changes the rotary frequencies with the sequence "
                         "length, which the trace cannot follow; t2n llm does not export it")
    odd = sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()
                  if p.is_floating_point() and p.dtype != torch.float32})
    if odd:
        raise UsageError(f"{type(model).__name__} holds {', '.join(odd)} parameters; t2n llm "
                         "exports float32 models (use model.float(); --weights f16 stores "
                         "the weights as float16)")


def io_names(n_layers: int) -> tuple[list[str], list[str]]:
    ins, outs = ["input_ids"], ["logits"]
    for i in range(n_layers):
        ins += [f"past_key_{i}", f"past_value_{i}"]
        outs += [f"present_key_{i}", f"present_value_{i}"]
    return ins, outs


def _properties(model, layers, states: StepStates, vocab: int, weights: str,
                all_logits: bool, kv_cache: str = "concat") -> dict:
    inplace = kv_cache == "inplace"  # keys and values live in tract's State
    ins, outs = states.io_names(inplace)
    cfg = model.config
    props = {
        "t2n.llm.format": 1,
        "t2n.llm.model_type": str(getattr(cfg, "model_type", "") or "unknown"),
        "t2n.llm.layers": len(layers),  # attention layers (keys and values)
        "t2n.llm.vocab_size": vocab,
        "t2n.llm.inputs": ins,
        "t2n.llm.outputs": outs,
        "t2n.llm.cache_layout": "batch,kv_heads,positions,head_dim",
        "t2n.llm.weights": weights,
        "t2n.llm.logits": "all" if all_logits else "last",
        "t2n.llm.kv_cache": kv_cache,
        **states.properties(inplace),
    }
    if layers:  # a state-space model (Mamba) has no attention layer
        props.update({"t2n.llm.kv_heads": [c.heads for c in layers],
                      "t2n.llm.head_dim": [c.head_dim for c in layers],
                      "t2n.llm.value_heads": [c.value_heads for c in layers],
                      "t2n.llm.value_head_dim": [c.value_head_dim for c in layers],
                      "t2n.llm.sliding_window": [c.sliding_window for c in layers]})
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = getattr(cfg, "eos_token_id", None)
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    eos = [t for t in eos if isinstance(t, int) and 0 <= t < vocab]
    if eos:
        props["t2n.llm.eos_token_id"] = eos
    if _max_positions(model):
        props["t2n.llm.max_positions"] = _max_positions(model)
    bos = getattr(cfg, "bos_token_id", None)
    if isinstance(bos, int) and 0 <= bos < vocab:
        props["t2n.llm.bos_token_id"] = bos
    return props


def _example(layers, vocab: int):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, _EXAMPLE_S), generator=g)
    past = []
    for c in layers:
        past.append(torch.randn(1, c.heads, _EXAMPLE_P, c.head_dim, generator=g))
        past.append(torch.randn(1, c.value_heads, _EXAMPLE_P, c.value_head_dim, generator=g))
    return (ids, *past)


def default_prompt(vocab: int, length: int = PROMPT_LENGTH) -> list[int]:
    """A fixed prompt of token ids spread over the vocabulary (no tokenizer needed)."""
    return [(7919 * i + 13) % vocab for i in range(1, length + 1)]


# ---------------------------------------------------------------------------- export
def export_llm(model, f, *, weights: str = "f32", check: bool = False,
               max_new_tokens: int = DEFAULT_NEW_TOKENS, prompt=None, quiet: bool = False,
               progress=None, timeout: float | None = 1800,
               keep_failed: str | None = None, all_logits: bool = False,
               kv_cache: str = "concat", image_encoder=None) -> LLMExportResult:
    """Export a causal LM (an ``nn.Module``, a ``save_pretrained`` directory or
    ``module:callable``) to ``f`` as one archive for prefill and decoding.

    ``weights`` is passed to :func:`t2n.export` (``"f32"`` keeps the model's floats).
    ``check=True`` generates ``max_new_tokens`` tokens greedily from ``prompt`` (default:
    :func:`default_prompt`) in tract and raises :class:`CheckFailedError` unless they are
    exactly transformers' ``generate(do_sample=False)`` tokens; the archive then does not
    reach ``f`` (``keep_failed=PATH`` moves it there instead, for inspection).
    ``all_logits=True`` returns the logits of every position (``[1, S, V]``, for scoring a
    text) instead of the last one's (``[1, 1, V]``, all that decoding reads).
    ``kv_cache="inplace"`` keeps the keys and values inside tract's run state
    (``tract_transformers_dyn_kv_cache``): the archive takes ``input_ids`` (and the
    fixed-size states of hybrid families) and returns ``logits`` (and those states); one
    ``tract.State`` per sequence (``runnable.spawn_state()``), a new state for a new prompt.
    ``"concat"`` (default) takes and returns the cache tensors.
    A vision-language model (SmolVLM, Idefics3) also writes its image encoder to
    ``image_encoder`` (default: ``f``'s name with ``.vision`` before the suffix), and its
    step takes ``image_features`` after the ids (:mod:`t2n.llm_vision`); the check then
    generates from a prompt with images."""
    from contextlib import ExitStack

    from t2n.api import export
    from t2n.llm_vision import encoder_path, image_text_step, vision_plan
    from t2n.write.weight_formats import get_format

    weights = get_format(weights).name
    if kv_cache not in KV_CACHES:
        raise UsageError(f"kv_cache must be one of {', '.join(KV_CACHES)}, not {kv_cache!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
            or max_new_tokens < 1:
        raise UsageError(f"max_new_tokens must be an integer >= 1, not {max_new_tokens!r}")
    if not isinstance(f, (str, os.PathLike)):
        raise UsageError("f must be a path")
    f = os.fspath(f)
    check_destination(f, keep_failed)  # before loading: never a user's file (output_paths)
    model = load_causal_lm(model)
    if not isinstance(model, torch.nn.Module):
        raise ModelLoadError(f"MODEL gave a {type(model).__name__}, not an nn.Module")
    # a peft model: its base model with the LoRA adapters merged into copies of the weights
    # (t2n.llm_lora); the check's f32 reference stays the user's model
    user_model, (model, n_lora) = model, merged_lora_view(model)
    layers, states = step_layout(model)
    vision = vision_plan(model)  # None: a text-only model
    if vision is not None:
        image_encoder = os.fspath(image_encoder or encoder_path(f))
        if os.path.abspath(image_encoder) == os.path.abspath(f):
            raise UsageError(f"image_encoder {image_encoder} is the decoder's path")
        check_destination(image_encoder)
    elif image_encoder is not None:
        raise UsageError(f"image_encoder: {type(model).__name__} has no image encoder")
    if kv_cache == "inplace" and not layers:
        raise UsageError(f"kv_cache='inplace': {type(model).__name__} has no key/value cache "
                         "to keep in tract's State (its fixed-size states are step "
                         "inputs/outputs); export it with kv_cache='concat'")
    _refuse_what_the_trace_cannot_follow(model)
    vocab = _vocab_size(model)
    limit = _max_positions(model)
    if prompt is not None:
        prompt = [int(t) for t in prompt]
        if not prompt or any(t < 0 or t >= vocab for t in prompt):
            raise UsageError(f"prompt must be a non-empty list of token ids in [0, {vocab})")
    if vision is not None:
        prompt = prompt or vision.default_prompt(default_prompt(vocab))
        images = vision.images_for(prompt)
    if check and limit and len(prompt or default_prompt(vocab)) + max_new_tokens > limit:
        raise UsageError(f"the check's prompt and {max_new_tokens} new tokens exceed the "
                         f"model's {limit} positions (max_position_embeddings)")
    g = torch.Generator().manual_seed(0)
    args = (torch.randint(0, vocab, (1, _EXAMPLE_S), generator=g),
            *states.example(g, _EXAMPLE_P))
    ins, outs = states.io_names()
    dyn = states.dynamic_axes()  # the prompt runs with P = 0
    props = _properties(model, layers, states, vocab, weights, all_logits, kv_cache)
    step_class, extra = CausalLMStep, {}
    if vision is not None:  # image_features [M, E] after the ids
        args, ins, dyn = vision.decoder_io(args, ins, dyn, g)
        props = vision.properties(props)
        step_class = image_text_step(CausalLMStep)
        extra = {"image_token_id": vision.image_token_id}
    # the archive reaches f only when the token check passes (t2n.write.staging)
    # experts as dense products, on a view of the model (t2n.llm_experts); model unchanged
    traced, n_experts = dense_experts_view(model)
    with ExitStack() as stack:
        # the image encoder's archive moves into place after the decoder's, both only
        # when the check passes
        encoder_work = None if vision is None else stack.enter_context(staged(
            image_encoder, keep_failed and encoder_path(keep_failed)))
        work = stack.enter_context(staged(f, keep_failed))
        step = step_class(traced, states.n_layers, all_logits=all_logits, states=states,
                          **extra)
        with warnings.catch_warnings():
            # transformers' notices about its own API (deprecated attributes read while tracing)
            warnings.simplefilter("ignore", FutureWarning)
            result = export(step, args, work, input_names=ins, output_names=outs, dynamic_axes=dyn,
                            properties=props, quiet=quiet, progress=progress, weights=weights,
                            # the kernels' substitutes and the layer hooks are the trace's
                            capture="trace",
                            **states.cache_option(kv_cache))
            encoder = None if vision is None else vision.export_encoder(
                traced, encoder_work, weights, quiet, progress)
        result.path = f  # where it will be; its tokens are generated from work
        # transformers compares sizes in Python per layer (q_length > 1, ...): one line each
        result.warnings = list(dict.fromkeys(result.warnings))
        if encoder is not None:
            encoder.path = image_encoder
            encoder.warnings = list(dict.fromkeys(encoder.warnings))
        res = LLMExportResult(result, layers, vocab, weights, n_experts, n_lora,
                              kv_cache=kv_cache, states=states, image_encoder=encoder)
        if check:
            res.prompt = prompt or default_prompt(vocab)
            pixels = {} if vision is None or images is None else {"pixel_values": images}
            if weights == "f32":
                res.reference_tokens = reference_tokens(user_model, res.prompt, max_new_tokens,
                                                        **pixels)
            else:  # the reference computes with the weights the archive stores
                rounded = own_experts(result.rounded_model().model)
                if vision is not None:
                    rounded = vision.with_rounded_encoder(rounded, encoder.rounded_model())
                res.reference_tokens = reference_tokens(rounded, res.prompt, max_new_tokens,
                                                        **pixels)
                del rounded
                res.generation["original_tokens"] = reference_tokens(
                    user_model, res.prompt, max_new_tokens, **pixels)
            res.generation.update(generate_in_tract(
                work, res.prompt, max_new_tokens, timeout=timeout,
                image_encoder=encoder_work if pixels else None,
                pixel_values=pixels.get("pixel_values")))
            res.tract_tokens = res.generation["tokens"]
            if not res.passed:
                raise CheckFailedError("tract's greedy tokens differ from transformers' generate:\n"
                                       f"  transformers: {res.reference_tokens}\n"
                                       f"  tract:        {res.tract_tokens}", report=res)
    return res


def _max_positions(model) -> int | None:
    cfg = model.config
    # a vision-language model's positions are its text decoder's
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    n = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    return n if isinstance(n, int) and n > 0 else None


def _vocab_size(model) -> int:
    emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    n = getattr(emb, "out_features", None) or getattr(model.config, "vocab_size", None)
    if not isinstance(n, int) or n < 1:
        raise UsageError(f"cannot tell the vocabulary size of {type(model).__name__}")
    return n


def reference_tokens(model, prompt: list[int], n: int, pixel_values=None) -> list[int]:
    """transformers' greedy ``generate``: ``n`` new tokens, no stop token, no processors
    (``pixel_values [N, C, H, W]``: the images of a vision-language model's prompt)."""
    transformers = _transformers()
    ids = torch.tensor([prompt], dtype=torch.long)
    images = {} if pixel_values is None else {"pixel_values": pixel_values.unsqueeze(0)}
    # generate() fills what a given config leaves unset from model.generation_config (its
    # stop tokens, repetition penalty, ...): swap in a plain one for the call
    # a peft model generates through its base model, which reads the generation config
    holder = model.get_base_model() if callable(getattr(model, "get_base_model", None)) \
        else model
    saved = getattr(holder, "generation_config", None)
    try:
        holder.generation_config = transformers.GenerationConfig()
        with eval_mode(model), torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 do_sample=False, num_beams=1, max_new_tokens=n,
                                 eos_token_id=None, pad_token_id=0, **images)
    except T2NError:
        raise
    except Exception as e:
        raise UsageError(f"transformers' generate failed on {type(model).__name__}: "
                         f"{type(e).__name__}: {str(e).strip().splitlines()[0]}") from None
    finally:
        holder.generation_config = saved
    if out.shape[1] != len(prompt) + n:
        raise UsageError(f"transformers' generate stopped after {out.shape[1] - len(prompt)} "
                         f"of {n} tokens")
    return [int(t) for t in out[0, len(prompt):]]


def generate_in_tract(archive: str, prompt: list[int], n: int,
                      timeout: float | None = 1800, image_encoder: str | None = None,
                      pixel_values=None) -> dict:
    """:func:`t2n.llm_generate.generate` in a child process (a tract panic fails the check,
    not the caller); with ``image_encoder``, the prompt's images ``pixel_values`` are
    encoded by that archive first."""
    import tempfile

    import numpy as np

    from t2n.check.child import run_child, summarise

    with tempfile.TemporaryDirectory(prefix="t2n-llm-") as d:
        argv = [os.path.abspath(archive), ",".join(map(str, prompt)), str(n)]
        if image_encoder is not None:
            np.save(os.path.join(d, "pixels.npy"), pixel_values.numpy())
            argv += [os.path.abspath(image_encoder), os.path.join(d, "pixels.npy")]
        run = run_child("t2n.llm_generate", argv, workdir=d, timeout=timeout)
    if not run.ok:
        raise TractError(f"tract could not generate with {archive}: " + (
            f"tract {run.crash_text()}" if run.crashed else summarise(run.stderr)),
            crashed=run.crashed)
    out = json.loads(run.stdout.strip().splitlines()[-1])
    out["child_seconds"] = run.seconds
    return out
