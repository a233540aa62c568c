"""``t2n llm`` on Bamba (Mamba 2 + attention). Its model counts positions from 0 at every
step unless given ``position_ids`` (transformers 5.24); ``generate`` passes them, and so
does the step (``P .. P+S-1``). Greedy generation in tract equals transformers' (f32, and
q4_0 against the rounded model)."""

import pytest

from fixtures.hybrid_llms import exported

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("weights", ["f32", "q4_0"])
def test_bamba_generates_like_transformers(weights, tmp_path):
    res, text = exported("bamba", weights, tmp_path / "m.nnef.tar")
    assert res.passed and res.tract_tokens == res.reference_tokens
    assert len(set(res.tract_tokens)) > 3, "a model repeating one token proves little"
    assert [i.name for i in res.export.inputs] == [
        "input_ids", "past_conv_0", "past_recurrent_0", "past_key_1", "past_value_1"]
    assert text.count("tract_core_scan(") == 1
