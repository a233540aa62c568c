"""weights="f16" / "q4_0": compressed archives that tract runs, checked on the same rounded
weights; the report lists what was compressed; the user's model is untouched."""

import os
import struct
import tarfile

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import t2n
from t2n.cli import cli
from t2n.errors import UsageError
from t2n.testing import tract_ops
from t2n.write.weight_formats import Q4_BLOCK, q4_0_blocks


class Mixed(torch.nn.Module):
    """Embedding, linears (one with a reduced axis of 40), a raw x @ W parameter and a norm."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(100, 64)
        self.l1 = torch.nn.Linear(64, 96)
        self.l2 = torch.nn.Linear(96, 40)
        self.l3 = torch.nn.Linear(40, 8)
        self.w = torch.nn.Parameter(torch.randn(64, 32))
        self.ln = torch.nn.LayerNorm(64)
        with torch.no_grad():  # an affine that is not the identity (which folding drops)
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, ids):
        e = self.ln(self.emb(ids))
        return self.l3(self.l2(torch.relu(self.l1(e)))), e @ self.w


def _model(cls=Mixed, seed=0):
    torch.manual_seed(seed)
    return cls().eval()


def _state(m):
    return {k: v.clone() for k, v in m.state_dict().items()}


def _dat_items(path):
    """{member: (bits per item, item code, vendor)} of a .tgz archive."""
    out = {}
    with tarfile.open(path) as t:
        for mem in t.getmembers():
            if mem.name.endswith(".dat"):
                head = t.extractfile(mem).read(128)
                out[mem.name] = struct.unpack_from("<IHH", head, 44)
    return out


@pytest.mark.parametrize("weights", ["f16", "q4_0"])
def test_compressed_export_matches_rounded_model_and_reports_cost(tmp_path, weights):
    m = _model()
    before = _state(m)
    ids = torch.randint(0, 100, (2, 5))
    path = tmp_path / f"m_{weights}.nnef.tgz"
    r = t2n.export(m, (ids,), path, check=True, weights=weights)
    assert r.passed
    for k, v in m.state_dict().items():
        assert torch.equal(before[k], v), f"export with weights={weights} modified {k}"
    errs = r.extras["weights_error"]
    assert set(errs) == {"output_0", "output_1"}
    assert all(0 < e["max_abs_err"] < 10 for e in errs.values())  # rounding is not free
    text = r.report()
    assert f"weights {weights}:" in text and "error against the original" in text
    items = _dat_items(path)
    compressed = {c["label"] for c in r.extras["weights"]["compressed"]}
    if weights == "f16":
        assert compressed == {"emb.weight", "ln.weight", "ln.bias", "l1.weight", "l1.bias",
                              "l2.weight", "l2.bias", "l3.weight", "l3.bias", "w"}
        assert all(items[f"{k}.dat"] == (16, 0, 0) for k in compressed)
        assert "compute stays f32" in text
    else:
        assert compressed == {"emb.weight", "l1.weight", "l2.weight", "w"}
        assert all(items[f"{k}.dat"] == (0xFFFFFFFF, 0x3040, 0x5452) for k in compressed)
        assert items["l3.weight.dat"] == (32, 0, 0)  # reduced axis 40: kept
        kept = {k["label"]: k["reason"] for k in r.extras["weights"]["kept"]}
        assert "not a multiple of 32" in kept["l3.weight"]
        assert "l1.bias" in kept


def test_q4_0_blocks_layout_and_rounding():
    rows = np.random.default_rng(1).standard_normal((5, Q4_BLOCK)).astype(np.float32)
    rows[1] = 0.0
    blocks, deq = q4_0_blocks(rows)
    assert blocks.shape == (5, 18)
    scale = blocks[:, :2].copy().view(np.float16)[:, 0].astype(np.float32)
    lo, hi = blocks[:, 2:] & 15, blocks[:, 2:] >> 4
    q = np.concatenate([lo, hi], axis=1).astype(np.float32)  # byte j: values j and j+16
    np.testing.assert_array_equal(deq, (q - 8) * scale[:, None])
    np.testing.assert_array_equal(deq[1], 0)
    step = np.abs(scale)[:, None]
    # the nearest of the 16 levels -8..7 (the largest magnitude maps to -8 exactly); only
    # values beyond +7 steps on the other side are clipped, by at most one more step
    bound = np.where(q == 15, 1.0, 0.5) * step * 1.001 + 1e-6
    assert (np.abs(deq - rows) <= bound).all()
    extreme = np.abs(rows).argmax(axis=1)
    np.testing.assert_allclose(deq[np.arange(5), extreme], rows[np.arange(5), extreme],
                               rtol=1e-3)


def test_linear_heavy_archive_ratios_and_reproducible_bytes(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(3)]).eval()
    x = torch.randn(4, 256)
    sizes = {}
    for w in ("f32", "f16", "q4_0"):
        sizes[w] = t2n.export(m, (x,), tmp_path / f"{w}.tar", check=(w != "f32"),
                              weights=w).archive_bytes
    assert sizes["f16"] <= 0.55 * sizes["f32"]
    assert sizes["q4_0"] <= 0.20 * sizes["f32"]
    t2n.export(m, (x,), tmp_path / "again.tar", weights="q4_0")
    assert (tmp_path / "again.tar").read_bytes() == (tmp_path / "q4_0.tar").read_bytes()


class TiedLM(torch.nn.Module):
    """GPT-2 style: tied embedding/head, a Conv1D-like x @ W + b with W [in, out]."""

    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(50, 64)
        self.c_fc = torch.nn.Parameter(torch.randn(64, 128) * 0.1)
        self.b_fc = torch.nn.Parameter(torch.zeros(128))
        self.proj = torch.nn.Linear(128, 64)
        self.head = torch.nn.Linear(64, 50, bias=False)
        self.head.weight = self.wte.weight
        self.ln_f = torch.nn.LayerNorm(64)  # its scale is not folded into the tied head
        with torch.no_grad():
            self.ln_f.weight.uniform_(0.5, 1.5)

    def forward(self, ids):
        h = self.wte(ids)
        h = h + self.proj(torch.relu(torch.addmm(self.b_fc, h.view(-1, 64), self.c_fc)
                                     .view(h.shape[0], h.shape[1], 128)))
        return self.head(self.ln_f(h))


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_q4_0_tied_table_and_transposed_weight_with_dynamic_axis(tmp_path, capture):
    m = _model(TiedLM)
    ids = torch.randint(0, 50, (1, 7))
    path = tmp_path / "lm.nnef"
    r = t2n.export(m, (ids,), path, check=True, weights="q4_0", input_names=["ids"],
                   dynamic_axes={"ids": {1: "S"}}, capture=capture)
    got = {c["label"]: c["use"] for c in r.extras["weights"]["compressed"]}
    assert got == {"wte.weight": "gather+matmul", "c_fc": "matmul", "proj.weight": "linear"}
    assert sorted(p for p in os.listdir(path) if p.startswith("wte")) == ["wte.weight.dat"]
    graph = (path / "graph.nnef").read_text()
    assert "datum_type = 'f32'" in graph  # gathers from a block table name their type
    from t2n.api import check_archive
    from t2n.check.compressed import rounded_copy

    g = t2n.api.export_graph(m, (ids,), weights="q4_0", capture=capture)
    ref = rounded_copy(m, g)
    assert ref.wte.weight.data_ptr() == ref.head.weight.data_ptr()  # still tied
    assert m.b_fc is ref.b_fc  # untouched parameters are shared, not copied
    more = torch.randint(0, 50, (1, 12))
    assert all(c.ok for c in check_archive(str(path), ref, (more,), ["output_0"]))


def test_unknown_format_is_refused_before_the_trace():
    with pytest.raises(UsageError, match="weights='q8' is not a weight format"):
        t2n.export(_model(), (torch.zeros(1, 2, dtype=torch.long),), "/tmp/x.tgz",
                   weights="q8")


def test_f16_model_and_out_of_range_weights_stay_as_held(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 4).half().eval()
    r = t2n.export(m, (torch.randn(2, 8).half(),), tmp_path / "h.tgz", weights="f16",
                   check=True, rtol=1e-2, atol=1e-2)
    assert "float16 already" in r.report() and not r.extras["weights"]["compressed"]
    big = torch.nn.Linear(8, 4).eval()
    with torch.no_grad():
        big.weight[0, 0] = 1e6
    r = t2n.export(big, (torch.randn(2, 8),), tmp_path / "b.tgz", weights="f16", check=True)
    kept = {k["label"]: k["reason"] for k in r.extras["weights"]["kept"]}
    assert kept == {"weight": "values beyond the f16 range"}
    assert r.extras["weights"]["compressed"][0]["label"] == "bias"


def test_cli_weights_option(tmp_path):
    out = tmp_path / "mlp.nnef.tgz"
    res = CliRunner().invoke(cli, ["export", "cli_models:make_mlp", "-o", str(out), "--input",
                                   "x:3x8:f32", "--check", "--weights", "f16", "--json"])
    assert res.exit_code == 0, res.output
    import json

    d = json.loads(res.stdout)
    assert d["passed"] and d["weights"]["format"] == "f16" and d["weights_error"]


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 32, 3, padding=1)  # rows of 27: kept
        self.body = torch.nn.Conv2d(32, 64, 3, stride=2, padding=1)  # rows of 288
        self.grouped = torch.nn.Conv2d(64, 64, 3, padding=2, dilation=2, groups=2)  # 288
        self.dw = torch.nn.Conv2d(64, 64, 3, padding=1, groups=64)  # rows of 9: kept
        self.bn = torch.nn.BatchNorm2d(64)
        self.c1d = torch.nn.Conv1d(64, 32, 1)  # rows of 64
        self.fc = torch.nn.Linear(32, 10)
        self.scaled = torch.nn.Conv2d(64, 64, 1, bias=False)  # batch norm after: folded
        self.bn2 = torch.nn.BatchNorm2d(64)
        with torch.no_grad():
            self.bn2.running_var.uniform_(0.5, 2)

    def forward(self, x):
        x = torch.relu(self.body(torch.relu(self.stem(x))))
        x = self.bn(self.dw(self.grouped(x)))
        x = self.bn2(self.scaled(x))
        x = self.c1d(x.flatten(2)).mean(-1)
        return self.fc(x)


def test_q4_0_convolution_filters(tmp_path):
    m = _model(SmallCNN)
    r = t2n.export(m, (torch.randn(2, 3, 16, 16),), tmp_path / "cnn.tgz", check=True,
                   weights="q4_0")
    got = {c["label"] for c in r.extras["weights"]["compressed"]}
    # the batch norms fold into dw and scaled first (their folded filters are compressed
    # where their rows allow it: the check maps the rounding back onto the model weights)
    assert got == {"body.weight", "grouped.weight", "c1d.weight", "fc.weight", "scaled.weight"}
    assert r.op_histogram.get("mul", 0) == 0 and "batch_normalization" not in r.op_histogram
    kept = {k["label"]: k["reason"] for k in r.extras["weights"]["kept"]}
    assert "rows of 27" in kept["stem.weight"] and "rows of 9" in kept["dw.weight"]


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_f32_tied_head_is_stored_once(tmp_path, capture):
    """The final layer norm's scale is not folded into the head tied to the embedding: that
    would store a second, scaled copy of the table (GPT-2: 150 MB). The table is named by
    its first state_dict name under both captures (torch.export lifts both names)."""
    m = _model(TiedLM)
    ids = torch.randint(0, 50, (1, 7))
    path = tmp_path / "lm.nnef"
    t2n.export(m, (ids,), path, check=True, capture=capture)
    table = os.path.getsize(path / "wte.weight.dat")
    tables = [p for p in os.listdir(path) if os.path.getsize(path / p) == table]
    assert tables == ["wte.weight.dat"], tables


def test_tied_model_weights_are_the_same_files_whichever_capture(tmp_path):
    """Users rely on the weight files' labels (state_dict names): the same files, the same
    bytes, from the trace and from torch.export."""
    m = _model(TiedLM)
    ids = torch.randint(0, 50, (1, 7))
    files = {}
    for capture in ("trace", "export"):
        path = tmp_path / f"{capture}.nnef"
        t2n.export(m, (ids,), path, capture=capture, input_names=["ids"],
                   dynamic_axes={"ids": {1: "S"}})
        files[capture] = {p: (path / p).read_bytes() for p in os.listdir(path)
                          if p.endswith(".dat")}
    assert sorted(files["export"]) == sorted(files["trace"])
    assert files["export"] == files["trace"]


def test_f16_weights_over_the_fold_budget_are_cast_at_load(tmp_path):
    """A stored f16 weight whose f32 form outweighs tract's 4 MiB fold budget is cast back
    in slices that tract folds at load: no Cast left to run at every inference (GPT-2 small
    with f16 weights ran 7x slower than float32 before), outputs as the rounded model."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1100, 1024), torch.nn.Tanh(),
                                torch.nn.Linear(1024, 8)).eval()
    path = tmp_path / "f16.nnef.tar"
    t2n.export(model, (torch.randn(2, 1100),), str(path), weights="f16", check=True,
               quiet=True)
    with tarfile.open(path) as tar:
        graph = tar.extractfile("graph.nnef").read().decode()
    # 1100 x 1024 values: two slices of at most 2**20 (4 MiB of float32) cast each
    assert graph.count(" = slice(") == 2 and graph.count(" = concat(") == 1, graph
    ops = tract_ops(path)
    assert "Cast" not in ops, f"tract casts a weight at every run: {ops}"
