"""``t2n llm`` on Mamba 2 (state-space duality layers, chunks of 4 tokens). transformers
computes the prompt by chunks and pads a decoding token to a chunk; the step computes the
same recurrence token by token (one ``tract_core_scan`` per layer, from the cached state),
so the prompt of 8 tokens (two chunks) and each decoding token run one graph. Greedy
generation in tract equals transformers' (f32, and q4_0 against the rounded model)."""

import pytest

from fixtures.hybrid_llms import exported

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("weights", ["f32", "q4_0"])
def test_mamba2_generates_like_transformers(weights, tmp_path):
    res, text = exported("mamba2", weights, tmp_path / "m.nnef.tar")
    assert res.passed and res.tract_tokens == res.reference_tokens
    assert len(set(res.tract_tokens)) > 3, "a model repeating one token proves little"
    assert [i.name for i in res.export.inputs] == [
        "input_ids", "past_conv_0", "past_recurrent_0", "past_conv_1", "past_recurrent_1"]
    # conv over x, B, C (64 + 2 x 8 channels); state [1, 4 heads, 16, 8]
    assert [list(i.shape) for i in res.export.inputs][1:3] == [[1, 80, 4], [1, 4, 16, 8]]
    assert text.count("tract_core_scan(") == 2
