"""Whisper's log-mel front end (``fixtures.logmel``) exported with ``streaming="S"`` over
the samples and pulsed in tract chunk by chunk.

The STFT is a delay, not a whole-stream op: tract pulses ``tract_core_stft`` (the lowering of
``torch.stft(return_complex=True)``) with a buffer of ``n_fft - hop`` samples, so a frame
comes out once its last sample has arrived (delay 2 frames for n_fft 400, hop 160). What
cannot stream is refused at export naming the op and the line: Whisper's whole-utterance
floor ``log_spec.max() - 8`` (a reduction over the stream), ``center=True``'s reflect
padding (it mirrors the stream's end), a pulse that is not a whole number of hops."""

import json
import os

import numpy as np
import pytest
import torch

import t2n
from fixtures.logmel import WhisperLogMel
from t2n.errors import ConversionError


def audio(n, seed=1):
    return torch.randn(1, n, generator=torch.Generator().manual_seed(seed)) * 0.1


def stream_export(model, x, path, pulse, **kw):
    r = t2n.export(model.eval(), (x,), str(path), input_names=["audio"],
                   dynamic_axes={"audio": {1: "S"}}, streaming="S", pulse=pulse, check=True,
                   **kw)
    assert r.passed, r.report()  # the whole-utterance check and the pulsed one
    assert r.stream.checks and all(c.ok for c in r.stream.checks)
    assert r.stream.chunks >= 2
    return r


