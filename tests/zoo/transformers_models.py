"""The transformers half of the model zoo: architectures of ``transformers`` 5.x built from
small configs (random weights, no download) and called as users call them: keyword inputs
(``input_ids``, ``attention_mask``, ``pixel_values``, ``decoder_input_ids`` ...), outputs
as the model returns them (``ModelOutput`` fields, key/value caches).

Configs are narrowed (hidden 32-64, 1-2 layers, vocabulary 256) but never changed in kind:
attention variants, rotary/ALiBi/relative positions, norms, activations, MoE routing and
heads are the library's own. Weights are re-drawn so that every block matters (transformers
initialises with std 0.02 and zero biases, which at these widths leaves attention and MLP
contributions below the check's tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

VOCAB = 256


@dataclass
class TfModel:
    name: str
    family: str
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[int, int], dict]  # (batch, length) -> keyword inputs
    size: tuple = (2, 8)
    dynamic: dict = field(default_factory=dict)  # input -> {axis: symbol}
    more_sizes: tuple = ()  # other (batch, length) checked on the same archive
    rtol: float = 1e-3
    atol: float = 1e-4
    capture: str | None = None  # None: t2n's default (torch.export)


# ---------------------------------------------------------------------------- weights
@torch.no_grad()
def redraw(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Re-draw every floating parameter: norm scales U(0.5, 1.5), shifts and biases
    N(0, 0.1), matrices N(0, 1/fan_in) (each layer keeps its input's scale), other tables
    (tokens, position tables) N(0, 0.5), other vectors (layer scales) U(0.5, 1.5)."""
    gen = torch.Generator().manual_seed(seed)
    for mname, module in model.named_modules():
        is_norm = "norm" in type(module).__name__.lower() or mname.rsplit(".", 1)[-1] in (
            "ln", "ln_1", "ln_2", "ln_f", "layernorm")
        for pname, p in module.named_parameters(recurse=False):
            if not p.dtype.is_floating_point:
                continue
            if is_norm or p.dim() == 1:
                if "bias" in pname or "beta" in pname:
                    new = torch.randn(p.shape, generator=gen) * 0.1
                else:
                    new = torch.rand(p.shape, generator=gen) + 0.5
            elif "weight" in pname or "original" in pname:
                fan_in = max(p[0].numel(), 1)
                new = torch.randn(p.shape, generator=gen) * fan_in ** -0.5
            else:
                new = torch.randn(p.shape, generator=gen) * 0.5
            p.copy_(new.to(p.dtype))
    return model.eval()


def _tf():
    import transformers

    return transformers


def _lm(model_cls: str, config_cls: str, **cfg):
    def build():
        t = _tf()
        torch.manual_seed(0)
        config = getattr(t, config_cls)(**cfg)
        return redraw(getattr(t, model_cls)(config))
    return build


def _with_backbone(model_cls: str, config_cls: str, backbone_cls: str, backbone: dict, **cfg):
    def build():
        t = _tf()
        torch.manual_seed(0)
        config = getattr(t, config_cls)(backbone_config=getattr(t, backbone_cls)(**backbone),
                                         **cfg)
        return redraw(getattr(t, model_cls)(config))
    return build


