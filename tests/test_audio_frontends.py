"""Audio front ends as users write them in torch (torchaudio's MFCC recipe, a keyword
spotter's feature stack): exported with a dynamic number of samples and checked in tract at
two other lengths against torch eager; var/std over the dynamic axis; and a Silero-style
voice activity detector exported for streaming and run chunk by chunk."""

import math

import pytest
import torch
from torch import nn
import torch.nn.functional as F

from t2n.testing import assert_exports


def _mel_filters(n_mels, n_freqs, sample_rate):
    """A triangular mel filterbank (HTK mel scale), as torchaudio.functional.melscale_fbanks."""
    def mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)

    pts = torch.linspace(mel(0.0), mel(sample_rate / 2), n_mels + 2)
    hz = 700.0 * (10 ** (pts / 2595.0) - 1.0)
    freqs = torch.linspace(0, sample_rate / 2, n_freqs)
    down = (freqs[:, None] - hz[None, :-2]) / (hz[1:-1] - hz[:-2])
    up = (hz[None, 2:] - freqs[:, None]) / (hz[2:] - hz[1:-1])
    return torch.clamp(torch.minimum(down, up), min=0.0)  # [n_freqs, n_mels]


def _dct(n_mfcc, n_mels):
    """DCT-II matrix, orthonormal (torchaudio.functional.create_dct(norm='ortho'))."""
    n = torch.arange(n_mels, dtype=torch.float64)
    k = torch.arange(n_mfcc, dtype=torch.float64)[:, None]
    d = torch.cos(math.pi / n_mels * (n + 0.5) * k)
    d[0] *= 1.0 / math.sqrt(2.0)
    return (d * math.sqrt(2.0 / n_mels)).t().float()  # [n_mels, n_mfcc]