@pytest.mark.parametrize("pulse", [160, 320, 480])
def test_streaming_log_mel_pulses_whole_hops(tmp_path, pulse):
    """Whisper's front end without the whole-utterance floor, framed without padding: one
    frame per 160 samples of a chunk, 2 frames of delay (a 400-sample frame ends 240
    samples after its hop)."""
    model = WhisperLogMel(center=False, max_floor=False)
    r = stream_export(model, audio(3200), tmp_path / f"lm{pulse}.nnef.tgz", pulse)
    assert r.delay == 2
    assert r.stream.output_pulses == {"output_0": pulse // 160}
    # every frame the fed stream determines was compared (3200 samples: 19 frames)
    assert r.stream.checks[0].name.startswith("output_0 (pulsed, ")
    steps = int(r.stream.checks[0].name.split(", ")[1].split()[0])
    assert steps >= 19


def test_one_dimensional_audio_streams(tmp_path, capture):
    """Whisper's ``log_mel_spectrogram`` takes ``(n_samples,)`` audio too (torch.export:
    the frame count ``(S - 400)//160 + 1`` is 1 at some sizes, where a stride check of
    torch's guards ``Max(1, (S - 400)//160)``, a layout, not a value)."""
    x = torch.randn(3200, generator=torch.Generator().manual_seed(5)) * 0.1
    r = t2n.export(WhisperLogMel(center=False, max_floor=False).eval(), (x,),
                   str(tmp_path / "one.nnef.tgz"), input_names=["audio"],
                   dynamic_axes={"audio": {0: "S"}}, streaming="S", pulse=320, check=True,
                   capture=capture)
    assert r.passed, r.report()
    assert r.delay == 2 and r.stream.output_axes == {"output_0": 1}


def test_dynamic_batch_streams(tmp_path):
    x = torch.randn(2, 3200, generator=torch.Generator().manual_seed(6)) * 0.1
    r = t2n.export(WhisperLogMel(center=False, max_floor=False).eval(), (x,),
                   str(tmp_path / "b.nnef.tgz"), input_names=["audio"],
                   dynamic_axes={"audio": {0: "B", 1: "S"}}, streaming="S", pulse=320,
                   check=True)
    assert r.passed, r.report()
    assert r.delay == 2 and r.stream.output_pulses == {"output_0": 2}


class DecimatedLogMel(WhisperLogMel):
    """Every other sample (32 kHz audio to 16 kHz): the STFT's hop of 160 is 320 samples
    of the input stream."""

    def forward(self, audio):
        return super().forward(audio[..., ::2])


def test_stft_after_decimation_needs_whole_hops_of_the_input(tmp_path):
    r = stream_export(DecimatedLogMel(center=False, max_floor=False), audio(6400),
                      tmp_path / "dec.nnef.tgz", 640)
    assert r.delay == 2 and r.stream.output_pulses == {"output_0": 2}
    with pytest.raises(ConversionError) as e:
        t2n.export(DecimatedLogMel(center=False, max_floor=False).eval(), (audio(6400),),
                   str(tmp_path / "dec160.nnef.tgz"), input_names=["audio"],
                   dynamic_axes={"audio": {1: "S"}}, streaming="S", pulse=160)
    assert e.value.op == "aten::stft" and "multiple of 320 steps of S" in str(e.value)


def test_centred_with_constant_padding_streams(tmp_path):
    """``center=True, pad_mode='constant'``: zeros before the stream are a delay."""
    r = stream_export(WhisperLogMel(center=True, pad_mode="constant", max_floor=False),
                      audio(3200), tmp_path / "c.nnef.tgz", 320)
    assert r.delay == 2 and r.stream.output_pulses == {"output_0": 2}


class PreEmphasisLogMel(torch.nn.Module):
    """A streaming ASR front end in NeMo's style: pre-emphasis (a concat of the first
    sample with a difference of slices), a 512-point STFT of 400-sample Hann windows every
    160 samples, zero-centred (``pad_mode='constant'``), power, mel, natural log."""

    def __init__(self):
        super().__init__()
        from fixtures.logmel import mel_filters

        self.register_buffer("window", torch.hann_window(400))
        self.register_buffer("filters", mel_filters(64, 257, 16000))

    def forward(self, x):
        x = torch.cat([x[..., :1], x[..., 1:] - 0.97 * x[..., :-1]], -1)
        spec = torch.stft(x, 512, 160, win_length=400, window=self.window, center=True,
                          pad_mode="constant", return_complex=True)
        return torch.log(self.filters @ (spec.real ** 2 + spec.imag ** 2) + 2 ** -24)


@pytest.mark.parametrize("pulse", [160, 960])
def test_pre_emphasis_front_end_streams(tmp_path, pulse):
    r = stream_export(PreEmphasisLogMel(), audio(3200), tmp_path / f"p{pulse}.nnef.tgz",
                      pulse, rtol=1e-3, atol=1e-3)
    # the delay tract's pulse gives this geometry (zero padding, STFT buffer, aligned to
    # whole hops); the check above compared every frame after it
    assert r.delay == 3 and r.stream.output_pulses == {"output_0": pulse // 160}


class StreamingMFCC(torch.nn.Module):
    """torchaudio's MFCC recipe framed without padding and without the whole-utterance
    ``top_db`` floor: power spectrum, 40 mels in ``(B, T, mels)`` layout, dB, a 13-term
    DCT, back to ``(B, 13, T)``."""

    def __init__(self):
        super().__init__()
        from fixtures.logmel import mel_filters
        from test_audio_frontends import _dct

        self.register_buffer("window", torch.hann_window(400))
        self.register_buffer("fb", mel_filters(40, 201, 16000).t().contiguous())
        self.register_buffer("dct", _dct(13, 40))

    def forward(self, waveform):
        spec = torch.stft(waveform, 400, 160, window=self.window, center=False,
                          return_complex=True).abs().pow(2.0)
        db = 10.0 * torch.log10(torch.clamp(spec.transpose(-1, -2) @ self.fb, min=1e-10))
        return torch.matmul(db, self.dct).transpose(-1, -2)


def test_mfcc_of_a_batch_streams(tmp_path):
    x = torch.randn(2, 3200, generator=torch.Generator().manual_seed(3)) * 0.1
    r = stream_export(StreamingMFCC(), x, tmp_path / "mfcc.nnef.tgz", 640, rtol=1e-3,
                      atol=1e-4)
    assert r.delay == 2 and r.stream.output_pulses == {"output_0": 4}


def _pulse_run(archive, x, pulse, workdir):
    """The archive pulsed in tract and fed ``x`` chunk by chunk through one state (t2n's
    pulse runner child): the outputs with the delay dropped."""
    from t2n.check.child import run_child

    np.savez(os.path.join(workdir, "in.npz"), x.numpy())
    req = os.path.join(workdir, "req.json")
    res = os.path.join(workdir, "res.json")
    with open(req, "w") as f:
        json.dump({"archive": str(archive), "symbol": "S", "pulse": pulse,
                   "inputs": os.path.join(workdir, "in.npz"), "stream_axes": [1]}, f)
    run = run_child("t2n.check.pulse_runner", [req, res], workdir=workdir, timeout=300)
    assert run.returncode == 0, run.stderr
    with np.load(os.path.join(workdir, "outputs.npz")) as z:
        return z["arr_0"]


def test_whisper_frames_through_the_stream(tmp_path):
    """The documented recipe for ``center=True``: export with ``center=False`` and start the
    stream with its first 200 samples mirrored. The pulsed frames are Whisper's own
    (``center=True``, reflect padding, without the floor) for every frame that does not
    reach the mirrored end of the utterance."""
    n = 4000
    x = audio(n, seed=7)
    path = tmp_path / "w.nnef.tgz"
    stream_export(WhisperLogMel(center=False, max_floor=False), x, path, 320)
    stream = torch.cat([x[:, 1:201].flip(-1), x], -1)
    got = _pulse_run(path, stream, 320, str(tmp_path))
    with torch.no_grad():
        whisper = WhisperLogMel(center=True, max_floor=False).eval()(x).numpy()
    # frame f spans padded samples [160 f, 160 f + 400): within the audio and its mirrored
    # start while 160 f + 400 <= n + 200
    frames = (n + 200 - 400) // 160 + 1
    assert frames == whisper.shape[-1] - 1 and got.shape[-1] >= frames
    np.testing.assert_allclose(got[..., :frames], whisper[..., :frames], rtol=1e-4,
                               atol=1e-4)


def test_whisper_log_mel_exports_whole(tmp_path):
    """Whisper's front end as written (reflect-padded, whole-utterance floor) exports with a
    dynamic number of samples, checked at other lengths."""
    from t2n.testing import assert_exports

    assert_exports(WhisperLogMel().eval(), (audio(4000),), atol=1e-4, rtol=1e-4,
                   input_names=["audio"], dynamic_axes={"audio": {1: "N"}},
                   more_args=[(audio(6437, 2),), (audio(1601, 3),)])


def _refusal(tmp_path, model, pulse=320):
    path = tmp_path / "r.nnef.tgz"
    with pytest.raises(ConversionError) as e:
        t2n.export(model.eval(), (audio(3200),), str(path), input_names=["audio"],
                   dynamic_axes={"audio": {1: "S"}}, streaming="S", pulse=pulse)
    assert not path.exists()  # no archive that does not stream
    assert e.value.where and e.value.where.startswith("logmel.py:")
    return e.value


def test_whole_utterance_floor_is_refused(tmp_path):
    e = _refusal(tmp_path, WhisperLogMel(center=False))
    assert e.op == "aten::max" and "across the streaming axis S" in str(e)


def test_reflect_padding_of_center_is_refused(tmp_path):
    e = _refusal(tmp_path, WhisperLogMel(center=True, max_floor=False))
    assert e.op == "aten::pad" and "center=False" in str(e) and "reflect" in str(e)


@pytest.mark.parametrize("pulse", [100, 400])
def test_pulse_of_a_fraction_of_hops_is_refused(tmp_path, pulse):
    """tract 0.23.9 pulses these without an error, into a garbage frame count (100) or
    wrong frames (400: 2 frames per chunk instead of 2.5)."""
    e = _refusal(tmp_path, WhisperLogMel(center=False, max_floor=False), pulse)
    assert e.op == "aten::stft" and "hop_length=160" in str(e)
    assert "multiple of 160" in str(e) and f"pulse={pulse}" in str(e)


@pytest.mark.parametrize("n", [3200, 3201])
def test_default_pulse_is_a_whole_number_of_hops(tmp_path, n):
    r = t2n.export(WhisperLogMel(center=False, max_floor=False).eval(), (audio(n),),
                   str(tmp_path / "d.nnef.tgz"), input_names=["audio"],
                   dynamic_axes={"audio": {1: "S"}}, streaming="S", check=True)
    assert r.passed, r.report()
    assert r.stream.pulse == 160 and r.delay == 2
