"""Property tests for embedding_bag: random ragged layouts (any number of bags, empty bags
anywhere, padding entries, duplicates) through ONE archive per configuration, exported
with dynamic num_indices and num_bags, must match PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings, strategies as st

import t2n
from t2n.check.tract_runner import TractWorker

VOCAB, DIM, PAD = 7, 4, 3
CONFIGS = {
    "sum-psw-pad": dict(mode="sum", padding_idx=PAD, psw=True),
    "mean-pad-last": dict(mode="mean", padding_idx=PAD, include_last_offset=True),
    "max-pad": dict(mode="max", padding_idx=PAD),
}


class _Bags(nn.Module):
    def __init__(self, psw=False, **kw):
        super().__init__()
        self.e = nn.EmbeddingBag(VOCAB, DIM, **kw)
        self.e.weight.data.normal_()  # non-zero padding row: it must be skipped
        self.psw = psw

    def forward(self, indices, offsets, *weights):
        return self.e(indices, offsets, per_sample_weights=weights[0] if weights else None)


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    torch.manual_seed(0)
    worker = TractWorker()
    out = {}
    for name, cfg in CONFIGS.items():
        cfg = dict(cfg)
        psw = cfg.pop("psw", False)
        model = _Bags(psw, **cfg).eval()
        idx, off = torch.tensor([1, 2, 3]), torch.tensor([0, 1, 3] if
                                                        cfg.get("include_last_offset") else [0, 1])
        args = (idx, off) + ((torch.rand(3),) if psw else ())
        names = ["indices", "offsets"] + (["weights"] if psw else [])
        dyn = {"indices": {0: "N"}, "offsets": {0: "B"}}
        if psw:
            dyn["weights"] = {0: "N"}
        path = str(tmp_path_factory.mktemp(name) / "m.nnef")
        t2n.export(model, args, path, input_names=names, dynamic_axes=dyn)
        out[name] = (model, path, psw, cfg.get("include_last_offset", False))
    yield worker, out
    worker.close()


@st.composite
def layouts(draw):
    """(indices, bag lengths): 0-25 indices split into 1-8 bags, empty bags allowed."""
    n_bags = draw(st.integers(1, 8))
    lengths = draw(st.lists(st.integers(0, 5), min_size=n_bags, max_size=n_bags))
    n = sum(lengths)
    ids = draw(st.lists(st.integers(0, VOCAB - 1), min_size=n, max_size=n))
    weights = draw(st.lists(st.floats(-2, 2, width=32), min_size=n, max_size=n))
    return ids, lengths, weights


@pytest.mark.parametrize("config", list(CONFIGS))
@settings(max_examples=12, deadline=None, derandomize=True)
@given(layout=layouts())
def test_random_offsets(archives, config, layout):
    worker, built = archives
    model, path, psw, ilo = built[config]
    ids, lengths, weights = layout
    idx = torch.tensor(ids, dtype=torch.int64)
    ends = np.cumsum(lengths).tolist()
    off = torch.tensor([0] + ends[:-1] + (ends[-1:] if ilo else []), dtype=torch.int64)
    inputs = (idx, off) + ((torch.tensor(weights, dtype=torch.float32),) if psw else ())
    with torch.no_grad():
        expected = model(*inputs).numpy()
    got = worker.run(path, [x.numpy() for x in inputs])[0]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5,
                               err_msg=f"{config}: ids={ids} lengths={lengths}")
