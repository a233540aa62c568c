"""Streaming exports: tract pulses the archive over the streaming axis, and the pulsed model
run chunk by chunk through one state matches PyTorch on the whole stream.

Each model is checked at two pulse sizes (``check=True`` runs both the whole-sequence check
and the pulsed one; a mismatch in either raises). The delays asserted are the ones the
models' geometry implies (a centred kernel-5 convolution looks 2 steps ahead)."""

import inspect
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import t2n
import t2n.streaming
from fixtures import kws
from t2n.errors import CheckFailedError, ConversionError, UsageError


def stream_export(model, x, tmp_path, pulse, axis=2, name="m", extra_axes=None, **kw):
    axes = {axis: "S", **(extra_axes or {})}
    r = t2n.export(model.eval(), (x,), str(tmp_path / f"{name}_{pulse}.nnef.tgz"),
                   input_names=["x"], dynamic_axes={"x": axes}, streaming="S", pulse=pulse,
                   check=True, **kw)
    assert r.passed, r.report()
    assert r.stream.checks and all(c.ok for c in r.stream.checks)
    assert r.stream.chunks >= 2  # several chunks went through one state
    return r


def line_of(cls, text: str) -> str:
    """``test_streaming.py:N`` of the line of ``cls``'s source containing ``text``."""
    lines, start = inspect.getsourcelines(cls)
    n = next(i for i, ln in enumerate(lines) if text in ln)
    return f"{os.path.basename(__file__)}:{start + n}"


# ------------------------------------------------------------------ models that stream
class CausalTCN(nn.Module):
    """Dilated causal convolutions (left padding only), residual 1x1 paths, batch norm."""

    def __init__(self, c_in=6, c=16, k=3, dilations=(1, 2, 4)):
        super().__init__()
        self.inp = nn.Conv1d(c_in, c, 1)
        self.convs = nn.ModuleList(nn.Conv1d(c, c, k, dilation=d) for d in dilations)
        self.norms = nn.ModuleList(nn.BatchNorm1d(c) for _ in dilations)
        self.pads = [(k - 1) * d for d in dilations]
        self.out = nn.Conv1d(c, 4, 1)
        for n in self.norms:  # non-trivial running statistics
            n.running_mean.uniform_(-0.5, 0.5)
            n.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        h = self.inp(x)
        for conv, norm, pad in zip(self.convs, self.norms, self.pads):
            h = h + torch.relu(norm(conv(F.pad(h, (pad, 0)))))
        return self.out(h)


@pytest.mark.slow
@pytest.mark.parametrize("pulse", [4, 8])
def test_causal_tcn_streams_with_no_delay(tmp_path, pulse):
    r = stream_export(CausalTCN(), torch.randn(1, 6, 32), tmp_path, pulse)
    assert r.delay == 0
    assert r.stream.output_pulses == {"output_0": pulse}


class CentredConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 5, padding=2)

    def forward(self, x):
        return torch.tanh(self.conv(x))


@pytest.mark.parametrize("pulse", [4, 8])
def test_centred_conv_has_delay_2(tmp_path, pulse):
    r = stream_export(CentredConv(), torch.randn(1, 4, 24), tmp_path, pulse)
    assert r.delay == 2
    assert "delay 2" in r.report()


