"""Recurrent models end to end (slow): a conv front end + BiGRU keyword spotter, an
embedding + 2-layer LSTM language model with a tied decoder, a packed-sequence classifier
over several length mixes, and hypothesis over layer sizes. Each is exported once and run
in tract at several lengths."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from t2n.testing import assert_exports

pytestmark = pytest.mark.slow


class KwsBiGru(torch.nn.Module):
    """log-mel (B, 1, mels, T) -> conv2d strided in frequency -> frames -> BiGRU ->
    per-frame class log-probabilities."""

    def __init__(self, mels=16, channels=6, hidden=12, classes=5):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, channels, 3, stride=(2, 1), padding=1)
        self.bn = torch.nn.BatchNorm2d(channels)
        self.gru = torch.nn.GRU(channels * ((mels + 1) // 2), hidden, num_layers=2,
                                bidirectional=True, batch_first=True)
        self.fc = torch.nn.Linear(2 * hidden, classes)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        b, c, f, t = h.shape
        h = h.reshape(b, c * f, t).transpose(1, 2)  # (B, T, C*F)
        y, _ = self.gru(h)
        return self.fc(y).log_softmax(-1)


def test_kws_conv_bigru():
    torch.manual_seed(0)
    m = KwsBiGru().eval()
    assert_exports(m, (torch.randn(2, 1, 16, 20),), input_names=["mel"],
                   dynamic_axes={"mel": {0: "B", 3: "T"}},
                   more_args=[(torch.randn(1, 1, 16, 1),), (torch.randn(3, 1, 16, 300),)])


class LstmLm(torch.nn.Module):
    """Embedding -> 2-layer LSTM (dropout, eval) -> decoder tied to the embedding."""

    def __init__(self, vocab=50, dim=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.lstm = torch.nn.LSTM(dim, dim, num_layers=2, dropout=0.2, batch_first=True)
        self.decoder = torch.nn.Linear(dim, vocab)
        self.decoder.weight = self.emb.weight

    def forward(self, ids, h, c):
        y, (h, c) = self.lstm(self.emb(ids), (h, c))
        return self.decoder(y), h, c


def test_lstm_language_model_tied_decoder(tmp_path):
    torch.manual_seed(0)
    m = LstmLm().eval()
    h, c = torch.randn(2, 2, 16), torch.randn(2, 2, 16)
    r = assert_exports(m, (torch.randint(0, 50, (2, 7)), h, c), input_names=["ids", "h", "c"],
                       dynamic_axes={"ids": {0: "B", 1: "T"}, "h": {1: "B"}, "c": {1: "B"}},
                       more_args=[(torch.randint(0, 50, (1, 1)), h[:, :1], c[:, :1]),
                                  (torch.randint(0, 50, (3, 300)), torch.randn(2, 3, 16),
                                   torch.randn(2, 3, 16))])
    assert r.op_histogram["tract_core_scan"] == 2


class PackedClassifier(torch.nn.Module):
    """Embedding -> packed BiLSTM over runtime lengths -> mean of valid steps -> logits."""

    def __init__(self, vocab=30, dim=8, hidden=10, classes=3):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim, padding_idx=0)
        self.lstm = torch.nn.LSTM(dim, hidden, bidirectional=True, batch_first=True)
        self.fc = torch.nn.Linear(2 * hidden, classes)

    def forward(self, ids, lengths):
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

        p = pack_padded_sequence(self.emb(ids), lengths, batch_first=True,
                                 enforce_sorted=False)
        y, (h, _) = self.lstm(p)
        y, out_len = pad_packed_sequence(y, batch_first=True, total_length=ids.shape[1])
        pooled = y.sum(1) / out_len.unsqueeze(1).to(y.dtype)
        return self.fc(pooled), torch.cat([h[0], h[1]], 1)


def test_packed_classifier_length_mixes():
    torch.manual_seed(0)
    m = PackedClassifier().eval()
    ids = torch.randint(1, 30, (4, 9))
    # packed sequences: the trace's (torch.export refuses them, tests/test_recurrent.py)
    assert_exports(m, (ids, torch.tensor([9, 3, 5, 1])), input_names=["ids", "len"],
                   dynamic_axes={"ids": {1: "T"}}, capture="trace",
                   more_args=[(ids, torch.tensor([1, 1, 1, 1])),
                              (ids, torch.tensor([9, 9, 9, 9])),
                              (torch.randint(1, 30, (4, 40)), torch.tensor([40, 2, 39, 17]))])


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["lstm", "gru", "rnn"]), input_size=st.integers(1, 9),
       hidden=st.integers(1, 9), layers=st.integers(1, 2), bidirectional=st.booleans(),
       batch_first=st.booleans(), bias=st.booleans(), batch=st.integers(1, 3),
       steps=st.integers(1, 8), proj=st.integers(0, 3))
def test_sizes_property(kind, input_size, hidden, layers, bidirectional, batch_first, bias,
                        batch, steps, proj):
    torch.manual_seed(0)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}[kind]
    kw = dict(num_layers=layers, bidirectional=bidirectional, batch_first=batch_first,
              bias=bias)
    if kind == "lstm" and 0 < proj < hidden:
        kw["proj_size"] = proj
    rnn = cls(input_size, hidden, **kw).eval()

    class Outs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = rnn

        def forward(self, x):
            y, h = self.rnn(x)
            return (y,) + (tuple(h) if isinstance(h, tuple) else (h,))

    shape = (batch, steps, input_size) if batch_first else (steps, batch, input_size)
    assert_exports(Outs().eval(), (torch.randn(*shape),))
