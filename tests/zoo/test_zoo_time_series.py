"""Time-series transformers of the zoo: transformers' Autoformer built from a small config
(d_model 16, one encoder and one decoder layer, context 16, prediction 8, lags [1, 2, 3],
weights re-drawn), called with keyword inputs as users call it, checked in tract on a
dynamic batch (the check's fresh sizes, and batch 1).

Autoformer's input embedding reads ``linear(cat([lags, cat([static.expand(...),
time_features])]))``: a broadcast nested two concats deep under a product, which tract
0.23.9 refused to load until t2n.passes.product_broadcasts followed nested concats. Its
scaler's ``loc`` is zero whatever the inputs (``scaling="mean"``), so it is declared
constant.

Captured with the trace: under torch.export (t2n's default) transformers' masking utilities
build a ``[B, 1, 16, 16]`` attention mask that eager mode skips, and Autoformer's
auto-correlation then views its ``[B * heads, 16, head_dim]`` weights as ``[B, heads, 16,
16]`` (modeling_autoformer.py:517), which fails in torch.export itself, before t2n sees a
graph.
"""

import warnings

import pytest
import torch

from transformers_models import redraw

import transformers  # noqa: F401  (a test dependency: missing means a broken set-up)

pytestmark = pytest.mark.slow

CONTEXT, PREDICTION, LAGS = 16, 8, [1, 2, 3]
PAST = CONTEXT + max(LAGS)


def _config():
    return transformers.AutoformerConfig(
        prediction_length=PREDICTION, context_length=CONTEXT, lags_sequence=LAGS, d_model=16,
        encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        num_time_features=1, moving_average=5, autocorrelation_factor=1)


def _inputs(batch: int, future: bool, seed: int = 0) -> dict:
    """What a user feeds: past values with some of them unobserved, time features; with
    ``future`` the training-style call (future values given, the decoder runs)."""
    g = torch.Generator().manual_seed(seed)
    args = dict(past_values=torch.randn(batch, PAST, generator=g) + 2.0,
                past_time_features=torch.randn(batch, PAST, 1, generator=g),
                past_observed_mask=(torch.rand(batch, PAST, generator=g) > 0.2).float(),
                future_time_features=torch.randn(batch, PREDICTION, 1, generator=g))
    if future:
        args["future_values"] = torch.randn(batch, PREDICTION, generator=g) + 2.0
    return args


def _check(model, future: bool):
    from t2n.testing import assert_exports

    args = _inputs(2, future)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' tracer and deprecation notices
        return assert_exports(model, args, rtol=1e-3, atol=1e-4, constant_outputs=["loc"],
                              capture="trace",
                              dynamic_axes={k: {0: "B"} for k in args},
                              more_args=[_inputs(1, future, 1)])


def test_autoformer_model_encoder():
    """AutoformerModel without future values (the inference-time encoder pass): the archive
    tract refused before."""
    result = _check(redraw(transformers.AutoformerModel(_config())), False)
    assert result.outputs[0].name == "encoder_last_hidden_state", result.outputs[0]


def test_autoformer_for_prediction_training_forward():
    """AutoformerForPrediction as training runs it (the whole encoder-decoder with future
    values): the Student-t negative log-likelihood of the future values and the
    distribution's parameters."""
    result = _check(redraw(transformers.AutoformerForPrediction(_config())), True)
    assert [o.name for o in result.outputs][:2] == ["loss", "params_0"]
