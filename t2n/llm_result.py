"""What ``t2n llm`` returns: the layout of the exported step and, after a check, the tokens
of both sides (:class:`LLMExportResult`), with its report and its JSON form."""

from __future__ import annotations

from dataclasses import dataclass, field

from t2n.llm_state import StepStates


@dataclass
class CacheLayer:
    """One attention layer's cache: ``[1, heads, P, head_dim]`` keys and
    ``[1, value_heads, P, value_head_dim]`` values (the same sizes but in multi-head latent
    attention, DeepSeek's, whose "keys" are the compressed latents and "values" the rotary
    part of the keys)."""

    heads: int
    head_dim: int
    sliding_window: int  # 0: the layer attends to the whole past
    value_heads: int = 0  # 0: as the keys
    value_head_dim: int = 0

    def __post_init__(self):
        self.value_heads = self.value_heads or self.heads
        self.value_head_dim = self.value_head_dim or self.head_dim


@dataclass
class LLMExportResult:
    """An exported language model: the export's result, the cache layout and, after a
    check, the tokens of both sides and tract's generation speed."""

    export: object  # t2n.ExportResult
    layers: list[CacheLayer]
    vocab_size: int
    weights: str
    dense_experts: int = 0  # experts modules exported in the dense form (t2n.llm_experts)
    merged_lora: int = 0  # peft LoRA layers merged into their base weights (t2n.llm_lora)
    prompt: list[int] | None = None
    reference_tokens: list[int] | None = None
    tract_tokens: list[int] | None = None
    generation: dict = field(default_factory=dict)
    kv_cache: str = "concat"  # "inplace": keys and values are kept in tract's State
    states: StepStates | None = None  # every state the step carries (t2n.llm_state)
    image_encoder: object = None  # a vision-language model's second archive (ExportResult)

    @property
    def path(self) -> str:
        return self.export.path

    @property
    def passed(self) -> bool | None:
        if self.reference_tokens is None:
            return None
        return self.reference_tokens == self.tract_tokens

    def _layout_line(self) -> str:
        heads = sorted({(c.heads, c.head_dim) for c in self.layers})
        values = sorted({(c.value_heads, c.value_head_dim) for c in self.layers} - set(heads))
        windows = sorted({c.sliding_window for c in self.layers if c.sliding_window})
        fixed = [s for s in (self.states.specs if self.states else []) if not s.grows]
        return "  language model: " + (
            f"{len(self.layers)} attention layers, cache [1, H_kv, P, D] with "
            + ", ".join(f"H_kv={h} D={d}" for h, d in heads)
            + ("" if not values else " (values: " + ", ".join(
                f"H={h} D={d}" for h, d in values) + ")")
            + (f", sliding window {', '.join(map(str, windows))}" if windows else "")
            if self.layers else "no attention layer") \
            + (f"; {len(fixed)} fixed-size states ("
               + ", ".join(sorted({f"{s.kind} {list(s.shape)}" for s in fixed})) + ")"
               if fixed else "") \
            + f", vocabulary {self.vocab_size}, weights {self.weights}" \
            + (", keys and values kept in tract's State (--kv-cache inplace)"
               if self.kv_cache == "inplace" else "")

    def report(self) -> str:
        lines = self.export.report().splitlines()
        lines.append(self._layout_line())
        if self.image_encoder is not None:
            lines.append("  image encoder (pixel_values -> image_features, the decoder's "
                         "input after input_ids):")
            lines += ["  " + ln for ln in self.image_encoder.report().splitlines()]
        if self.merged_lora:
            lines.append(f"  LoRA: {self.merged_lora} adapted layers merged into their base "
                         "weights (copies; the model is unchanged)")
        if self.dense_experts:
            lines.append(f"  mixture of experts: {self.dense_experts} experts layers computed "
                         "densely (every expert, weighted by the routing: E/k times the "
                         "active products)")
        if self.reference_tokens is not None:
            g = self.generation
            lines.append(f"  generation check ({len(self.reference_tokens)} new tokens, greedy, "
                         f"prompt of {len(self.prompt)}): "
                         + ("PASSED" if self.passed else "FAILED"))
            lines.append(f"    transformers: {self.reference_tokens}")
            lines.append(f"    tract:        {self.tract_tokens}")
            if g.get("original_tokens") is not None:
                same = sum(a == b for a, b in zip(g["original_tokens"], self.tract_tokens))
                lines.append(f"    (the {self.weights} weights' cost: the original float32 "
                             f"model generates {g['original_tokens']}, {same} of "
                             f"{len(self.tract_tokens)} tokens the same)")
            if self.passed and any(w.startswith("tracer:") for w in self.export.warnings):
                lines.append("    (the tracer warnings above are transformers comparing sizes in "
                             "Python; this check ran the archive at P = 0, S > 1 and at S = 1, "
                             "P > 0)")
            if self.passed and g.get("images") and self.image_encoder is not None \
                    and any(w.startswith("tracer:") for w in self.image_encoder.warnings):
                lines.append("    (the image encoder's tracer warnings are sizes that the "
                             "image size fixes: patch grid, pixel shuffle; the check encoded "
                             f"{g['images']} images in tract, the trace another number)")
            if g.get("encode_seconds") is not None:
                lines.append(f"    tract image encoder: {g['images']} images in "
                             f"{g['encode_seconds'] * 1000:.1f} ms")
            if g.get("decode_tokens_per_second"):
                lines.append(f"    tract decode {g['decode_tokens_per_second']:.1f} tokens/s, "
                             f"prefill {g['prefill_seconds'] * 1000:.1f} ms, "
                             f"load+optimise {g['load_seconds']:.2f} s")
        return "\n".join(lines)

    def llm_dict(self) -> dict:
        """The language-model part of the result as plain JSON data."""
        from t2n.jsonreport import result_dict

        return {"layers": [dict(c.__dict__) for c in self.layers], "vocab_size": self.vocab_size,
                "states": [{"name": s.input_name, "kind": s.kind, "shape": list(s.shape)}
                           for s in (self.states.specs if self.states else [])],
                "weights": self.weights, "dense_experts": self.dense_experts,
                "merged_lora": self.merged_lora, "kv_cache": self.kv_cache,
                "prompt": self.prompt,
                "reference_tokens": self.reference_tokens, "tract_tokens": self.tract_tokens,
                "passed": self.passed, "generation": self.generation,
                "image_encoder": None if self.image_encoder is None
                else result_dict(self.image_encoder)}
