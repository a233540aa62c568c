"""capture="export" on what torch.export alone gets wrong or refuses: recurrent layers,
max_pool1d and circular padding kept as leaves, sizes made tensors routed to scalar_tensor
(t2n/capture/leaf_ops.py), so their dynamic axes stay dynamic; one tensor given as two
inputs; and capture="auto"."""

from __future__ import annotations

import pytest
import torch

import t2n
from t2n.testing import assert_exports


class Recurrent(torch.nn.Module):
    """An RNN layer between two linears (the leaf inside a model), every output returned."""

    def __init__(self, kind, **kw):
        super().__init__()
        self.inp = torch.nn.Linear(3, 4)
        self.rnn = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}[kind](
            input_size=4, hidden_size=5, batch_first=True, **kw)

    def forward(self, x):
        y, h = self.rnn(self.inp(x))
        return (y,) + (tuple(h) if isinstance(h, tuple) else (h,))


@pytest.mark.parametrize("kind, kw", [
    ("lstm", dict(num_layers=2, bidirectional=True, proj_size=2)),
    ("gru", dict(num_layers=2, bidirectional=True)),
    ("rnn", dict(nonlinearity="relu")),
])
def test_recurrent_time_axis_stays_dynamic(kind, kw, tmp_path):
    """nn.LSTM/GRU/RNN with a dynamic time axis: exported once (one tract_core_scan per
    layer, or tract's GRU op), run at 1, 5 and 300 steps and another batch; the archive is
    the trace's, byte for byte."""
    torch.manual_seed(0)
    model = Recurrent(kind, **kw).eval()
    axes = {"x": {0: "B", 1: "T"}}
    r = assert_exports(model, (torch.randn(2, 5, 3),), input_names=["x"],
                       dynamic_axes=axes, capture="export",
                       more_args=[(torch.randn(1, 1, 3),), (torch.randn(3, 300, 3),)])
    assert r.op_histogram.get("tract_core_scan", 0) + \
        r.op_histogram.get("tract_core_gru_seq", 0) >= 1
    paths = {c: str(tmp_path / f"{c}.nnef.tar") for c in ("export", "trace")}
    for c, p in paths.items():
        t2n.export(model, (torch.randn(2, 5, 3),), p, input_names=["x"], dynamic_axes=axes,
                   capture=c)
    assert open(paths["export"], "rb").read() == open(paths["trace"], "rb").read()


def test_recurrent_leaves_leave_the_model_and_torch_as_they_were(tmp_path):
    """The capture routes torch._VF.lstm through t2n::lstm only while it runs: afterwards
    the model's weights are the same objects and the layer runs through aten::lstm."""
    torch.manual_seed(0)
    model = Recurrent("lstm").eval()
    before = {k: (v, v.clone()) for k, v in model.state_dict(keep_vars=True).items()}
    flat = list(model.rnn._flat_weights)
    x = torch.randn(2, 5, 3)
    want = model(x)
    t2n.export(model, (x,), str(tmp_path / "m.nnef.tar"), input_names=["x"], dynamic_axes={"x": {1: "T"}},
               capture="export")
    after = model.state_dict(keep_vars=True)
    assert all(after[k] is v and torch.equal(v, c) for k, (v, c) in before.items())
    assert all(a is b for a, b in zip(model.rnn._flat_weights, flat))
    with torch.profiler.profile() as prof:
        got = model(x)
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    names = {e.name for e in prof.events()}
    assert "aten::lstm" in names and not any(n.startswith("t2n::") for n in names)


class TwoUses(torch.nn.Module):
    def forward(self, a, b):
        return a * 2.0, b + 1.0


def test_one_tensor_given_as_two_inputs_stays_two_inputs():
    """torch.export reads one object passed twice as one input (its graph uses the last
    placeholder only): the capture passes a copy, so the archive computes each output from
    its own input (checked on fresh, different values for the two)."""
    x = torch.randn(3, 4)
    assert_exports(TwoUses(), (x, x), capture="export")


