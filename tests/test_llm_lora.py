"""``t2n llm`` on a ``peft`` LoRA model: the adapters are merged into copies of the base
weights at export (t2n.llm_lora), the archive generates the PeftModel's tokens in tract
(with q4_0: those of the merged model with the same rounded weights), and neither the
PeftModel nor its base weights change."""

import tarfile
import warnings

import peft
import pytest
import torch

import transformers as T
from t2n import llm
from t2n.errors import UsageError

pytestmark = pytest.mark.slow

_CONFIG = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128,
               initializer_range=0.3)


def _peft_model(**lora):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = T.LlamaForCausalLM(T.LlamaConfig(**_CONFIG))
        model = peft.get_peft_model(base, peft.LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.1, **lora))
    with torch.no_grad():  # peft starts B at zero (no change); random non-zero adapters
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.5)
    return model.eval()


@pytest.mark.parametrize("weights", ["f32", "q4_0"])
def test_lora_merged_at_export_generates_like_the_peft_model(weights, tmp_path):
    model = _peft_model()
    prompt = llm.default_prompt(128)
    with model.disable_adapter():
        without = llm.reference_tokens(model, prompt, 16)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    res = llm.export_llm(model, tmp_path / "m.nnef.tar", weights=weights, check=True,
                         quiet=True)
    assert res.passed and res.tract_tokens == res.reference_tokens
    assert res.merged_lora == 4  # q and v projections of 2 layers
    peft_tokens = llm.reference_tokens(model, prompt, 16)
    assert peft_tokens != without, "the adapters must change the tokens for the test to prove"
    if weights == "f32":
        assert res.tract_tokens == peft_tokens
    else:
        assert res.generation["original_tokens"] == peft_tokens
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k])
                                                 for k in before)
    assert not any(m.merged for m in model.modules() if hasattr(m, "merged_adapters"))
    with tarfile.open(tmp_path / "m.nnef.tar") as t:  # the base graph, merged weights
        files = t.getnames()
    assert "model.model.layers.0.self_attn.q_proj.weight.dat" in files
    assert not [f for f in files if "lora" in f]


def test_lora_on_conv1d_and_embedding(tmp_path):
    """GPT-2: LoRA on its Conv1D projections (fan_in_fan_out) and on the token embedding,
    rsLoRA scaling: peft's own deltas, merged, generate the PeftModel's tokens."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = T.GPT2LMHeadModel(T.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4,
                                              n_positions=128, initializer_range=0.3))
        model = peft.get_peft_model(base, peft.LoraConfig(
            r=4, lora_alpha=8, target_modules=["c_attn", "wte"], fan_in_fan_out=True,
            use_rslora=True))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.5)
    model.eval()
    # the base model peft adapted in place, given instead of the PeftModel: merged as well
    res = llm.export_llm(base, tmp_path / "m.nnef.tar", check=True, quiet=True)
    assert res.passed and res.merged_lora == 3
    with model.disable_adapter():
        assert llm.reference_tokens(model, llm.default_prompt(128), 16) != res.tract_tokens


def test_lora_variants_are_refused(tmp_path):
    with pytest.raises(UsageError, match="LoRA variant DoraLinearVariant"):
        llm.export_llm(_peft_model(use_dora=True), tmp_path / "m.nnef.tar", quiet=True)
    assert not list(tmp_path.iterdir())


def test_lora_on_a_hybrid_moe_with_the_cache_in_the_state(tmp_path):
    """The three forms at once on Jamba (Mamba + attention + experts): LoRA merged into
    copies, experts dense, the selective scan substituted, keys and values in tract's State;
    the archive generates the PeftModel's tokens and the PeftModel is left as it was (no
    weight changed, no hook left on its modules)."""
    from fixtures.hybrid_llms import make

    torch.manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = peft.get_peft_model(make("jamba"), peft.LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    res = llm.export_llm(model, tmp_path / "m.nnef.tar", kv_cache="inplace", check=True,
                         quiet=True)
    assert res.passed and res.tract_tokens == res.reference_tokens
    assert len(set(res.tract_tokens)) > 3, "a model repeating one token proves little"
    assert res.merged_lora == 2 and res.dense_experts == 1
    assert [i.name for i in res.export.inputs] == ["input_ids", "past_conv_0",
                                                   "past_recurrent_0"]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not any(m._forward_pre_hooks for m in model.modules())