class StridedFrontEnd(nn.Module):
    """Two stride-2 convolutions (4x down-sampling in time), then a per-frame linear layer
    on (B, T/4, C): the pulse must be a multiple of 4."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(4, 8, 4, stride=2, padding=1)
        self.c2 = nn.Conv1d(8, 8, 3, stride=2, padding=1)  # second stride
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        h = self.c2(F.gelu(self.c1(x)))
        return self.fc(h.transpose(1, 2))


@pytest.mark.parametrize("pulse", [4, 8])
def test_strided_front_end(tmp_path, pulse):
    r = stream_export(StridedFrontEnd(), torch.randn(1, 4, 32), tmp_path, pulse)
    assert r.stream.output_axes == {"output_0": 1}
    assert r.stream.output_pulses == {"output_0": pulse // 4}
    assert r.delay == 1  # c2 looks one (down-sampled) step ahead


@pytest.mark.slow
@pytest.mark.parametrize("pulse", [4, 8])
def test_kws_conv_model(tmp_path, pulse):
    r = stream_export(kws.make_kws(), kws.example_input(40), tmp_path, pulse, axis=3)
    assert r.stream.output_pulses == {"output_0": pulse // 2}
    # front 1 + dw 2 = 3 input steps, aligned to the pool's stride: 2 pooled steps (the
    # check itself proves the alignment: dropping a wrong delay would mismatch)
    assert r.delay == 2


@pytest.mark.slow
@pytest.mark.parametrize("pulse", [4, 8])
def test_kws_conv_gru_model(tmp_path, pulse):
    """The GRU is a tract_core_scan carrying its state from chunk to chunk; it starts on
    the delayed convolution output (tract skips the delay's first steps inside the scan)."""
    r = stream_export(kws.make_kws(gru=True), kws.example_input(40), tmp_path, pulse, axis=3)
    assert r.op_histogram.get("tract_core_scan") == 1
    assert r.stream.output_pulses == {"output_0": pulse // 2} and r.delay == 2


class Recurrent(nn.Module):
    def __init__(self, cell, **kw):
        super().__init__()
        self.conv = nn.Conv1d(3, 6, 3, padding=1)
        self.rnn = cell(6, 5, batch_first=True, **kw)

    def forward(self, x):
        h = torch.relu(self.conv(x)).transpose(1, 2)
        return self.rnn(h)[0]


@pytest.mark.slow
@pytest.mark.parametrize("cell, kw, pulse", [(nn.LSTM, dict(num_layers=2), 4),
                                             (nn.GRU, dict(num_layers=2, dropout=0.1), 6),
                                             (nn.RNN, {}, 4)])
def test_forward_recurrent_layers_stream(tmp_path, cell, kw, pulse):
    r = stream_export(Recurrent(cell, **kw), torch.randn(1, 3, 24), tmp_path, pulse)
    assert r.delay == 1 and r.stream.output_axes == {"output_0": 1}


class SeqFirst(nn.Module):
    """Sequence-first recurrent stack (time on axis 0): an LSTM with projections, a GRU."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 5, proj_size=3)
        self.gru = nn.GRU(3, 4)

    def forward(self, x):
        return self.gru(self.lstm(x)[0])[0]


def test_sequence_first_recurrent_stack_with_dynamic_batch(tmp_path):
    r = stream_export(SeqFirst(), torch.randn(16, 2, 4), tmp_path, 4, axis=0,
                      extra_axes={1: "B"})
    assert r.delay == 0 and r.stream.output_axes == {"output_0": 0}


def test_streaming_with_f16_weights_checks_the_rounded_model(tmp_path):
    r = stream_export(CentredConv(), torch.randn(1, 4, 16), tmp_path, 4, weights="f16")
    assert r.delay == 2 and "weights_error" in r.extras


class FrameLayout(nn.Module):
    """(B, T, C) frames: layer norm and MLP per frame, a causal depthwise conv over T."""

    def __init__(self, d=8):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 16), nn.GELU(), nn.Linear(16, d))
        self.conv = nn.Conv1d(d, d, 3, groups=d)

    def forward(self, x):
        h = x + self.mlp(self.norm(x))
        c = self.conv(F.pad(h.transpose(1, 2), (2, 0))).transpose(1, 2)
        return torch.sigmoid(c) * h


@pytest.mark.parametrize("pulse", [3, 8])
def test_time_on_axis_1_with_dynamic_batch(tmp_path, pulse):
    r = stream_export(FrameLayout(), torch.randn(2, 24, 8), tmp_path, pulse, axis=1,
                      extra_axes={0: "B"})
    assert r.delay == 0 and r.stream.input_axes == {"x": 1}


class WindowAttention(nn.Module):
    """Causal self-attention over the last ``w`` steps, written with shifted copies of the
    keys and values (linear in the stream length), the form that streams."""

    def __init__(self, d=8, w=4):
        super().__init__()
        self.qkv, self.out, self.w, self.d = nn.Linear(d, 3 * d), nn.Linear(d, d), w, d

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        s = x.shape[1]
        ks = torch.stack([F.pad(k, (0, 0, j, 0))[:, :s] for j in range(self.w)], 2)
        vs = torch.stack([F.pad(v, (0, 0, j, 0))[:, :s] for j in range(self.w)], 2)
        valid = torch.stack([torch.arange(s) >= j for j in range(self.w)], 1)  # (S, W)
        att = (q[:, :, None, :] * ks).sum(-1) / self.d ** 0.5
        att = att.masked_fill(~valid, float("-inf")).softmax(-1)
        return self.out((att[..., None] * vs).sum(2))


@pytest.mark.slow
@pytest.mark.parametrize("pulse", [4, 8])
def test_bounded_window_attention_streams(tmp_path, pulse):
    r = stream_export(WindowAttention(), torch.randn(1, 16, 8), tmp_path, pulse, axis=1)
    assert r.delay == 0


class FullAttention(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        scores = q @ k.transpose(1, 2)  # (B, S, S)
        return scores.softmax(-1) @ v


def test_attention_over_the_whole_stream_is_refused(tmp_path):
    """tract 0.23.9 would pulse S x S scores as each chunk against itself (wrong values)."""
    with pytest.raises(ConversionError) as e:
        t2n.export(FullAttention(), (torch.randn(1, 16, 8),), str(tmp_path / "a.nnef"),
                   input_names=["x"], dynamic_axes={"x": {1: "S"}}, streaming="S", pulse=4)
    assert "spans the streaming axis S twice" in str(e.value)
    assert e.value.where == line_of(FullAttention, "scores = q @ k")


class Upsampler(nn.Module):
    """A decoder-style upsampler: nearest x2 in time, a causal conv, repeat_interleave x2,
    a transposed convolution (stride 2), then a centred conv (the look-ahead last)."""

    def __init__(self):
        super().__init__()
        self.causal = nn.Conv1d(4, 4, 3)
        self.up = nn.ConvTranspose1d(4, 4, 2, stride=2)
        self.conv = nn.Conv1d(4, 4, 3, padding=1)

    def forward(self, x):
        h = self.causal(F.pad(F.interpolate(x, scale_factor=2, mode="nearest"), (2, 0)))
        h = self.up(torch.tanh(h).repeat_interleave(2, dim=2))
        return self.conv(h)


@pytest.mark.parametrize("pulse", [2, 4])
def test_upsampling_over_the_stream(tmp_path, pulse):
    r = stream_export(Upsampler(), torch.randn(1, 4, 12), tmp_path, pulse)
    assert r.stream.output_pulses == {"output_0": 8 * pulse} and r.delay == 1


class DelayedUpsampling(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 4, 3, padding=1)  # looks one step ahead

    def forward(self, x):
        return F.interpolate(self.conv(x), scale_factor=2, mode="nearest")


def test_upsampling_a_delayed_stream_is_refused(tmp_path):
    """tract 0.23.9 streams it with the right values but a delay off by the factor."""
    with pytest.raises(ConversionError) as e:
        t2n.export(DelayedUpsampling(), (torch.randn(1, 4, 12),), str(tmp_path / "u.nnef"),
                   input_names=["x"], dynamic_axes={"x": {2: "S"}}, streaming="S", pulse=4)
    assert e.value.op == "aten::upsample_nearest1d" and "after a delay of 1" in str(e.value)
    assert e.value.where == line_of(DelayedUpsampling, "F.interpolate(")


class Pooled(nn.Module):
    def forward(self, x):
        a = F.avg_pool1d(x, 3, stride=1, padding=1)
        b = F.avg_pool1d(x, 4, stride=2, padding=2, count_include_pad=False)
        return a[:, :, ::2], b, x[:, :, 1::2] * 2


@pytest.mark.parametrize("pulse", [4, 6])
def test_padded_avg_pool_and_strided_slices_stream(tmp_path, pulse):
    """Average pooling padded on the stream and ``x[..., ::2]`` take their streaming forms
    (a depthwise convolution of ones; a strided slice instead of a gather), which tract
    pulses; three outputs."""
    r = stream_export(Pooled(), torch.randn(1, 3, 24), tmp_path, pulse)
    assert "tract_core_gather" not in r.op_histogram and "slice" in r.op_histogram
    assert len(r.stream.checks) == 3
    assert r.stream.output_pulses == {f"output_{i}": pulse // 2 for i in range(3)}
    assert r.delay == 0  # one step of look-ahead, before the stride-2 outputs


def test_static_second_input_is_fed_whole_to_every_chunk(tmp_path):
    class Cond(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(4, 4, 3, padding=1)

        def forward(self, x, scale):
            return self.conv(x) * scale

    r = t2n.export(Cond().eval(), (torch.randn(1, 4, 16), torch.randn(1, 4, 1)),
                   str(tmp_path / "c.nnef"), input_names=["x", "scale"],
                   dynamic_axes={"x": {2: "S"}}, streaming="S", pulse=4, check=True)
    assert r.passed and r.stream.input_axes == {"x": 2, "scale": -1} and r.delay == 1


def test_default_pulse_divides_the_example_length(tmp_path):
    r = t2n.export(CentredConv().eval(), (torch.randn(1, 4, 30),), str(tmp_path / "d.nnef"),
                   input_names=["x"], dynamic_axes={"x": {2: "S"}}, streaming="S")
    assert r.stream.pulse == 10 and r.delay == 2 and r.stream.checks is None
    # a defaulted pulse follows the stride tract asks for
    r = t2n.export(StridedFrontEnd().eval(), (torch.randn(1, 4, 36),),
                   str(tmp_path / "s.nnef"), input_names=["x"], dynamic_axes={"x": {2: "S"}},
                   streaming="S")
    assert r.stream.pulse == 12


def test_cli_stream_and_pulse(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from t2n.cli import cli

    (tmp_path / "kwsmod.py").write_text(
        "import torch\n"
        "def build():\n"
        "    return torch.nn.Sequential(torch.nn.Conv1d(4, 8, 5, padding=2), torch.nn.Tanh())\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "m.nnef.tgz"
    res = CliRunner().invoke(cli, ["export", "kwsmod:build", "-o", str(out),
                                   "--input", "x:1x4x16:f32", "--dynamic", "x:2=S",
                                   "--stream", "S", "--pulse", "4", "--check", "--json"])
    assert res.exit_code == 0, res.output
    import json

    d = json.loads(res.output[res.output.index("{"):])
    assert d["stream"]["delays"] == {"output_0": 2} and d["stream"]["pulse"] == 4
    assert all(c["ok"] for c in d["stream"]["checks"])


# ------------------------------------------------------------------ refusals
class WholeStreamMean(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3)

    def forward(self, x):
        h = torch.relu(self.conv(x))
        return h.mean(dim=2)  # the whole stream


def test_whole_stream_mean_is_refused_naming_mean_and_its_line(tmp_path):
    path = tmp_path / "mean.nnef.tgz"
    with pytest.raises(ConversionError) as e:
        t2n.export(WholeStreamMean(), (torch.randn(1, 4, 16),), str(path), input_names=["x"],
                   dynamic_axes={"x": {2: "S"}}, streaming="S", pulse=4)
    msg = str(e.value)
    assert e.value.op == "aten::mean" and "streaming axis S" in msg
    assert e.value.where == line_of(WholeStreamMean, "h.mean(dim=2)"), msg
    assert "Reduce" not in msg and "Pulsifier" not in msg  # not a raw tract message
    assert not path.exists()  # no archive left that is not the streaming one asked for


class Merge(nn.Module):
    def forward(self, x):
        return torch.relu(x).reshape(x.shape[0], -1)  # (B, C, S) -> (B, C*S)


def test_reshape_merging_time_after_channels_is_refused(tmp_path):
    with pytest.raises(ConversionError) as e:
        t2n.export(Merge(), (torch.randn(1, 4, 16),), str(tmp_path / "r.nnef"),
                   input_names=["x"], dynamic_axes={"x": {2: "S"}}, streaming="S", pulse=4)
    assert e.value.op == "aten::reshape" and "merges the streaming axis" in str(e.value)
    assert e.value.where == line_of(Merge, "reshape(")


def test_pulsed_mismatch_is_a_check_failure(tmp_path, monkeypatch):
    """Without t2n's refusal tract pulses the merge reshape into wrong values: the chunk by
    chunk check catches it while the whole-sequence check passes."""
    monkeypatch.setattr(t2n.streaming, "refusals", lambda g, spec: None)
    with pytest.raises(CheckFailedError) as e:
        t2n.export(Merge(), (torch.randn(1, 4, 16),), str(tmp_path / "r.nnef"),
                   input_names=["x"], dynamic_axes={"x": {2: "S"}}, streaming="S", pulse=4,
                   check=True)
    r = e.value.report
    assert all(c.ok for c in r.checks) and not r.stream.passed
    assert "pulsed" in str(e.value) and "FAILED" in r.report()


class BiGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(4, 5, batch_first=True, bidirectional=True)

    def forward(self, x):
        return self.rnn(x)[0]  # both directions


def test_reverse_direction_rnn_is_refused(tmp_path):
    """tract would pulse the backward scan chunk by chunk (wrong values): refused."""
    with pytest.raises(ConversionError) as e:
        t2n.export(BiGRU(), (torch.randn(1, 16, 4),), str(tmp_path / "b.nnef"),
                   input_names=["x"], dynamic_axes={"x": {1: "S"}}, streaming="S", pulse=4)
    assert e.value.op == "aten::gru" and "backwards" in str(e.value)
    assert e.value.where == line_of(BiGRU, "self.rnn(x)[0]")


class LastFrames(nn.Module):
    def forward(self, x):
        return torch.relu(x)[:, :, -8:] * 2  # the last 8 steps


def test_slice_from_the_end_of_the_stream_is_refused(tmp_path):
    """tract 0.23.9 pulses ``x[..., -8:]`` into wrong values: refused."""
    with pytest.raises(ConversionError) as e:
        t2n.export(LastFrames(), (torch.randn(1, 4, 16),), str(tmp_path / "l.nnef"),
                   input_names=["x"], dynamic_axes={"x": {2: "S"}}, streaming="S", pulse=4)
    assert e.value.op == "aten::slice" and "end of the stream" in str(e.value)
    assert e.value.where == line_of(LastFrames, "[:, :, -8:]")


def test_group_norm_over_the_stream_is_refused(tmp_path):
    class GN(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.GroupNorm(2, 4)

        def forward(self, x):
            return self.norm(x)

    with pytest.raises(ConversionError) as e:
        t2n.export(GN(), (torch.randn(1, 4, 16),), str(tmp_path / "g.nnef"),
                   input_names=["x"], dynamic_axes={"x": {2: "S"}}, streaming="S", pulse=4)
    assert e.value.op == "aten::group_norm"


def test_pulse_must_be_a_multiple_of_the_stride(tmp_path):
    with pytest.raises(ConversionError) as e:
        t2n.export(StridedFrontEnd(), (torch.randn(1, 4, 36),), str(tmp_path / "p.nnef"),
                   input_names=["x"], dynamic_axes={"x": {2: "S"}}, streaming="S", pulse=6)
    # 6 passes the first stride (3 steps per chunk after it), not the second
    assert e.value.where == line_of(StridedFrontEnd, "self.c2(F.gelu")
    assert "multiple of 2" in str(e.value) and "pulse=6" in str(e.value)


@pytest.mark.parametrize("kw, text", [
    (dict(streaming="T"), "must name one of the dynamic axes"),
    (dict(pulse=4), "give streaming=SYMBOL"),
    (dict(streaming="S", pulse=0), "positive integer"),
])
def test_usage_errors(tmp_path, kw, text):
    with pytest.raises(UsageError, match=text):
        t2n.export(CentredConv(), (torch.randn(1, 4, 16),), str(tmp_path / "u.nnef"),
                   input_names=["x"], dynamic_axes={"x": {2: "S"}}, **kw)


def test_check_manifest_streaming_entry(tmp_path):
    """``t2n check``: an entry with ``stream``/``pulse`` is checked chunk by chunk; a stream
    key naming no dynamic symbol is a manifest error."""
    import json

    from click.testing import CliRunner

    from t2n.cli import cli

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    good = tmp_path / "models.toml"
    good.write_text(f'pythonpath = ["{root}"]\n[[model]]\nname = "kws"\n'
                    'model = "tests.fixtures.kws:make_kws"\ninputs = ["x:1x1x16x24:f32"]\n'
                    'dynamic = ["x:3=S"]\nstream = "S"\npulse = 4\n')
    out = tmp_path / "r.json"
    res = CliRunner().invoke(cli, ["check", str(good), "--json", str(out)])
    assert res.exit_code == 0, res.output
    stream = json.loads(out.read_text())["models"][0]["export"]["stream"]
    assert stream["pulse"] == 4 and stream["delays"] == {"output_0": 2}
    assert stream["checks"] and all(c["ok"] for c in stream["checks"])
    bad = tmp_path / "bad.toml"
    bad.write_text(good.read_text().replace('stream = "S"', 'stream = "T"'))
    res = CliRunner().invoke(cli, ["check", str(bad)])
    assert res.exit_code == 2 and "stream must name one of the dynamic symbols" in res.output