class ValueBranch(torch.nn.Module):
    """Python control flow on a tensor's value (torch.export refuses it; the trace records
    the branch taken, which is the only one here: the sum of absolute values is >= 0)."""

    def forward(self, x):
        if x.abs().sum() >= 0:
            return x * 2.0 + 1.0
        return x


def test_auto_uses_export_when_it_captures_the_model(tmp_path):
    r = assert_exports(TwoUses(), (torch.randn(3, 4), torch.randn(3, 4)), capture="auto")
    assert r.capture == "export" and "capture: export (torch.export)" in r.report()
    assert not any("capture='auto'" in w for w in r.warnings)


def test_auto_falls_back_to_the_trace_saying_why_in_one_line(tmp_path):
    r = assert_exports(ValueBranch(), (torch.randn(3, 4),), capture="auto")
    assert r.capture == "trace" and "capture: trace (torch.jit.trace)" in r.report()
    notes = [w for w in r.warnings if w.startswith("capture='auto'")]
    assert len(notes) == 1 and "\n" not in notes[0], r.warnings
    assert "torch.export failed" in notes[0] and "depends on tensor values" in notes[0]
    assert notes[0].endswith("captured with torch.jit.trace")


def test_auto_in_the_cli_says_which_capture(tmp_path):
    from click.testing import CliRunner

    from t2n.cli import cli

    out = tmp_path / "m.nnef.tgz"
    res = CliRunner().invoke(cli, ["export", "cli_models:make_mlp", "-o", str(out),
                                   "--input", "x:3x8:f32", "--capture", "auto"])
    assert res.exit_code == 0, res.output
    assert "capture: export (torch.export)" in res.output


class Pools(torch.nn.Module):
    """max_pool1d as models call it: F with its defaults, options, an unbatched input,
    torch.max_pool1d, and with indices (left to torch.export: not a leaf)."""

    def forward(self, x):
        f = torch.nn.functional
        return (f.max_pool1d(x, 2), f.max_pool1d(x, 3, stride=2, padding=1, ceil_mode=True),
                f.max_pool1d(x[0], 2, dilation=2), torch.max_pool1d(x, [2], [1]),
                torch.nn.MaxPool1d(2)(x))


def test_max_pool1d_over_a_dynamic_axis():
    """max_pool1d computes its output length in C++ integers, which fixed the axis under
    torch.export: as a leaf it stays dynamic (checked at 9, 10, 33 and 64 steps)."""
    axes = {"x": {2: "S"}}
    assert_exports(Pools(), (torch.randn(2, 3, 10),), input_names=["x"], dynamic_axes=axes,
                   capture="export",
                   more_args=[(torch.randn(2, 3, 9),), (torch.randn(2, 3, 33),),
                              (torch.randn(2, 3, 64),)])


