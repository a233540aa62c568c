"""`t2n inspect`: inputs, outputs, op histogram, parameters per weight format and MACs of an
archive, for tract archives (tract's cost model) and Khronos ones (nnef-tools' counter)."""

from __future__ import annotations

import json

import pytest
import torch

import t2n
from t2n.archive_info import inspect_archive
from t2n.cli import main


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


# conv: out volume 8*10*10, 3*3*3 taps each; linear: 5 outputs of 8 taps (per batch row);
# tract's cost model also counts each bias add as one FMA per output
CONV_MACS = 8 * 10 * 10 * 27
FC_MACS = 5 * 8 + 8 * 10 * 10 + 8


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    return e.value.code, capsys.readouterr()


@pytest.mark.parametrize("target", ["tract", "khronos"])
@pytest.mark.parametrize("suffix", [".nnef", ".nnef.tgz"])
def test_inspect_reports_what_the_archive_holds(tmp_path, target, suffix):
    path = str(tmp_path / f"m{suffix}")
    t2n.export(ConvNet().eval(), (torch.randn(1, 3, 10, 10),), path, target=target,
               input_names=["image"], output_names=["logits"])
    info = inspect_archive(path)
    assert info.dialect == target
    assert info.inputs == [{"name": "image", "shape": [1, 3, 10, 10], "dtype": "f32"}]
    assert info.outputs == [{"name": "logits", "shape": [1, 5], "dtype": "f32"}]
    assert info.op_histogram["conv"] == 1 and info.op_histogram["relu"] == 1
    assert info.params == sum(p.numel() for p in ConvNet().parameters())
    assert info.by_format() == {"f32": {"tensors": 4, "params": info.params,
                                        "bytes": 4 * info.params}}
    assert CONV_MACS <= info.macs <= CONV_MACS + FC_MACS + 5, (target, info.macs)


def test_inspect_symbols_and_json(tmp_path, capsys):
    path = str(tmp_path / "m.nnef.tar")
    t2n.export(ConvNet().eval(), (torch.randn(2, 3, 10, 10),), path, input_names=["x"],
               dynamic_axes={"x": {0: "B"}})
    code, out = run_cli(["inspect", path, "--set", "B=4", "--json"], capsys)
    assert code == 0, out.err
    d = json.loads(out.out)
    assert d["symbols"] == ["B"] and d["inputs"][0]["shape"] == ["B", 3, 10, 10]
    assert d["outputs"][0]["shape"] == ["B", 5]  # as the archive declares it
    assert 4 * CONV_MACS <= d["macs"] <= 4 * (CONV_MACS + FC_MACS + 5)
    code, out = run_cli(["inspect", path], capsys)
    assert code == 0 and "MACs:" in out.out and "tract's cost model, B=1" in out.out
    assert "output output_0: Bx5 f32" in out.out, out.out


def test_inspect_weight_formats(tmp_path):
    path = str(tmp_path / "m.nnef")
    t2n.export(_Mixed().eval(), (torch.randint(0, 10, (2,)),), path)
    info = inspect_archive(path, macs=False)
    fmts = info.by_format()
    assert fmts["f16"] == {"tensors": 1, "params": 40, "bytes": 80}
    assert fmts["i64"]["params"] == 3
    assert info.macs is None


class _Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(10, 4).half())
        self.register_buffer("offsets", torch.tensor([5, -3, 2]))

    def forward(self, ids):
        return self.table[ids].float().sum(1, keepdim=True) + self.offsets[ids % 3, None]


def test_inspect_refuses_what_is_not_an_archive(tmp_path, capsys):
    code, out = run_cli(["inspect", str(tmp_path / "missing.tgz")], capsys)
    assert code == 2 and "no such file" in out.err
    bad = tmp_path / "x.tgz"
    bad.write_bytes(b"not a tar")
    code, out = run_cli(["inspect", str(bad)], capsys)
    assert code == 2 and "not a folder, tar or tgz" in out.err
    code, out = run_cli(["inspect", str(tmp_path), "--set", "B=x"], capsys)
    assert code == 2


def test_inspect_names_q4_0_weights(tmp_path):
    lin = torch.nn.Linear(64, 8).eval()
    path = str(tmp_path / "q.nnef")
    t2n.export(lin, (torch.randn(2, 64),), path, weights="q4_0")
    fmts = inspect_archive(path, macs=False).by_format()
    assert fmts["q4_0"]["params"] == 64 * 8 and "q8_1" not in fmts, fmts


def test_member_climbing_out_of_the_archive_is_refused(tmp_path, monkeypatch):
    # the MAC count unpacks a tar into a temporary folder: a crafted member name such as
    # ../escape.dat must not write beside it
    import io
    import tarfile
    import tempfile

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(work))  # the unpacking folder goes here
    graph = b"version 1.0;\nextension tract_registry tract_core;\ngraph g(x) -> (x) { }\n"
    with tarfile.open(work / "evil.tar", "w") as t:
        for name, data in (("graph.nnef", graph), ("../escape.dat", b"\0" * 128)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    with pytest.raises(t2n.UsageError, match="outside the archive"):
        inspect_archive(str(work / "evil.tar"))
    assert sorted(p.name for p in work.iterdir()) == ["evil.tar"]


def _tiny_bert():
    import transformers

    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64)
    return transformers.BertModel(cfg).eval()


@pytest.mark.parametrize("case", ["resnet18", "resnet18-f16", "bert"])
def test_inspect_counts_ops_as_export_does(tmp_path, case, capsys):
    # one count for both: fragments (t2n_gelu, t2n_layer_norm_affine) are one op each,
    # not one plus each op of their body (inspect counted BERT's 99 ops as 111 before)
    from fixtures.models import make_resnet18

    path = str(tmp_path / "m.nnef.tgz")
    if case == "bert":
        args = {"input_ids": torch.randint(0, 100, (1, 8)),
                "attention_mask": torch.ones(1, 8, dtype=torch.long)}
        r = t2n.export(_tiny_bert(), args, path, quiet=True,
                       dynamic_axes={"input_ids": {1: "S"}, "attention_mask": {1: "S"}})
        assert r.op_histogram["t2n_gelu"] == 2 and "tract_core_erf" not in r.op_histogram
    else:
        r = t2n.export(make_resnet18().eval(), (torch.randn(1, 3, 64, 64),), path, quiet=True,
                       weights="f16" if case.endswith("f16") else "f32")
        assert r.op_histogram["conv"] == 20
    info = inspect_archive(path, macs=False)
    assert info.op_histogram == r.op_histogram, case
    code, out = run_cli(["inspect", path, "--no-macs", "--json"], capsys)
    assert code == 0 and json.loads(out.out)["op_count"] == r.op_count
