"""``t2n llm`` on Qwen3-Next (gated delta net + attention + mixture of experts).

The gated delta rule is computed token by token (one ``tract_core_scan`` from the cached
state) for the prompt as for each decoding token; transformers computes the prompt by
chunks of 64 tokens (the same sums, rounded differently). The f32 prompt of 70 tokens
spans two of transformers' chunks. Greedy generation in tract equals transformers'
(f32, and q4_0 against the rounded model)."""

import pytest

from fixtures.hybrid_llms import exported

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("weights", ["f32", "q4_0"])
def test_qwen3_next_generates_like_transformers(weights, tmp_path):
    prompt = [(37 * i + 5) % 128 for i in range(70)] if weights == "f32" else None
    res, text = exported("qwen3_next", weights, tmp_path / "m.nnef.tar", prompt=prompt)
    assert res.passed and res.tract_tokens == res.reference_tokens
    assert len(set(res.tract_tokens)) > 3, "a model repeating one token proves little"
    names = [i.name for i in res.export.inputs]
    assert names == ["input_ids", "past_conv_0", "past_recurrent_0", "past_key_1",
                     "past_value_1"]
    # conv over q, k, v (2 x 2 x 8 + 4 x 8 channels); memory [1, 4 heads, 8, 8]
    assert [list(i.shape) for i in res.export.inputs][1:3] == [[1, 64, 4], [1, 4, 8, 8]]
    assert text.count("tract_core_scan(") == 1
    assert "linalg" not in text and "t2n_trsm" not in text, "no chunked triangular solves"
