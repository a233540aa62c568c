"""``t2n llm`` on LFM2 (short convolutions + attention): the conv layers' windows are
step inputs/outputs of fixed size beside the attention layers' keys and values; greedy
generation in tract equals transformers' (f32, and q4_0 against the rounded model)."""

import pytest

from fixtures.hybrid_llms import exported

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("weights", ["f32", "q4_0"])
def test_lfm2_generates_like_transformers(weights, tmp_path):
    res, text = exported("lfm2", weights, tmp_path / "m.nnef.tar")
    assert res.passed and res.tract_tokens == res.reference_tokens
    assert len(set(res.tract_tokens)) > 3, "a model repeating one token proves little"
    names = [i.name for i in res.export.inputs]
    assert names == ["input_ids", "past_conv_0", "past_key_1", "past_value_1"]
    assert [list(i.shape) for i in res.export.inputs][1] == [1, 32, 3]
    assert '("t2n.llm.state_shapes", ["1,32,3", "1,2,0,8", "1,2,0,8"])' in text
    assert '("t2n.llm.state_kinds", ["conv", "key", "value"])' in text
