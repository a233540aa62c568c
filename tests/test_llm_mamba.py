"""``t2n llm`` on Mamba alone (no attention layer, so no ``P``): each layer's conv window
and SSM state are the step's only state; one ``tract_core_scan`` per layer. Greedy
generation in tract equals transformers' (f32, and q4_0 against the rounded model)."""

import pytest

from fixtures.hybrid_llms import exported

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("weights", ["f32", "q4_0"])
def test_mamba_generates_like_transformers(weights, tmp_path):
    res, text = exported("mamba", weights, tmp_path / "m.nnef.tar")
    assert res.passed and res.tract_tokens == res.reference_tokens
    assert len(set(res.tract_tokens)) > 3
    assert [i.name for i in res.export.inputs] == [
        "input_ids", "past_conv_0", "past_recurrent_0", "past_conv_1", "past_recurrent_1"]
    assert "t2n.llm.kv_heads" not in text, "no attention layer"
    assert text.count("tract_core_scan(") == 2