class MFCC(nn.Module):
    """torchaudio.transforms.MFCC's computation: power spectrogram (reflect-padded centred
    STFT, Hann window), mel filterbank, amplitude to dB (top_db clamp), DCT."""

    def __init__(self, sample_rate=16000, n_fft=400, hop=160, n_mels=40, n_mfcc=13,
                 top_db=80.0):
        super().__init__()
        self.n_fft, self.hop, self.top_db = n_fft, hop, top_db
        self.register_buffer("window", torch.hann_window(n_fft))
        self.register_buffer("fb", _mel_filters(n_mels, n_fft // 2 + 1, sample_rate))
        self.register_buffer("dct", _dct(n_mfcc, n_mels))

    def forward(self, waveform):
        spec = torch.stft(waveform, self.n_fft, self.hop, window=self.window, center=True,
                          pad_mode="reflect", return_complex=True).abs().pow(2.0)
        mel = torch.matmul(spec.transpose(-1, -2), self.fb).transpose(-1, -2)
        db = 10.0 * torch.log10(torch.clamp(mel, min=1e-10))
        db = torch.max(db, db.amax(dim=(-2, -1), keepdim=True) - self.top_db)
        return torch.matmul(db.transpose(-1, -2), self.dct).transpose(-1, -2)


class KwsFeatures(nn.Module):
    """A keyword spotter's front end: pre-emphasis, framed log-mel energies by an STFT,
    per-utterance mean/variance normalisation over time."""

    def __init__(self, n_fft=512, hop=160, n_mels=32):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hamming_window(400))
        self.register_buffer("fb", _mel_filters(n_mels, n_fft // 2 + 1, 16000))

    def forward(self, waveform):
        x = torch.cat([waveform[..., :1], waveform[..., 1:] - 0.97 * waveform[..., :-1]], -1)
        spec = torch.stft(x, self.n_fft, self.hop, win_length=400, window=self.window,
                          center=False, return_complex=True)
        energy = spec.real ** 2 + spec.imag ** 2
        logmel = torch.log(energy.transpose(-1, -2) @ self.fb + 1e-6)  # [..., T, mels]
        mean = logmel.mean(-2, keepdim=True)
        std = logmel.std(-2, keepdim=True)
        return (logmel - mean) / (std + 1e-5)


@pytest.mark.parametrize("model", [MFCC, KwsFeatures], ids=["mfcc", "kws_logmel_cmvn"])
def test_audio_front_end_dynamic_samples(model):
    torch.manual_seed(0)

    def audio(n):
        return (torch.randn(2, n, generator=torch.Generator().manual_seed(n)) * 0.1,)

    assert_exports(model(), audio(4000), atol=1e-3, rtol=1e-3, input_names=["waveform"],
                   dynamic_axes={"waveform": {1: "N"}}, more_args=[audio(6437), audio(9000)])


def test_var_std_over_a_dynamic_axis():
    """var/std divide by max(0, n - correction), n counted at run time; n <= correction
    gives PyTorch's inf (or NaN for 0/0)."""
    from opcases import assert_cases

    cases = {
        "std over time": lambda x: x.std(-1),
        "var correction 0": lambda x: x.var(-1, correction=0, keepdim=True),
        "var correction 3": lambda x: torch.var(x, -1, correction=3),
        "std_mean over two axes": lambda x: torch.std_mean(x, (0, 2)),
        "var_mean": lambda x: torch.var_mean(x, -1),
    }
    x = torch.randn(2, 3, 7)
    assert_cases(cases, (x,), input_names=["x"], dynamic_axes={"x": {2: "T"}},
                 more_args=[(torch.randn(2, 3, 2),), (torch.randn(2, 3, 3),)])


def test_var_with_correction_past_the_count():
    """A static count <= correction: PyTorch gives inf (NaN for 0/0), not NaN throughout."""
    from opcases import assert_cases

    assert_cases({"var correction 3 of 2": lambda x: torch.var(x, -1, correction=3),
                  "var of 1 unbiased": lambda x: x[..., :1].var(-1)}, (torch.randn(3, 2),))


class StreamingVad(nn.Module):
    """A Silero-style voice activity detector on raw audio: an STFT as a strided conv1d
    with fixed DFT kernels, magnitude, two strided conv layers, an LSTM, a per-frame
    speech probability. Every layer is causal, so it runs chunk by chunk."""

    def __init__(self, n_fft=64, hop=32, hidden=16):
        super().__init__()
        k = torch.arange(n_fft // 2 + 1, dtype=torch.float64)[:, None]
        t = torch.arange(n_fft, dtype=torch.float64)[None, :]
        win = torch.hann_window(n_fft, dtype=torch.float64)
        basis = torch.cat([torch.cos(2 * math.pi * k * t / n_fft),
                           -torch.sin(2 * math.pi * k * t / n_fft)]) * win
        self.register_buffer("basis", basis.float()[:, None, :])  # [2F, 1, n_fft]
        self.hop = hop
        f = n_fft // 2 + 1
        self.enc1 = nn.Conv1d(f, hidden, 3, stride=2)
        self.enc2 = nn.Conv1d(hidden, hidden, 3)
        self.rnn = nn.LSTM(hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, waveform):  # [B, 1, N]
        spec = F.conv1d(waveform, self.basis, stride=self.hop)
        re, im = spec.chunk(2, dim=1)
        mag = torch.sqrt(re * re + im * im + 1e-9)
        h = torch.relu(self.enc2(torch.relu(self.enc1(torch.log1p(mag)))))
        out, _ = self.rnn(h.transpose(1, 2))
        return torch.sigmoid(self.head(out))[..., 0]


@pytest.mark.parametrize("pulse", [256, 512])
def test_streaming_vad(tmp_path, pulse):
    import t2n

    torch.manual_seed(0)
    model = StreamingVad().eval()
    x = torch.randn(1, 1, 4096, generator=torch.Generator().manual_seed(1)) * 0.1
    r = t2n.export(model, (x,), str(tmp_path / "vad.nnef.tgz"), input_names=["x"],
                   dynamic_axes={"x": {2: "S"}}, streaming="S", pulse=pulse, check=True)
    assert r.passed, r.report()
    assert r.stream.checks and all(c.ok for c in r.stream.checks)
    assert r.stream.chunks >= 2  # several chunks went through one state
