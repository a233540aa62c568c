"""``t2n.llm_generate.read_layout`` on archives whose string lists tract's ``dump()``
shows in part: tract cuts a long string tensor after its first 12 elements
(``Tensor(14,String 1,1,0,8, ..., 1,1,0,8...)``), so the states of a model of 7 attention
layers or more (14 states) cannot be read from ``t2n.llm.state_shapes``; they are rebuilt
from the archive's inputs, and the check generates."""

import pytest

from t2n import llm
from t2n.llm_generate import _CUT, _dumped_strings

pytestmark = pytest.mark.slow


def test_dumped_strings():
    assert _dumped_strings("Tensor(,String llama)") == "llama"
    assert _dumped_strings("Tensor(2,String a, b)") == ["a", "b"]
    assert _dumped_strings("Tensor(14,String a, b, c...)") is _CUT


def test_check_of_a_model_of_many_layers(tmp_path):
    import torch
    import transformers as T

    torch.manual_seed(0)
    model = T.LlamaForCausalLM(T.LlamaConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=7, num_attention_heads=2,
        num_key_value_heads=1, intermediate_size=16, initializer_range=0.3))
    res = llm.export_llm(model, tmp_path / "m.nnef.tar", check=True, quiet=True,
                         max_new_tokens=6)
    assert res.passed and len(res.tract_tokens) == 6
    assert len(res.states.specs) == 14
