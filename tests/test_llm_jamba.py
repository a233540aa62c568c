"""``t2n llm`` on Jamba (Mamba + attention + mixture of experts). Each Mamba layer's conv
window and SSM state are step inputs/outputs; the selective scan over the tokens is one
``tract_core_scan`` (it continues from the cached state, so the prompt and each decoding
token run the same graph). Greedy generation in
tract equals transformers' (f32, and q4_0 against the rounded model)."""

import pytest

from fixtures.hybrid_llms import exported

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("weights", ["f32", "q4_0"])
def test_jamba_generates_like_transformers(weights, tmp_path):
    res, text = exported("jamba", weights, tmp_path / "m.nnef.tar")
    assert res.passed and res.tract_tokens == res.reference_tokens
    assert len(set(res.tract_tokens)) > 3, "a model repeating one token proves little"
    names = [i.name for i in res.export.inputs]
    assert names == ["input_ids", "past_conv_0", "past_recurrent_0", "past_key_1",
                     "past_value_1"]
    assert [list(i.shape) for i in res.export.inputs][1:3] == [[1, 64, 4], [1, 64, 8]]
    assert text.count("tract_core_scan(") == 1, "one scan for the one Mamba layer"
