"""Real transformer models from ``transformers`` 5.x (small configs, random weights, no
download), each exported ONCE with dynamic batch and sequence axes and run in tract at
sizes other than the example's.

The attention path is ``attn_implementation="sdpa"`` (the default of transformers 5: one
``aten::scaled_dot_product_attention`` per layer, masks built from ``arange`` comparisons
that stay symbolic); BERT is also checked with ``"eager"`` (explicit matmul + softmax).
The example attention mask has padding: with an all-ones mask transformers skips building
the mask while tracing, and the export would not take padding into account.
"""

import warnings

import pytest
import torch

from t2n.testing import assert_exports

import transformers  # noqa: E402  (a test dependency: missing means a broken set-up)

pytestmark = pytest.mark.slow

# every model through both front ends: torch.jit.trace and torch.export
CAPTURES = pytest.mark.parametrize("capture", ["trace", "export"])

DYN = {"input_ids": {0: "B", 1: "S"}, "attention_mask": {0: "B", 1: "S"}}
NAMES = ["input_ids", "attention_mask"]


class LastHidden(torch.nn.Module):
    """The model called with keyword inputs, returning the last hidden state."""

    def __init__(self, model, **extra):
        super().__init__()
        self.model = model
        self.extra = extra

    def forward(self, input_ids, attention_mask):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=False,
                         **self.extra)
        return out[0]


def _inputs(b, s, vocab=100):
    ids = torch.randint(0, vocab, (b, s))
    mask = torch.ones(b, s, dtype=torch.long)
    mask[-1, s // 2:] = 0  # the last sequence is padded
    return ids, mask


def _check(model, capture, **extra):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return assert_exports(LastHidden(model.eval(), **extra), _inputs(2, 8),
                              input_names=NAMES, dynamic_axes=DYN, capture=capture,
                              more_args=[_inputs(3, 13), _inputs(1, 5)], rtol=1e-4, atol=1e-4)


@CAPTURES
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_bert(impl, capture):
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64,
                                  max_position_embeddings=64, attn_implementation=impl)
    res = _check(transformers.BertModel(cfg), capture)
    assert [str(d) for d in res.outputs[0].shape] == ["B", "S", "32"]


@CAPTURES
def test_gpt2_causal(capture):
    cfg = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4,
                                  n_positions=64, attn_implementation="sdpa", use_cache=False)
    _check(transformers.GPT2Model(cfg), capture, use_cache=False)


@CAPTURES
def test_llama_rmsnorm_rotary_gqa(capture):
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=64, max_position_embeddings=64,
                                   attn_implementation="sdpa", use_cache=False)
    _check(transformers.LlamaModel(cfg), capture, use_cache=False)


@CAPTURES
def test_t5_encoder_relative_positions(capture):
    cfg = transformers.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                num_heads=4, relative_attention_num_buckets=8,
                                relative_attention_max_distance=16)
    _check(transformers.T5EncoderModel(cfg), capture)


class Depth(torch.nn.Module):
    """A depth-estimation model on pixel values, returning the predicted depth."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values, return_dict=False)[0]


def test_dpt_depth_readout_loads_with_dynamic_batch():
    """DPT's readout projection (``linear(cat([tokens, cls.expand_as(tokens)], -1))``)
    made tract refuse the archive at load (t2n.passes.product_broadcasts); exported with a
    dynamic batch, run at other batch sizes."""
    cfg = transformers.DPTConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                                 intermediate_size=128, image_size=64, patch_size=16,
                                 neck_hidden_sizes=[16, 32, 64, 64], fusion_hidden_size=32,
                                 backbone_out_indices=[0, 1, 2, 3],
                                 initializer_range=0.1)  # depths of order 1 (0.02: 1e-8)
    torch.manual_seed(0)
    model = Depth(transformers.DPTForDepthEstimation(cfg).eval())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = assert_exports(model, (torch.randn(2, 3, 64, 64),), input_names=["pixel_values"],
                             dynamic_axes={"pixel_values": {0: "B"}},
                             more_args=[(torch.randn(1, 3, 64, 64),),
                                        (torch.randn(3, 3, 64, 64),)], rtol=1e-4, atol=1e-4)
    assert [str(d) for d in res.outputs[0].shape] == ["B", "64", "64"]