class CircularPads(torch.nn.Module):
    """Circular padding as models call it: amounts computed from S (0 at the example's
    S = 6), a crop, torch._C._nn.pad, a circular-padded Conv1d."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(3, 2, 3, padding=2, padding_mode="circular")

    def forward(self, x):
        f, s = torch.nn.functional, x.shape[-1]
        return (f.pad(x, (s // 2, (3 - s % 3) % 3), mode="circular"),
                f.pad(x, (-1, 2), mode="circular"), torch._C._nn.pad(x, (1, 2), "circular"),
                f.pad(x, ((4 - s % 4) % 4, 1, 1, 0), mode="circular"), self.conv(x))


def test_circular_padding_over_a_dynamic_axis():
    """aten's circular padding branches on each amount's sign, which fixed S to multiples of
    3 under torch.export: as a leaf S stays dynamic (checked at 4, 7, 9 and 16)."""
    assert_exports(CircularPads().eval(), (torch.randn(2, 3, 6),), input_names=["x"],
                   dynamic_axes={"x": {2: "S"}}, capture="export",
                   more_args=[(torch.randn(2, 3, n),) for n in (4, 7, 9, 16)])


class SizeTensors(torch.nn.Module):
    """Sizes made tensors: torch.as_tensor of an int size, torch.tensor with a dtype."""

    def forward(self, x):
        n = torch.as_tensor(x.shape[0]).detach()
        scale = torch.sqrt(torch.tensor(x.shape[-1], dtype=torch.float32)) / 3
        return x * n + scale, torch.as_tensor(x.shape[0] * x.shape[-1]) - 1


def test_sizes_made_tensors_stay_expressions_of_the_axes():
    """torch.as_tensor(size) fixed the axis under torch.export (its factory reads a
    number); as scalar_tensor it is an expression of B and S (checked at other sizes)."""
    assert_exports(SizeTensors(), (torch.randn(2, 3, 6),), input_names=["x"],
                   dynamic_axes={"x": {0: "B", 2: "S"}}, capture="export",
                   more_args=[(torch.randn(3, 3, 4),), (torch.randn(5, 3, 11),)])


class QuantDequant(torch.nn.Module):
    def forward(self, x):
        q = torch.quantize_per_tensor(x, 0.0371, 57, torch.quint8)
        return torch.dequantize(q), torch.dequantize(q.reshape(-1, 10).transpose(0, 1)), \
            torch.dequantize(
            torch.quantize_per_tensor(x * 2.0, 1 / 127, 0, torch.qint8))


def test_quantize_dequantize_keeps_the_quantized_dtype(tmp_path):
    """torch.export records quantize_per_tensor's result as float32: the walker kept that
    dtype, so dequantize saw float integers and returned them (an archive off by the
    scale, written without complaint). Now the archive equals PyTorch bit for bit."""
    import numpy as np

    from t2n.check.tract_runner import run_in_tract

    x = torch.randn(3, 50) * 3
    path = str(tmp_path / "q.nnef.tar")
    t2n.export(QuantDequant(), (x,), path, capture="export")
    for got, want in zip(run_in_tract(path, [x.numpy()]), QuantDequant()(x)):
        assert np.array_equal(got, want.numpy())


class WholeOps(torch.nn.Module):
    """istft over a dynamic frame count, lstsq with every output, a float32 grouped_mm:
    ops torch.export cannot give shapes to itself, kept whole as t2n leaves."""

    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(15))

    def forward(self, x, a, b, rows, w, offs):
        spec = torch.stft(x, 15, hop_length=5, window=self.window, return_complex=True)
        return (torch.istft(spec, 15, hop_length=5, window=self.window),
                *torch.linalg.lstsq(a, b, driver="gels"),
                torch._grouped_mm(rows, w, offs=offs))


def test_whole_ops_convert_as_under_the_trace(tmp_path):
    """The export archive is the trace's, op for op (the graphs equal up to the numbering
    of constants): istft, lstsq and grouped_mm arrive whole, as the trace records them."""
    import re
    import tarfile

    args = (torch.randn(2, 80), torch.randn(2, 5, 3), torch.randn(2, 5, 2),
            torch.randn(6, 4), torch.randn(2, 4, 4), torch.tensor([1, 6], dtype=torch.int32))
    axes = {"x": {1: "T"}}
    names = ["x", "a", "b", "rows", "w", "offs"]
    assert_exports(WholeOps(), args, input_names=names, dynamic_axes=axes,
                       capture="export", atol=1e-4,
                       more_args=[(torch.randn(2, 61), *args[1:])])
    graphs = {}
    for c in ("export", "trace"):
        path = str(tmp_path / f"{c}.nnef.tar")
        t2n.export(WholeOps(), args, path, input_names=names, dynamic_axes=axes, capture=c)
        with tarfile.open(path) as tar:
            text = tar.extractfile("graph.nnef").read().decode()
        graphs[c] = re.sub(r"t2n_const_\d+", "C", text)
    assert graphs["export"] == graphs["trace"]
