"""``t2n llm`` on DBRX: its experts (``DbrxExperts``, outside transformers'
``use_experts_implementation`` switch) loop in Python over the experts the routing hit, which
plain ``t2n export`` refuses; ``t2n llm`` computes them densely on a view of the model
(:mod:`t2n.llm_experts_dbrx`), the router (softmax, top-k, p-norm) running as transformers
wrote it. Small config (4 experts, 2 per token, clipped q/k/v, 2 layers), random weights, no
download; greedy generation in tract equals transformers' (f32; q4_0 against the rounded
model, every expert weight stored as q4_0, with a p = 2 norm of the routing weights and GELU
experts).
"""

import warnings

import pytest
import torch

import transformers as T
from t2n import llm
from t2n.archive_info import inspect_archive
from t2n.errors import UnsupportedOperatorsError
from t2n.llm_experts_dbrx import dbrx_dense_experts_forward

pytestmark = pytest.mark.slow


def _config(top_k=2, norm=1.0, act="silu", experts=4):
    # transformers 5.24's DbrxAttention reads attn_config.rope_theta, which the attention
    # config does not declare: it is given here
    return T.DbrxConfig(
        d_model=32, n_heads=4, n_layers=2, max_seq_len=64, vocab_size=128,
        initializer_range=0.3,
        attn_config=dict(kv_n_heads=2, clip_qkv=8.0, rope_theta=10000.0),
        ffn_config=dict(ffn_hidden_size=32, moe_num_experts=experts, moe_top_k=top_k,
                        moe_normalize_expert_weights=norm, ffn_act_fn={"name": act}))


def _model(**options):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return T.DbrxForCausalLM(_config(**options)).eval()


@pytest.mark.parametrize("weights, options", [
    ("f32", {}),  # p = 1 renormalisation of the top 2 (DBRX's default), SiLU
    ("q4_0", dict(norm=2.0, act="gelu")),
], ids=["f32", "q4_0-p2-gelu"])
def test_dbrx_generates_like_transformers(weights, options, tmp_path):
    model = _model(**options)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    res = llm.export_llm(model, tmp_path / "m.nnef.tar", weights=weights, check=True,
                         quiet=True)
    assert res.passed and res.tract_tokens == res.reference_tokens
    assert len(res.tract_tokens) == 16 and res.dense_experts == 2
    stored = {w.label.rsplit(".", 1)[-1]: w.format
              for w in inspect_archive(str(tmp_path / "m.nnef.tar"), macs=False).weights
              if ".experts.mlp." in w.label}
    if weights == "f32":
        assert len(set(res.tract_tokens)) > 3, "a model repeating one token proves little"
        assert stored == {"w1": "f32", "v1": "f32", "w2": "f32"}
    else:  # the reference is the rounded model: the rounding shows in the tokens
        assert res.generation["original_tokens"] != res.tract_tokens
        assert stored == {"w1": "q4_0", "v1": "q4_0", "w2": "q4_0"}
    # the user's model is left as it was: its experts run transformers' own loop
    assert all("forward" not in m.__dict__ for m in model.modules())
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("top_k, norm", [(2, 1.0), (3, 2.0), (1, None)])
def test_dense_dbrx_experts_compute_transformers_experts(top_k, norm):
    """The dense form against ``DbrxExperts.forward`` (transformers' loop over the experts
    hit) behind DBRX's own router, 5 experts; an expert whose activations overflow changes
    nothing where no token uses it."""
    model = _model(top_k=top_k, norm=norm, experts=5)
    ffn = model.transformer.blocks[0].ffn
    x = torch.randn(1, 7, 32)
    with torch.no_grad():
        weights, index = ffn.route_tokens_to_experts(ffn.router(x))
        want = ffn.experts(x, index, weights)
        got = dbrx_dense_experts_forward(ffn.experts, x, index, weights)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        unused = int(torch.bincount(index.flatten(), minlength=5).argmin())
        index = torch.where(index == unused, (index.flip(1) if top_k > 1 else index + 1) % 5,
                            index)
        assert not (index == unused).any()
        want = ffn.experts(x, index, weights)
        ffn.experts.mlp.w1[unused * 32:(unused + 1) * 32] = 1e30  # its activations overflow
        got = dbrx_dense_experts_forward(ffn.experts, x, index, weights)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_plain_export_refuses_the_loop_and_points_to_t2n_llm(tmp_path):
    """``t2n export --capture trace`` traces DBRX's loop over the experts hit: refused,
    naming the loop's line in transformers' source and the route that exports it (the
    default capture, torch.export, refuses the data-dependent loop itself)."""
    from t2n import export

    class Logits(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(ids, use_cache=False).logits

    ids = torch.randint(0, 128, (1, 6), generator=torch.Generator().manual_seed(0))
    with pytest.raises(UnsupportedOperatorsError,
                       match=r"(?s)number of rows depends on the data.*`t2n llm`.*"
                             r"modeling_dbrx\.py:\d+"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            export(Logits(_model()), (ids,), tmp_path / "m.nnef.tar", quiet=True,
                   input_names=["ids"], dynamic_axes={"ids": {1: "S"}}, capture="trace")
