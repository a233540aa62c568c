"""Recurrent layers and cells (t2n/mappings/recurrent.py) against torch eager, in tract.

Every option of nn.LSTM / nn.GRU / nn.RNN and their combinations; the time axis dynamic
(exported once, run at 1, 5 and 300 steps); dynamic batch; cells stepped by Python loops;
the loop structure itself (one tract_core_scan per layer, both directions in it; op
count and archive independent of T)."""

from __future__ import annotations

import os
import tarfile

import pytest
import torch

import t2n
from t2n.testing import assert_exports

RNNS = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}


class WithState(torch.nn.Module):
    """``rnn(x, hx)`` returning every output (y, h_n[, c_n])."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, *hx):
        if not hx:
            y, h = self.rnn(x)
        else:
            y, h = self.rnn(x, hx if len(hx) == 2 else hx[0])
        return (y,) + (tuple(h) if isinstance(h, tuple) else (h,))


def _make(kind, seed=0, **kw):
    torch.manual_seed(seed)
    return RNNS[kind](**kw).eval()


def _x(m, batch, steps, unbatched=False):
    feat = m.input_size
    if unbatched:
        return torch.randn(steps, feat)
    return torch.randn(batch, steps, feat) if m.batch_first else torch.randn(steps, batch, feat)


def _states(m, batch, unbatched=False):
    d = 2 if m.bidirectional else 1
    lead = (m.num_layers * d,) if unbatched else (m.num_layers * d, batch)
    h_size = getattr(m, "proj_size", 0) or m.hidden_size
    hs = [torch.randn(*lead, h_size)]
    if isinstance(m, torch.nn.LSTM):
        hs.append(torch.randn(*lead, m.hidden_size))
    return hs


OPTIONS = [
    ("lstm", dict(input_size=3, hidden_size=4)),
    ("lstm", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True,
                  proj_size=2, batch_first=True)),
    ("lstm", dict(input_size=3, hidden_size=5, bias=False, num_layers=3, dropout=0.3)),
    ("lstm", dict(input_size=2, hidden_size=3, bidirectional=True, proj_size=1, bias=False)),
    ("gru", dict(input_size=3, hidden_size=4)),
    ("gru", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True,
                 batch_first=True)),
    ("gru", dict(input_size=3, hidden_size=4, bias=False, num_layers=2, dropout=0.5)),
    ("rnn", dict(input_size=3, hidden_size=4)),
    ("rnn", dict(input_size=3, hidden_size=4, nonlinearity="relu", num_layers=2,
                 bidirectional=True, batch_first=True)),
    ("rnn", dict(input_size=3, hidden_size=4, nonlinearity="relu", bias=False)),
]


class Bundle(torch.nn.Module):
    """Several cases in one model (one export, one tract run): case ``name`` reads its own
    inputs and its outputs are named ``name_0, name_1, ...`` in failure reports."""

    def __init__(self, cases: dict):
        super().__init__()
        self.names = list(cases)
        self.parts = torch.nn.ModuleList(m for m, _ in cases.values())
        self.arity = [len(a) for _, a in cases.values()]
        self.example = [t for _, a in cases.values() for t in a]

    def forward(self, *flat):
        outs, k = [], 0
        for part, n in zip(self.parts, self.arity):
            o = part(*flat[k:k + n])
            outs.extend(o if isinstance(o, (tuple, list)) else [o])
            k += n
        return tuple(outs)

    def input_names(self):
        return [f"{name}_in{i}" for name, n in zip(self.names, self.arity) for i in range(n)]

    def output_names(self):
        out = []
        for name, part, n in zip(self.names, self.parts, self.arity):
            with torch.no_grad():
                k = sum(self.arity[:self.names.index(name)])
                o = part(*self.example[k:k + n])
            out += [f"{name}_out{i}" for i in range(len(o) if isinstance(o, tuple) else 1)]
        return out


def check_bundle(cases: dict, **kw):
    b = Bundle(cases).eval()
    return assert_exports(b, tuple(b.example), input_names=b.input_names(),
                          output_names=b.output_names(), **kw)


def _case_id(kind, kw):
    opts = "_".join(f"{k}{v}" for k, v in kw.items() if k not in ("input_size", "hidden_size"))
    return f"{kind}_{opts or 'default'}".replace(".", "p").replace("=", "")


@pytest.mark.parametrize("given", [False, True], ids=["zero_state", "given_state"])
def test_options(given):
    """Every option and the combinations, initial states omitted or given."""
    cases = {}
    for i, (kind, kw) in enumerate(OPTIONS):
        m = WithState(_make(kind, seed=i, **kw))
        x = _x(m.rnn, 2, 5)
        cases[f"c{i}_{_case_id(kind, kw)}"] = (m, (x, *_states(m.rnn, 2)) if given else (x,))
    check_bundle(cases)


def test_unbatched():
    cases = {}
    for kind in ("lstm", "gru", "rnn"):
        kw = dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True)
        if kind == "lstm":
            kw["proj_size"] = 2
        m = WithState(_make(kind, **kw))
        x = _x(m.rnn, 1, 6, unbatched=True)
        cases[f"{kind}_given"] = (m, (x, *_states(m.rnn, 1, unbatched=True)))
        cases[f"{kind}_zero"] = (m, (x,))
    check_bundle(cases)


def test_dynamic_time_and_batch():
    """Exported once, run at 1, 5 and 300 steps and at other batch sizes."""
    cases, axes = {}, {}
    for kind in ("lstm", "gru", "rnn"):
        m = WithState(_make(kind, input_size=3, hidden_size=4, num_layers=2,
                            bidirectional=True, batch_first=True))
        cases[kind] = (m, (_x(m.rnn, 2, 5),))
        axes[f"{kind}_in0"] = {0: "B", 1: "T"}
    m = WithState(_make("lstm", input_size=3, hidden_size=4, proj_size=3))
    cases["lstm_state"] = (m, (_x(m.rnn, 2, 5), *_states(m.rnn, 2)))
    axes.update(lstm_state_in0={0: "T", 1: "B"}, lstm_state_in1={1: "B"},
                lstm_state_in2={1: "B"})

    def inputs(batch, steps):
        out = []
        for name, (m, _) in cases.items():
            out.append(_x(m.rnn, batch, steps))
            if name == "lstm_state":
                out += _states(m.rnn, batch)
        return tuple(out)

    check_bundle(cases, dynamic_axes=axes, more_args=[inputs(1, 1), inputs(3, 300)])


def test_float64():
    """f64 has no fused epilogue in tract: the same formulas op by op."""
    cases = {}
    for kind in ("lstm", "gru", "rnn"):
        m = WithState(_make(kind, input_size=3, hidden_size=4, bidirectional=True)).double()
        cases[kind] = (m, (_x(m.rnn, 2, 5).double(),))
    check_bundle(cases)


def _graph_text(path):
    with tarfile.open(path) as t:
        return t.extractfile("graph.nnef").read().decode()


def test_one_scan_per_layer_and_constant_size(tmp_path):
    """Both directions of a layer share one loop; nothing grows with T."""
    m = _make("lstm", input_size=8, hidden_size=16, num_layers=2, bidirectional=True)
    sizes, hists, texts = [], [], []
    for steps in (10, 1000):
        p = str(tmp_path / f"m{steps}.nnef.tgz")
        r = t2n.export(m, (torch.randn(steps, 1, 8),), p)
        hists.append(r.op_histogram)
        texts.append(_graph_text(p))
        sizes.append(os.path.getsize(p))
    assert hists[0] == hists[1]
    assert hists[0]["tract_core_scan"] == 2
    # one input projection per layer, both directions (a bias makes it an NNEF linear)
    assert hists[0].get("matmul", 0) + hists[0].get("linear", 0) == 2
    assert sum(1 for ln in texts[0].splitlines()
               if ln.startswith("fragment ") and "_body_" in ln) == 2
    assert abs(sizes[0] - sizes[1]) <= 16  # only the literal T in a shape differs


def test_gru_is_tract_whole_sequence_op(tmp_path):
    """An f32 GRU layer is tract's fused GruSeq (one op per layer and direction, no scan,
    nothing growing with T); f64 (no GruSeq kernel) keeps the scan. The numbers of every
    GRU option on this path are pinned by the tests above."""
    m = _make("gru", input_size=8, hidden_size=16, num_layers=2, bidirectional=True)
    hists, texts = [], []
    for steps in (10, 1000):
        p = str(tmp_path / f"g{steps}.nnef.tgz")
        hists.append(t2n.export(m, (torch.randn(steps, 1, 8),), p).op_histogram)
        texts.append(_graph_text(p))
    assert hists[0] == hists[1]
    assert hists[0]["tract_core_gru_seq"] == 4 and "tract_core_scan" not in hists[0]
    assert texts[0].count("chunk = -1") == 2 and texts[0].count("projected = 1") == 4
    h = t2n.export(m.double(), (torch.randn(5, 1, 8).double(),),
                   str(tmp_path / "f64.nnef.tgz")).op_histogram
    assert h["tract_core_scan"] == 2 and "tract_core_gru_seq" not in h


_STATE_RUNS = """
import sys, numpy as np, tract
x = np.load(sys.argv[2])
state = tract.nnef().load(sys.argv[1]).into_runnable().spawn_state()
runs = [[t.to_numpy() for t in state.run([x])] for _ in range(2)]
print(all(np.array_equal(a, b) for a, b in zip(*runs)))
"""


def test_each_run_of_a_state_starts_afresh(tmp_path):
    """A tract State running the archive twice gives the same numbers twice (PyTorch's
    calls are independent): the scans and GruSeq reset their recurrent state every run
    (only streaming exports carry it from chunk to chunk)."""
    import subprocess
    import sys

    import numpy as np

    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = _make("lstm", input_size=3, hidden_size=4, bidirectional=True)
            self.gru = _make("gru", input_size=8, hidden_size=4)

        def forward(self, x):
            y, (h, c) = self.lstm(x)
            z, g = self.gru(y)
            return z, h, c, g

    p, xp = str(tmp_path / "m.nnef.tgz"), str(tmp_path / "x.npy")
    r = t2n.export(Both().eval(), (torch.randn(5, 2, 3),), p)
    assert r.op_histogram["tract_core_scan"] == 1 and r.op_histogram["tract_core_gru_seq"] == 1
    np.save(xp, torch.randn(5, 2, 3).numpy())
    out = subprocess.run([sys.executable, "-c", _STATE_RUNS, p, xp], capture_output=True,
                         text=True, timeout=300)
    assert out.stdout.strip() == "True", out.stdout + out.stderr[-2000:]


def test_reproducible_bytes(tmp_path):
    m = _make("gru", input_size=3, hidden_size=4, num_layers=2, bidirectional=True)
    x = torch.randn(5, 2, 3)
    a, b = str(tmp_path / "a.nnef.tgz"), str(tmp_path / "b.nnef.tgz")
    t2n.export(m, (x,), a)
    t2n.export(m, (x,), b)
    with open(a, "rb") as fa, open(b, "rb") as fb:
        assert fa.read() == fb.read()


def test_training_dropout_refused(tmp_path):
    m = _make("lstm", input_size=3, hidden_size=4, num_layers=2, dropout=0.5)

    class Train(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = m

        def forward(self, x):
            return torch._VF.lstm(x, (torch.zeros(2, 2, 4), torch.zeros(2, 2, 4)),
                                  self.rnn._flat_weights, True, 2, 0.5, True, False,
                                  False)[0]

    with pytest.raises(t2n.UnsupportedOperatorsError, match="aten::lstm.*\n.*dropout=0.5"):
        t2n.export(Train(), (torch.randn(5, 2, 3),), str(tmp_path / "x.nnef.tgz"))
    assert not os.listdir(tmp_path)


# ---------------------------------------------------------------------------- cells
class CellLoop(torch.nn.Module):
    """A cell stepped by a Python loop (unrolled by the trace, as it is in PyTorch)."""

    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def forward(self, x, h):
        c = h
        ys = []
        for t in range(x.shape[0]):
            if isinstance(self.cell, torch.nn.LSTMCell):
                h, c = self.cell(x[t], (h, c))
                ys.append(h + c)
            else:
                h = self.cell(x[t], h)
                ys.append(h)
        return torch.stack(ys)


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
def test_cells(batched):
    cases = {}
    for bias in (True, False):
        for cell in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
            torch.manual_seed(len(cases))
            make = {"lstm": lambda: torch.nn.LSTMCell(3, 4, bias=bias),
                    "gru": lambda: torch.nn.GRUCell(3, 4, bias=bias),
                    "rnn_tanh": lambda: torch.nn.RNNCell(3, 4, bias=bias),
                    "rnn_relu": lambda: torch.nn.RNNCell(3, 4, bias=bias,
                                                         nonlinearity="relu")}
            x = torch.randn(4, 2, 3) if batched else torch.randn(4, 3)
            h = torch.randn(2, 4) if batched else torch.randn(4)
            cases[f"{cell}_bias{bias}"] = (CellLoop(make[cell]()), (x, h))
    check_bundle(cases)


# ---------------------------------------------------------------------------- packed sequences
class Packed(torch.nn.Module):
    """pack_padded_sequence(enforce_sorted=False) -> RNN -> pad_packed_sequence."""

    def __init__(self, rnn, total_length=False, padding_value=0.0, given=False):
        super().__init__()
        self.rnn = rnn
        self.total_length = total_length
        self.padding_value = padding_value
        self.given = given

    def forward(self, x, lengths, *hx):
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

        bf = self.rnn.batch_first
        p = pack_padded_sequence(x, lengths, batch_first=bf, enforce_sorted=False)
        if hx:
            y, h = self.rnn(p, hx if len(hx) == 2 else hx[0])
        else:
            y, h = self.rnn(p)
        total = x.shape[1 if bf else 0] if self.total_length else None
        y, out_lengths = pad_packed_sequence(y, batch_first=bf, total_length=total,
                                             padding_value=self.padding_value)
        return (y, out_lengths) + (tuple(h) if isinstance(h, tuple) else (h,))


def _packed_cases(given):
    cases = {}
    specs = [("lstm", dict(num_layers=2, bidirectional=True, batch_first=True), False, 0.0),
             ("lstm", dict(bidirectional=True, proj_size=2), True, -1.0),
             ("gru", dict(num_layers=2, bidirectional=True, batch_first=True), True, 0.0),
             ("gru", dict(bidirectional=True), False, 0.5),
             ("rnn", dict(bidirectional=True, nonlinearity="relu", batch_first=True), False,
              0.0)]
    for i, (kind, kw, total, pad) in enumerate(specs):
        rnn = _make(kind, seed=i, input_size=3, hidden_size=4, **kw)
        x = _x(rnn, 3, 6)
        args = (x, torch.tensor([6, 2, 4])) + (tuple(_states(rnn, 3)) if given else ())
        cases[f"p{i}_{kind}_total{total}"] = (Packed(rnn, total, pad), args)
    return cases


@pytest.mark.parametrize("given", [False, True], ids=["zero_state", "given_state"])
def test_packed_sequences(given):
    """Runtime lengths: state frozen past each length, zeros (or padding_value) there, the
    reverse direction starting at each sequence's own end; the output as long as the
    longest length when no total_length is given. Several length mixes, one archive."""
    cases = _packed_cases(given)

    def mix(lengths):
        out = []
        for name, (_, args) in cases.items():
            out += [args[0], torch.tensor(lengths)] + list(args[2:])
        return tuple(out)

    check_bundle(cases, more_args=[mix([1, 1, 1]), mix([3, 6, 1]), mix([6, 6, 6]),
                                   mix([2, 5, 5])], capture="trace")  # test_packed_*_export


def test_packed_dynamic_time_and_batch():
    """One archive for every padded length T and batch size B (the sort by length is a
    tract topk whose outputs are named B again, so they meet the states)."""
    rnn = _make("lstm", input_size=3, hidden_size=4, num_layers=2, bidirectional=True,
                batch_first=True)
    m = Packed(rnn)
    assert_exports(m, (_x(rnn, 3, 6), torch.tensor([6, 2, 4])), input_names=["x", "len"],
                   dynamic_axes={"x": {0: "B", 1: "T"}, "len": {0: "B"}}, capture="trace",
                   more_args=[(_x(rnn, 1, 1), torch.tensor([1])),
                              (_x(rnn, 4, 50), torch.tensor([3, 50, 17, 50]))])


def test_packed_data_read_is_refused(tmp_path):
    class Bad(torch.nn.Module):
        def forward(self, x, lengths):
            from torch.nn.utils.rnn import pack_padded_sequence

            return pack_padded_sequence(x, lengths, enforce_sorted=False).data * 2

    with pytest.raises(t2n.UnsupportedOperatorsError, match="packed sequence"):
        t2n.export(Bad(), (torch.randn(5, 2, 3), torch.tensor([5, 3])),
                   str(tmp_path / "x.nnef.tgz"), capture="trace")


def test_packed_sequences_under_export_are_refused_naming_the_other_captures(tmp_path):
    """torch.export cannot hold a packed sequence's sizes (the lengths' values): the default
    capture refuses it in one line naming the model's line and the captures that take it;
    capture='auto' falls back to the trace, saying why."""
    rnn = _make("lstm", input_size=3, hidden_size=4, batch_first=True)
    args = (_x(rnn, 3, 6), torch.tensor([6, 2, 4]))
    with pytest.raises(t2n.TraceError, match=r"cannot capture packed sequences.* at "
                                             r"test_recurrent.py:\d+") as e:
        t2n.export(Packed(rnn), args, str(tmp_path / "p.nnef.tgz"))
    assert any("capture='trace'" in n and "capture='auto'" in n
               for n in getattr(e.value, "__notes__", [])), e.value
    assert not (tmp_path / "p.nnef.tgz").exists()
    with pytest.warns(UserWarning, match="capture='auto': torch.export failed .*packed"):
        r = assert_exports(Packed(rnn), args, capture="auto")
    assert r.capture == "trace"


class RuntimeWeights(torch.nn.Module):
    """Weights computed from an input (scaled at run time): gate reordering and direction
    stacking then happen in the graph."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.rnn = _make(kind, input_size=3, hidden_size=4, bidirectional=True,
                         batch_first=True, proj_size=2 if kind == "lstm" else 0) \
            if kind == "lstm" else _make(kind, input_size=3, hidden_size=4,
                                         bidirectional=True, batch_first=True)

    def forward(self, x, scale):
        params = [p * scale for p in self.rnn._flat_weights]
        batch = x.shape[0]
        if self.kind == "lstm":
            hx = (torch.zeros(2, batch, 2), torch.zeros(2, batch, 4))
            y, h, c = torch._VF.lstm(x, hx, params, True, 1, 0.0, False, True, True)
            cell_h, cell_c = torch.lstm_cell(x[:, 0], (h[0] @ params[4], c[0]), params[0],
                                             params[1] @ params[4], params[2], params[3])
            return y, h, c, cell_h, cell_c
        fn = torch._VF.gru if self.kind == "gru" else torch._VF.rnn_tanh
        y, h = fn(x, torch.zeros(2, batch, 4), params, True, 1, 0.0, False, True, True)
        cell = torch.gru_cell if self.kind == "gru" else torch.rnn_tanh_cell
        return y, h, cell(x[:, 0], h[0], params[0], params[1], params[2], params[3])


def test_runtime_weights():
    cases = {k: (RuntimeWeights(k), (torch.randn(2, 5, 3), torch.tensor(0.7)))
             for k in ("lstm", "gru", "rnn")}
    check_bundle(cases)
