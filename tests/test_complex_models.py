"""Models with complex tensors inside, exported and run in tract against torch eager: the
Whisper log-mel front end (STFT, dynamic number of samples), Llama 4's complex rotary
embedding, FNet's Fourier mixing and Autoformer's FFT auto-correlation; and transformers'
own FNet and Llama 4 text models (tiny configs, random weights)."""

import math

import pytest
import torch
from torch import nn

from t2n.testing import assert_exports


class WhisperLogMel(nn.Module):
    """WhisperFeatureExtractor's torch path as a module (80 mel bins, 400-point STFT)."""

    def __init__(self, n_mels=80):
        super().__init__()
        torch.manual_seed(0)
        self.register_buffer("window", torch.hann_window(400))
        self.register_buffer("mel_filters", torch.rand(n_mels, 201) * 0.05)

    def forward(self, waveform):
        stft = torch.stft(waveform, 400, 160, window=self.window, return_complex=True)
        magnitudes = stft[..., :-1].abs() ** 2
        mel_spec = self.mel_filters @ magnitudes
        log_spec = torch.clamp(mel_spec, min=1e-10).log10()
        log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
        return (log_spec + 4.0) / 4.0


@pytest.mark.parametrize("batch", [False, True], ids=["1d", "batched"])
def test_whisper_log_mel_dynamic_samples(batch):
    torch.manual_seed(0)
    shape = (2, 4000) if batch else (4000,)
    axis = len(shape) - 1

    def audio(n):
        return (torch.randn(*shape[:-1], n) * 0.1,)

    assert_exports(WhisperLogMel(), audio(4000), atol=1e-4, input_names=["waveform"],
                   dynamic_axes={"waveform": {axis: "N"}}, more_args=[audio(6437)])


class Llama4Rotary(nn.Module):
    """Llama 4's rotary embedding: freqs_cis = polar(1, positions x inv_freq), q and k seen
    as complex pairs, multiplied, back to real (transformers' apply_rotary_emb)."""

    def __init__(self, head_dim=16, theta=500000.0, scaling=1.0):
        super().__init__()
        inv = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)
        self.scaling = scaling

    def freqs_cis(self, position_ids):
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
        return torch.polar(torch.ones_like(freqs), freqs) * self.scaling

    def forward(self, xq, xk, position_ids):
        fc = self.freqs_cis(position_ids)
        xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        xq_out = torch.view_as_real(xq_ * fc[:, :, None, :]).flatten(3)
        xk_out = torch.view_as_real(xk_ * fc[:, :, None, :]).flatten(3)
        return xq_out.type_as(xq), xk_out.type_as(xk)


def test_llama4_rotary_dynamic_sequence():
    torch.manual_seed(0)

    def args(s):
        return (torch.randn(2, s, 4, 16), torch.randn(2, s, 2, 16),
                torch.arange(s).expand(2, s) + 3)

    assert_exports(Llama4Rotary(), args(7), atol=1e-4,
                   input_names=["xq", "xk", "pos"],
                   dynamic_axes={"xq": {1: "S"}, "xk": {1: "S"}, "pos": {1: "S"}},
                   more_args=[args(12)])


class FNetMixing(nn.Module):
    """FNet's Fourier token mixing: real part of the 2-D FFT over (sequence, hidden), then
    a residual, a layer norm and a feed-forward."""

    def __init__(self, d=32):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 64), nn.GELU(), nn.Linear(64, d))

    def forward(self, x):
        x = self.norm(x + torch.fft.fftn(x, dim=(1, 2)).real)
        return self.norm(x + self.ff(x))


def test_fnet_mixing_block_dynamic_sequence():
    torch.manual_seed(0)
    assert_exports(FNetMixing().eval(), (torch.randn(2, 10, 32),), atol=1e-4,
                   input_names=["x"], dynamic_axes={"x": {1: "S"}},
                   more_args=[(torch.randn(2, 17, 32),)])


class AutoCorrelation(nn.Module):
    """Autoformer's auto-correlation (inference path): period correlations by rfft,
    conjugate product and irfft, then the top-k delays aggregated."""

    def __init__(self, factor=1):
        super().__init__()
        self.factor = factor

    def forward(self, queries, keys, values):
        b, length, h, e = queries.shape
        q_fft = torch.fft.rfft(queries.permute(0, 2, 3, 1).contiguous(), dim=-1)
        k_fft = torch.fft.rfft(keys.permute(0, 2, 3, 1).contiguous(), dim=-1)
        corr = torch.fft.irfft(q_fft * torch.conj(k_fft), n=length, dim=-1)
        values = values.permute(0, 2, 3, 1).contiguous()
        top_k = int(self.factor * math.log(length))
        mean_value = torch.mean(torch.mean(corr, dim=1), dim=1)
        weights, delay = torch.topk(mean_value, top_k, dim=-1)
        tmp_corr = torch.softmax(weights, dim=-1)
        tmp_values = values.repeat(1, 1, 1, 2)
        init_index = torch.arange(length).view(1, 1, 1, -1).repeat(b, h, e, 1)
        agg = torch.zeros_like(values).float()
        for i in range(top_k):
            tmp_delay = init_index + delay[:, i].view(-1, 1, 1, 1).repeat(1, h, e, length)
            pattern = torch.gather(tmp_values, dim=-1, index=tmp_delay)
            agg = agg + pattern * tmp_corr[:, i].view(-1, 1, 1, 1).repeat(1, h, e, length)
        return agg.permute(0, 3, 1, 2), corr


@pytest.mark.parametrize("length", [24, 25])
def test_autoformer_auto_correlation(length):
    torch.manual_seed(0)
    args = tuple(torch.randn(2, length, 2, 8) for _ in range(3))
    assert_exports(AutoCorrelation(), args, atol=1e-4)


def test_transformers_fnet_model():
    import transformers  # a test dependency (pyproject test extra)
    cfg = transformers.FNetConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
                                  intermediate_size=64, max_position_embeddings=64,
                                  type_vocab_size=2)
    torch.manual_seed(0)
    model = transformers.FNetModel(cfg).eval()
    ids = torch.randint(0, 50, (2, 12))
    assert_exports(model, (ids,), atol=1e-4, input_names=["input_ids"],
                   dynamic_axes={"input_ids": {1: "S"}},
                   more_args=[(torch.randint(0, 50, (2, 20)),)])


def test_transformers_llama4_text_model():
    import transformers  # a test dependency (pyproject test extra)
    cfg = transformers.Llama4TextConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, intermediate_size_mlp=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        num_local_experts=2, num_experts_per_tok=1, max_position_embeddings=64,
        interleave_moe_layer_step=2, no_rope_layers=[1, 0], attention_chunk_size=16)
    torch.manual_seed(0)
    model = transformers.Llama4ForCausalLM(cfg).eval()
    model.config.use_cache = False
    ids = torch.randint(0, 64, (1, 9))
    assert_exports(model, (ids,), atol=1e-4, input_names=["input_ids"],
                   dynamic_axes={"input_ids": {1: "S"}},
                   more_args=[(torch.randint(0, 64, (1, 14)),)])