# ---------------------------------------------------------------------------- inputs
def text(b: int, s: int, gen_seed: int = 0, mask: bool = True) -> dict:
    g = torch.Generator().manual_seed(gen_seed + 31 * b + s)
    out = {"input_ids": torch.randint(0, VOCAB, (b, s), generator=g)}
    if mask:
        m = torch.ones(b, s, dtype=torch.long)
        m[-1, s // 2:] = 0  # the last sequence is padded
        out["attention_mask"] = m
    return out


def text_nomask(b, s):
    return text(b, s, mask=False)


def seq2seq(b, s):
    out = text(b, s)
    g = torch.Generator().manual_seed(7 + s)
    out["decoder_input_ids"] = torch.randint(0, VOCAB, (b, max(s // 2, 1)), generator=g)
    return out


def images(size):
    def make(b, _s):
        g = torch.Generator().manual_seed(b)
        return {"pixel_values": torch.randn(b, 3, size, size, generator=g)}
    return make


def audio(b, n):
    g = torch.Generator().manual_seed(n)
    return {"input_values": torch.randn(b, n, generator=g)}


def spectrogram(b, _s):
    g = torch.Generator().manual_seed(b)
    return {"input_values": torch.randn(b, 32, 16, generator=g)}


def mel(b, _s):
    g = torch.Generator().manual_seed(b)
    return {"input_features": torch.randn(b, 16, 32, generator=g),
            "decoder_input_ids": torch.randint(0, VOCAB, (b, 4), generator=g)}


TEXT_DYN = {"input_ids": {0: "B", 1: "S"}, "attention_mask": {0: "B", 1: "S"}}

# ---------------------------------------------------------------------------- configs
ENC = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
           intermediate_size=64, max_position_embeddings=64)
DEC = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64,
           pad_token_id=0)
MOE = dict(DEC, num_hidden_layers=1)

MODELS = [
    # ---- BERT family (encoders)
    TfModel("bert", "BERT family", _lm("BertModel", "BertConfig", **ENC), text,
            dynamic=TEXT_DYN, more_sizes=((3, 13), (1, 5))),
    TfModel("roberta", "BERT family", _lm("RobertaModel", "RobertaConfig", **ENC,
                                         pad_token_id=1), text),
    TfModel("xlm_roberta", "BERT family",
            _lm("XLMRobertaModel", "XLMRobertaConfig", **ENC, pad_token_id=1), text),
    TfModel("distilbert", "BERT family",
            _lm("DistilBertModel", "DistilBertConfig", vocab_size=VOCAB, dim=32, n_layers=2,
                n_heads=4, hidden_dim=64, max_position_embeddings=64), text),
    TfModel("albert", "BERT family",
            _lm("AlbertModel", "AlbertConfig", **ENC, embedding_size=16), text),
    TfModel("electra", "BERT family",
            _lm("ElectraModel", "ElectraConfig", **ENC, embedding_size=16), text),
    TfModel("deberta_v2", "BERT family",
            _lm("DebertaV2Model", "DebertaV2Config", **ENC, relative_attention=True,
                position_buckets=16, max_relative_positions=32,
                pos_att_type=["p2c", "c2p"]), text),
    TfModel("mpnet", "BERT family", _lm("MPNetModel", "MPNetConfig", **ENC), text),
    TfModel("modernbert", "BERT family",
            _lm("ModernBertModel", "ModernBertConfig", vocab_size=VOCAB, hidden_size=32,
                num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                max_position_embeddings=64, global_attn_every_n_layers=2, local_attention=4,
                pad_token_id=0), text),
    # sliding-window chunks: as_strided on a view. Its Python branches on the attention
    # mask's values (`is_index_global_attn.any().item()`), which torch.export refuses; the
    # trace records the example's branch, which holds for every 0/1 attention mask (no
    # global_attention_mask input: no token is global)
    TfModel("longformer", "BERT family",
            _lm("LongformerModel", "LongformerConfig", **ENC, attention_window=4,
                pad_token_id=1), text, capture="trace"),
    TfModel("funnel", "BERT family",
            _lm("FunnelModel", "FunnelConfig", vocab_size=VOCAB, block_sizes=[1, 1], d_model=32,
                n_head=4, d_head=8, d_inner=64), text),
    # ---- decoder LLMs (ModelOutput: logits + DynamicCache)
    TfModel("gpt2", "decoder LLMs",
            _lm("GPT2LMHeadModel", "GPT2Config", vocab_size=VOCAB, n_embd=32, n_layer=2,
                n_head=4, n_positions=64), text, dynamic=TEXT_DYN,
            more_sizes=((3, 11), (1, 4))),
    TfModel("gpt_neo", "decoder LLMs",
            _lm("GPTNeoForCausalLM", "GPTNeoConfig", vocab_size=VOCAB, hidden_size=32,
                num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
                window_size=4, max_position_embeddings=64), text),
    TfModel("gptj", "decoder LLMs",
            _lm("GPTJForCausalLM", "GPTJConfig", vocab_size=VOCAB, n_embd=32, n_layer=2,
                n_head=4, rotary_dim=4, n_positions=64), text),
    TfModel("gpt_neox", "decoder LLMs",
            _lm("GPTNeoXForCausalLM", "GPTNeoXConfig", **ENC, rotary_pct=0.5), text),
    TfModel("llama", "decoder LLMs", _lm("LlamaForCausalLM", "LlamaConfig", **DEC), text,
            dynamic=TEXT_DYN, more_sizes=((3, 11), (1, 4))),
    TfModel("mistral", "decoder LLMs",
            _lm("MistralForCausalLM", "MistralConfig", **DEC, sliding_window=4), text),
    TfModel("qwen2", "decoder LLMs", _lm("Qwen2ForCausalLM", "Qwen2Config", **DEC), text),
    TfModel("qwen3", "decoder LLMs",
            _lm("Qwen3ForCausalLM", "Qwen3Config", **DEC, head_dim=8), text,
            dynamic=TEXT_DYN, more_sizes=((3, 11), (1, 4))),
    TfModel("phi", "decoder LLMs", _lm("PhiForCausalLM", "PhiConfig", **DEC), text),
    TfModel("phi3", "decoder LLMs", _lm("Phi3ForCausalLM", "Phi3Config", **DEC), text),
    TfModel("gemma", "decoder LLMs",
            _lm("GemmaForCausalLM", "GemmaConfig", **DEC, head_dim=8), text),
    TfModel("gemma2", "decoder LLMs",
            _lm("Gemma2ForCausalLM", "Gemma2Config", **DEC, head_dim=8, sliding_window=4),
            text),
    TfModel("gemma3", "decoder LLMs",
            _lm("Gemma3ForCausalLM", "Gemma3TextConfig", **DEC, head_dim=8,
                sliding_window=4, layer_types=["sliding_attention", "full_attention"]), text),
    TfModel("opt", "decoder LLMs",
            _lm("OPTForCausalLM", "OPTConfig", vocab_size=VOCAB, hidden_size=32,
                num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
                max_position_embeddings=64, word_embed_proj_dim=32, pad_token_id=1), text),
    TfModel("bloom", "decoder LLMs",
            _lm("BloomForCausalLM", "BloomConfig", vocab_size=VOCAB, hidden_size=32, n_layer=2,
                n_head=4), text),
    TfModel("falcon", "decoder LLMs",
            _lm("FalconForCausalLM", "FalconConfig", vocab_size=VOCAB, hidden_size=32,
                num_hidden_layers=2, num_attention_heads=4, num_kv_heads=2,
                new_decoder_architecture=True), text),
    TfModel("stablelm", "decoder LLMs",
            _lm("StableLmForCausalLM", "StableLmConfig", **DEC), text),
    TfModel("olmo", "decoder LLMs", _lm("OlmoForCausalLM", "OlmoConfig", **DEC), text),
    TfModel("olmo2", "decoder LLMs", _lm("Olmo2ForCausalLM", "Olmo2Config", **DEC), text),
    TfModel("cohere", "decoder LLMs", _lm("CohereForCausalLM", "CohereConfig", **DEC), text),
    TfModel("granite", "decoder LLMs", _lm("GraniteForCausalLM", "GraniteConfig", **DEC),
            text),
    TfModel("smollm3", "decoder LLMs", _lm("SmolLM3ForCausalLM", "SmolLM3Config", **DEC),
            text),
    TfModel("gpt_bigcode", "decoder LLMs",
            _lm("GPTBigCodeForCausalLM", "GPTBigCodeConfig", vocab_size=VOCAB, n_embd=32,
                n_layer=2, n_head=4, n_positions=64, multi_query=True), text),
    TfModel("codegen", "decoder LLMs",
            _lm("CodeGenForCausalLM", "CodeGenConfig", vocab_size=VOCAB, n_embd=32, n_layer=2,
                n_head=4, n_positions=64, rotary_dim=4), text),
    TfModel("xglm", "decoder LLMs",
            _lm("XGLMForCausalLM", "XGLMConfig", vocab_size=VOCAB, d_model=32, num_layers=2,
                attention_heads=4, ffn_dim=64, max_position_embeddings=64), text),
    TfModel("nemotron", "decoder LLMs", _lm("NemotronForCausalLM", "NemotronConfig", **DEC),
            text),
    TfModel("glm", "decoder LLMs", _lm("GlmForCausalLM", "GlmConfig", **DEC, head_dim=8),
            text),
    # ---- state-space decoders (cache: per-layer convolution and recurrent states)
    TfModel("mamba", "state-space decoders",
            _lm("MambaForCausalLM", "MambaConfig", vocab_size=VOCAB, hidden_size=32,
                num_hidden_layers=2, state_size=8, expand=2, conv_kernel=4), text_nomask),
    TfModel("jamba", "state-space decoders",  # Mamba + attention + MoE layers
            _lm("JambaForCausalLM", "JambaConfig", **dict(MOE, num_hidden_layers=2),
                num_experts=4, num_experts_per_tok=2, attn_layer_period=2,
                attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1,
                mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, use_mamba_kernels=False),
            text),
    TfModel("mamba2", "state-space decoders",  # pads S to whole chunks by S % chunk_size
            _lm("Mamba2Model", "Mamba2Config", vocab_size=VOCAB, hidden_size=32,
                num_hidden_layers=1, state_size=8, expand=2, conv_kernel=4, num_heads=8,
                head_dim=8, n_groups=1, chunk_size=4), text_nomask, size=(2, 6),
            dynamic={"input_ids": {0: "B", 1: "S"}}, more_sizes=((1, 9), (3, 8))),
    TfModel("qwen3_next", "state-space decoders",  # gated delta net + attention + MoE:
            # 64 x 64 unit-triangular solves per chunk. S stays static: the model loops over
            # its chunks in Python (range(num_chunks)), so a dynamic S is refused
            # (tests/test_dynamic_structure.py)
            _lm("Qwen3NextModel", "Qwen3NextConfig", **dict(MOE, num_hidden_layers=2),
                head_dim=8, linear_conv_kernel_dim=4, linear_key_head_dim=8,
                linear_value_head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
                moe_intermediate_size=32, shared_expert_intermediate_size=32,
                num_experts_per_tok=2, num_experts=4,
                layer_types=["linear_attention", "full_attention"]), text,
            dynamic={"input_ids": {0: "B"}, "attention_mask": {0: "B"}}, more_sizes=((3, 8),)),
    TfModel("recurrent_gemma", "state-space decoders",  # Griffin: RG-LRU and local
            # attention blocks; keeps a bfloat16 buffer (``normalizer``) in a float32 model
            _lm("RecurrentGemmaForCausalLM", "RecurrentGemmaConfig", vocab_size=VOCAB,
                hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=1, head_dim=16, intermediate_size=96, lru_width=64,
                attention_window_size=8, conv1d_width=4,
                block_types=["recurrent", "attention"]), text),
    # ---- mixture-of-experts decoders
    TfModel("mixtral", "mixture-of-experts decoders",
            _lm("MixtralForCausalLM", "MixtralConfig", **MOE, num_local_experts=4,
                num_experts_per_tok=2), text, dynamic=TEXT_DYN,
            more_sizes=((3, 11), (1, 1))),
    TfModel("qwen2_moe", "mixture-of-experts decoders",
            _lm("Qwen2MoeForCausalLM", "Qwen2MoeConfig", **MOE, num_experts=4,
                num_experts_per_tok=2, moe_intermediate_size=32,
                shared_expert_intermediate_size=32), text),
    TfModel("qwen3_moe", "mixture-of-experts decoders",
            _lm("Qwen3MoeForCausalLM", "Qwen3MoeConfig", **MOE, head_dim=8, num_experts=4,
                num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True), text),
    TfModel("olmoe", "mixture-of-experts decoders",
            _lm("OlmoeForCausalLM", "OlmoeConfig", **MOE, num_experts=4,
                num_experts_per_tok=2), text),
    TfModel("granitemoe", "mixture-of-experts decoders",
            _lm("GraniteMoeForCausalLM", "GraniteMoeConfig", **MOE, num_local_experts=4,
                num_experts_per_tok=2), text),
    TfModel("phimoe", "mixture-of-experts decoders",
            _lm("PhimoeForCausalLM", "PhimoeConfig", **MOE, num_local_experts=4,
                num_experts_per_tok=2), text),
    TfModel("gpt_oss", "mixture-of-experts decoders",
            _lm("GptOssForCausalLM", "GptOssConfig", **dict(MOE, head_dim=8),
                num_local_experts=4, num_experts_per_tok=2, sliding_window=4), text),
    TfModel("deepseek_v3", "mixture-of-experts decoders",  # MLA attention, grouped routing
            _lm("DeepseekV3ForCausalLM", "DeepseekV3Config", **dict(MOE, num_key_value_heads=4),
                n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                n_group=2, topk_group=1, first_k_dense_replace=0, q_lora_rank=16,
                kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8), text),
    # ---- vision encoders
    TfModel("vit", "vision encoders",
            _lm("ViTModel", "ViTConfig", hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8),
            images(32), dynamic={"pixel_values": {0: "B"}}, more_sizes=((1, 0), (3, 0))),
    TfModel("deit", "vision encoders",
            _lm("DeiTModel", "DeiTConfig", hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8),
            images(32)),
    TfModel("swin", "vision encoders",
            _lm("SwinModel", "SwinConfig", image_size=32, patch_size=4, embed_dim=16,
                depths=[2, 1], num_heads=[2, 2], window_size=4), images(32)),
    TfModel("swinv2", "vision encoders",
            _lm("Swinv2Model", "Swinv2Config", image_size=32, patch_size=4, embed_dim=16,
                depths=[2, 1], num_heads=[2, 2], window_size=4), images(32)),
    TfModel("beit", "vision encoders",
            _lm("BeitModel", "BeitConfig", hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8,
                use_relative_position_bias=True), images(32)),
    TfModel("convnext", "vision encoders",
            _lm("ConvNextModel", "ConvNextConfig", hidden_sizes=[16, 32], depths=[1, 1],
                num_stages=2), images(32)),
    TfModel("convnextv2", "vision encoders",
            _lm("ConvNextV2Model", "ConvNextV2Config", hidden_sizes=[16, 32], depths=[1, 1],
                num_stages=2), images(32)),
    TfModel("clip_vision", "vision encoders",
            _lm("CLIPVisionModel", "CLIPVisionConfig", hidden_size=32, intermediate_size=64,
                num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8),
            images(32)),
    TfModel("dinov2", "vision encoders",
            _lm("Dinov2Model", "Dinov2Config", hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, mlp_ratio=2, image_size=32, patch_size=8),
            images(32)),
    TfModel("siglip_vision", "vision encoders",
            _lm("SiglipVisionModel", "SiglipVisionConfig", hidden_size=32,
                intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                image_size=32, patch_size=8), images(32)),
    TfModel("segformer", "vision encoders",
            _lm("SegformerModel", "SegformerConfig", num_encoder_blocks=2, depths=[1, 1],
                sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2]), images(32)),
    TfModel("pvt_v2", "vision encoders",
            _lm("PvtV2Model", "PvtV2Config", hidden_sizes=[16, 32], depths=[1, 1],
                num_encoder_blocks=2, num_attention_heads=[1, 2], sr_ratios=[2, 1],
                patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2]), images(32)),
    TfModel("levit", "vision encoders",
            _lm("LevitModel", "LevitConfig", image_size=64, hidden_sizes=[32, 48, 64],
                num_attention_heads=[2, 2, 2], depths=[1, 1, 1], key_dim=[8, 8, 8]),
            images(64)),
    TfModel("hiera", "vision encoders",
            _lm("HieraModel", "HieraConfig", image_size=[64, 64], embed_dim=16,
                num_heads=[1, 2], depths=[1, 1], query_stride=[2, 2], masked_unit_size=[4, 4],
                patch_stride=[4, 4], patch_size=[7, 7], patch_padding=[3, 3],
                embed_dim_multiplier=2.0, num_head_multiplier=2.0, num_query_pool=1),
            images(64)),
    # ---- detection, depth and segmentation heads (backbones built from their own configs)
    TfModel("yolos", "detection heads",
            _lm("YolosForObjectDetection", "YolosConfig", hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, image_size=[64, 64],
                patch_size=16, num_detection_tokens=5, num_labels=3), images(64), size=(1, 0)),
    TfModel("detr", "detection heads",  # ResNet backbone, encoder-decoder, box head
            _with_backbone("DetrForObjectDetection", "DetrConfig", "ResNetConfig",
                           dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                out_features=["stage2"], layer_type="basic"),
                           use_timm_backbone=False, use_pretrained_backbone=False, d_model=32,
                           encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                           num_queries=5, num_labels=3), images(64), size=(1, 0)),
    TfModel("depth_anything", "depth estimation",  # DINOv2 backbone, DPT-style neck
            _with_backbone("DepthAnythingForDepthEstimation", "DepthAnythingConfig",
                           "Dinov2Config",
                           dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                                intermediate_size=64, image_size=56, patch_size=14,
                                out_features=["stage1", "stage2", "stage3", "stage4"],
                                reshape_hidden_states=False),
                           reassemble_hidden_size=32, neck_hidden_sizes=[16, 16, 32, 32],
                           fusion_hidden_size=16, head_hidden_size=16, patch_size=14),
            images(56), size=(1, 0)),
    TfModel("glpn", "depth estimation",
            _lm("GLPNForDepthEstimation", "GLPNConfig", num_encoder_blocks=2, depths=[1, 1],
                sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2], decoder_hidden_size=16,
                max_depth=10, head_in_index=-1), images(64), size=(1, 0)),
    TfModel("upernet", "segmentation",  # ConvNeXt backbone, pyramid pooling + FPN head
            _with_backbone("UperNetForSemanticSegmentation", "UperNetConfig", "ConvNextConfig",
                           dict(hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1],
                                out_features=["stage1", "stage2", "stage3", "stage4"]),
                           hidden_size=16, num_labels=3, use_auxiliary_head=False),
            images(64), size=(1, 0)),
    # ---- audio encoders
    TfModel("wav2vec2", "audio encoders",
            _lm("Wav2Vec2Model", "Wav2Vec2Config", hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16),
                conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=4), audio, size=(2, 400),
            dynamic={"input_values": {0: "B", 1: "N"}}, more_sizes=((1, 273), (3, 999))),
    TfModel("hubert", "audio encoders",
            _lm("HubertModel", "HubertConfig", hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16),
                conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=4), audio, size=(2, 400)),
    TfModel("data2vec_audio", "audio encoders",
            _lm("Data2VecAudioModel", "Data2VecAudioConfig", hidden_size=32,
                num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                num_conv_pos_embeddings=5, num_conv_pos_embedding_groups=4), audio,
            size=(2, 400)),
    TfModel("wavlm", "audio encoders",
            _lm("WavLMModel", "WavLMConfig", hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16),
                conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=4, num_buckets=16, max_bucket_distance=32),
            audio, size=(2, 400)),
    TfModel("ast", "audio encoders",
            _lm("ASTModel", "ASTConfig", hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, num_mel_bins=16, max_length=32,
                patch_size=8, frequency_stride=8, time_stride=8), spectrogram),
    TfModel("whisper", "audio encoders",
            _lm("WhisperModel", "WhisperConfig", vocab_size=VOCAB, num_mel_bins=16,
                encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                d_model=32, max_source_positions=16, max_target_positions=32,
                pad_token_id=0, decoder_start_token_id=1), mel),
    # ---- seq2seq
    TfModel("t5", "seq2seq",
            _lm("T5ForConditionalGeneration", "T5Config", vocab_size=VOCAB, d_model=32,
                d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=4,
                relative_attention_num_buckets=8, relative_attention_max_distance=16,
                decoder_start_token_id=0), seq2seq),
    TfModel("t5_encoder", "seq2seq",
            _lm("T5EncoderModel", "T5Config", vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64,
                num_layers=2, num_heads=4, relative_attention_num_buckets=8,
                relative_attention_max_distance=16), text, dynamic=TEXT_DYN,
            more_sizes=((3, 11), (1, 4))),
    TfModel("bart", "seq2seq",
            _lm("BartForConditionalGeneration", "BartConfig", vocab_size=VOCAB, d_model=32,
                encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                max_position_embeddings=64), seq2seq,
            dynamic=dict(TEXT_DYN, decoder_input_ids={0: "B", 1: "T"}),
            more_sizes=((3, 11), (1, 4))),
    TfModel("mbart", "seq2seq",
            _lm("MBartForConditionalGeneration", "MBartConfig", vocab_size=VOCAB, d_model=32,
                encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                max_position_embeddings=64), seq2seq),
    TfModel("marian", "seq2seq",
            _lm("MarianMTModel", "MarianConfig", vocab_size=VOCAB, d_model=32,
                encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                max_position_embeddings=64, pad_token_id=0, decoder_start_token_id=0),
            seq2seq),
    TfModel("pegasus", "seq2seq",
            _lm("PegasusForConditionalGeneration", "PegasusConfig", vocab_size=VOCAB,
                d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                max_position_embeddings=64, pad_token_id=0, decoder_start_token_id=0),
            seq2seq),
]
