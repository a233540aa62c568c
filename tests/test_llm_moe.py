"""``t2n llm`` on the mixture-of-experts decoders users ship (Mixtral, Qwen3-MoE, OLMoE,
GPT-OSS, DeepSeek-V3) and on a LoRA model of ``peft``: small configs, random weights (no
download), exported as one archive for prefill and decoding, and checked by generating
greedily in tract against transformers' ``generate(do_sample=False)``; with ``q4_0`` against
the model holding the same rounded weights.

The experts are exported in the dense form of :mod:`t2n.llm_experts` (every expert computed,
each weighted by the family's own top-k routing); 4 experts with 2 per token, so the tokens
depend on the routing. ``initializer_range=0.3`` keeps the greedy tokens varied.
"""

import json
import tarfile
import warnings

import pytest
import torch

import transformers as T
from t2n import llm
from t2n.cli import main as cli_main
from t2n.llm_experts import dense_experts_forward

pytestmark = pytest.mark.slow

_COMMON = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.3)
_EXPERTS = dict(num_experts_per_tok=2)


def _families():
    return {
        "mixtral": lambda: T.MixtralForCausalLM(T.MixtralConfig(
            **_COMMON, **_EXPERTS, intermediate_size=64, num_local_experts=4)),
        "qwen3_moe": lambda: T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(
            **_COMMON, **_EXPERTS, head_dim=8, num_experts=4, moe_intermediate_size=32,
            norm_topk_prob=True)),
        "olmoe": lambda: T.OlmoeForCausalLM(T.OlmoeConfig(
            **_COMMON, **_EXPERTS, intermediate_size=64, num_experts=4)),
        "gpt_oss": lambda: T.GptOssForCausalLM(T.GptOssConfig(  # biases, clamped SwiGLU
            **_COMMON, **_EXPERTS, head_dim=8, intermediate_size=64, num_local_experts=4,
            sliding_window=4)),
        # multi-head latent attention (a cache of latents), grouped routing, shared expert,
        # a dense first layer
        "deepseek_v3": lambda: T.DeepseekV3ForCausalLM(T.DeepseekV3Config(
            **dict(_COMMON, num_key_value_heads=4), **_EXPERTS, intermediate_size=64,
            n_routed_experts=4, moe_intermediate_size=32, n_group=2, topk_group=1,
            first_k_dense_replace=1, q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=4,
            qk_nope_head_dim=4, v_head_dim=8)),
    }


_MOE_LAYERS = {"mixtral": 2, "qwen3_moe": 2, "olmoe": 2, "gpt_oss": 2, "deepseek_v3": 1}


def _model(name):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _families()[name]().eval()


def _cli(*argv):
    with pytest.raises(SystemExit) as e:
        cli_main(list(map(str, argv)))
    return e.value.code


@pytest.mark.parametrize("weights", ["f32", "q4_0"])
@pytest.mark.parametrize("family", list(_MOE_LAYERS))
def test_moe_family_generates_like_transformers(family, weights, tmp_path):
    model = _model(family)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    res = llm.export_llm(model, tmp_path / "m.nnef.tar", weights=weights, check=True,
                         quiet=True)
    assert res.passed and res.tract_tokens == res.reference_tokens
    assert len(res.tract_tokens) == 16
    assert res.dense_experts == _MOE_LAYERS[family]
    if weights == "f32":
        assert len(set(res.tract_tokens)) > 3, "a model repeating one token proves little"
    else:  # the reference is the rounded model: the rounding shows in the tokens
        assert res.generation["original_tokens"] != res.tract_tokens
    # the user's model is left as it was: its experts run transformers' own implementation
    assert model.config._experts_implementation == "grouped_mm"
    assert all("forward" not in m.__dict__ for m in model.modules())
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def _experts_modules():
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts
    from transformers.models.muse_spark.modeling_muse_spark import MuseSparkExperts
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHExperts

    return {  # every layout use_experts_implementation declares
        "gated": lambda: MixtralExperts(T.MixtralConfig(
            hidden_size=32, intermediate_size=48, num_local_experts=4)),
        "transposed_biased": lambda: GptOssExperts(T.GptOssConfig(
            hidden_size=32, intermediate_size=48, num_local_experts=4)),
        "post_expert_norm": lambda: MuseSparkExperts(T.MuseSparkTextConfig(
            hidden_size=32, num_attention_heads=4, num_key_value_heads=2, moe_hidden_size=32,
            moe_intermediate_size=48, num_local_experts=4)),
        "ungated": lambda: NemotronHExperts(T.NemotronHConfig(
            hidden_size=32, moe_intermediate_size=48, n_routed_experts=4)),
    }


@pytest.mark.parametrize("layout", ["gated", "transposed_biased", "post_expert_norm", "ungated"])
def test_dense_experts_compute_transformers_experts(layout):
    """The dense form against the experts module's own forward (transformers' loop over the
    experts hit), each token routed to 2 of 4 experts with random weights; an expert whose
    activations overflow changes nothing where no token uses it."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        experts = _experts_modules()[layout]()
    with torch.no_grad():
        for p in experts.parameters():
            p.normal_(0, 0.3)
    x = torch.randn(7, 32)
    index = torch.stack([torch.randperm(4)[:2] for _ in range(7)])
    weights = torch.rand(7, 2)
    with torch.no_grad():
        want = experts(x, index, weights)
        got = dense_experts_forward(experts, x, index, weights)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        index = torch.where(index == 3, (index.flip(1) + 1) % 3, index)  # expert 3 unused
        want = experts(x, index, weights)
        up = experts.gate_up_proj if hasattr(experts, "gate_up_proj") else experts.up_proj
        up[3] = 1e30  # its activations overflow to inf / NaN
        got = dense_experts_forward(experts, x, index, weights)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_cli_reports_dense_experts_and_latent_cache(tmp_path, capsys):
    """DeepSeek-V3 caches its compressed latents as keys ([1, 1, P, kv_lora_rank]) and the
    rotary part of the keys as values ([1, 1, P, qk_rope_head_dim]): the archive's layout
    gives both sizes."""
    d = tmp_path / "ds"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _model("deepseek_v3").save_pretrained(d)
    out = tmp_path / "ds.nnef.tar"
    assert _cli("llm", d, "-o", out, "--check", "--max-length", 6, "--json") == 0
    res = json.loads(capsys.readouterr().out)
    lm = res["llm"]
    assert lm["passed"] and lm["dense_experts"] == 1
    assert [(c["heads"], c["head_dim"], c["value_heads"], c["value_head_dim"])
            for c in lm["layers"]] == [(1, 16, 1, 4)] * 2
    assert [i["shape"] for i in res["inputs"][1:3]] == [[1, 1, "P", 16], [1, 1, "P", 4]]
    with tarfile.open(out) as t:
        text = t.extractfile("graph.nnef").read().decode()
    assert '("t2n.llm.value_head_dim", [4, 4])' in text
