"""The writer: archives tract loads, byte-reproducible, streamed without copies of weights;
the parallel gzip stream; the progress display and when it stays quiet."""

from __future__ import annotations

import gzip
import io
import os
import re
import tarfile
import tracemalloc
import zlib

import numpy as np
import pytest
import torch

import t2n
from t2n.write import gzstream
from t2n import progress
from t2n.testing import assert_exports
from t2n.write.writer import output_kind

KINDS = ["model.nnef", "model.nnef.tar", "model.nnef.tgz"]


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(300, 700)
        self.b = torch.nn.Linear(700, 5)
        self.register_buffer("mask", torch.arange(5) % 2 == 0)  # bool .dat (bit-packed)

    def forward(self, x):
        y = self.b(torch.relu(self.a(x)))
        return torch.where(self.mask, y, -y)


@pytest.mark.parametrize("filename", KINDS, ids=["dir", "tar", "tgz"])
def test_archive_runs_in_tract(filename):
    assert_exports(_MLP().eval(), (torch.randn(2, 300),), filename=filename)


def _export(tmp_path, name, model=None, **kw):
    model = model or _MLP().eval()
    torch.manual_seed(0)
    path = tmp_path / name
    r = t2n.export(model, (torch.randn(2, 300),), str(path), **kw)
    return path, r


def test_tgz_is_gzip_of_tar_and_reproducible(tmp_path):
    model = _MLP().eval()
    tar, rt = _export(tmp_path, "m.tar", model)
    tgz1, rz = _export(tmp_path, "m1.tgz", model)
    tgz2, _ = _export(tmp_path, "m2.nnef.tar.gz", model)
    assert tgz1.read_bytes() == tgz2.read_bytes()
    assert gzip.decompress(tgz1.read_bytes()) == tar.read_bytes()
    assert rt.archive_bytes == os.path.getsize(tar) and rt.archive_bytes % 10240 == 0
    assert rz.archive_bytes < rt.archive_bytes
    with tarfile.open(tar) as t:
        members = t.getmembers()
        names = [m.name for m in members]
        assert names[0] == "graph.nnef" and names[1:] == sorted(names[1:])
        assert all(m.mtime == 0 and m.uid == 0 and m.mode == 0o644 for m in members)
        w = t.extractfile("a.weight.dat").read()
    expected = model.a.weight.detach().numpy().tobytes()
    assert len(w) == 128 + len(expected) and w[128:] == expected


def test_directory_matches_tar_members(tmp_path):
    model = _MLP().eval()
    d, rd = _export(tmp_path, "m.nnef", model)
    tar, _ = _export(tmp_path, "m.tar", model)
    with tarfile.open(tar) as t:
        for m in t.getmembers():
            assert (d / m.name).read_bytes() == t.extractfile(m).read(), m.name
    assert rd.archive_bytes == sum(p.stat().st_size for p in d.iterdir())


def test_long_member_name_round_trips(tmp_path):
    class Deep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_parameter("w" * 120, torch.nn.Parameter(torch.randn(20, 20)))

        def forward(self, x):
            return x @ getattr(self, "w" * 120)

    assert_exports(Deep().eval(), (torch.randn(3, 20),), filename="m.tgz")


@pytest.mark.parametrize("kind", ["tar", "tgz", "dir"])
def test_weights_stream_without_copies(tmp_path, kind):
    """Writing a 64 MB weight allocates a few MB at most (numpy and bytes allocations are seen
    by tracemalloc): each weight goes to the file by reference, never through tobytes()."""
    big = torch.nn.Linear(4096, 4096, bias=False).eval()
    path = tmp_path / {"tar": "m.tar", "tgz": "m.tgz", "dir": "m.nnef"}[kind]
    x = torch.randn(1, 4096)
    tracemalloc.start()
    try:
        t2n.export(big, (x,), str(path), progress=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    weight = 4096 * 4096 * 4
    limit = 8 * gzstream.PIECE if kind == "tgz" else 4 << 20
    assert peak < limit, f"{kind}: peak traced allocation {peak / 1e6:.1f} MB for a " \
                         f"{weight / 1e6:.0f} MB weight"


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    from t2n.write import writer

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer, "dat_payload", boom)
    for name in ("m.tgz", "m.tar", "m.nnef"):
        with pytest.raises(t2n.UsageError, match="No space left"):
            _export(tmp_path, name)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path,kind", [("a.tgz", "tgz"), ("a.TAR.GZ", "tgz"), ("a.tar", "tar"),
                                       ("a.nnef", "dir"), ("a", "dir")])
def test_output_kind(path, kind):
    assert output_kind(path) == kind


# ------------------------------------------------------------------------------- gzip stream
def _gz(chunks, threads):
    buf = io.BytesIO()
    s = gzstream.GzipStream(buf, threads=threads)
    for c in chunks:
        s.write(c)
    s.close()
    return buf.getvalue()


@pytest.mark.parametrize("threads", [1, 3])
def test_gzip_stream_round_trips(threads):
    rng = np.random.default_rng(0)
    big = rng.standard_normal(3 * gzstream.PIECE // 4 + 17).astype(np.float32)  # 3 pieces + tail
    chunks = [b"head", memoryview(big), b"", np.zeros(100_000, np.uint8), b"x" * 70_000, b"t"]
    out = _gz(chunks, threads)
    data = b"".join(bytes(memoryview(c).cast("B")) for c in chunks)
    assert gzip.decompress(out) == data
    d = zlib.decompressobj(wbits=31)  # one gzip member, nothing after it
    assert d.decompress(out) == data and d.eof and d.unused_data == b""
    assert out == _gz(chunks, 1 if threads > 1 else 2), "output depends on the thread count"


def test_gzip_stream_empty_and_compresses_zero_runs():
    assert gzip.decompress(_gz([], 2)) == b""
    zeros = np.zeros(1 << 22, np.float32)
    assert len(_gz([zeros], 2)) < zeros.nbytes / 100


# ------------------------------------------------------------------------------- progress
class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class _Tty(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def test_bar_waits_for_delay_then_draws_bytes():
    clock, out = _Clock(), _Tty(True)
    bar = progress.Bar(stream=out, delay=2.0, clock=clock)
    bar.start(400_000_000)
    clock.t = 1.0
    bar(100_000_000)
    assert out.getvalue() == ""  # a fast export shows nothing
    clock.t = 2.5
    bar(100_000_000)
    assert "50%" in out.getvalue() and "200.0 MB/400.0 MB" in out.getvalue()
    bar.close()
    assert out.getvalue().endswith("\n")


def test_bar_silent_when_export_is_fast():
    clock, out = _Clock(), _Tty(True)
    bar = progress.Bar(stream=out, clock=clock)
    bar.start(10)
    bar(10)
    bar.close()
    assert out.getvalue() == ""


@pytest.mark.parametrize("env,tty,expected", [
    ({}, True, True), ({}, False, False), ({"CI": "true"}, True, False),
    ({"CI": "1"}, True, False), ({"CI": "0"}, True, True), ({"CI": ""}, True, True)])
def test_auto_mode_terminal_only_and_not_in_ci(monkeypatch, env, tty, expected):
    monkeypatch.delenv("CI", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr("sys.stderr", _Tty(tty))
    assert isinstance(progress.for_export(None), progress.Bar) is expected
    assert progress.for_export(None, quiet=True) is None


def test_explicit_options(monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert isinstance(progress.for_export(True), progress.Bar)
    assert progress.for_export(True, quiet=True) is None
    assert progress.for_export(False) is None
    fn = lambda n: None  # noqa: E731
    assert progress.for_export(fn) is fn
    with pytest.raises(t2n.UsageError, match="progress"):
        progress.for_export("yes")


@pytest.mark.parametrize("filename", KINDS, ids=["dir", "tar", "tgz"])
def test_export_reports_every_byte(tmp_path, filename):
    class Counter:
        def __init__(self):
            self.total, self.done, self.calls = None, 0, 0

        def start(self, total):
            self.total = total

        def __call__(self, n):
            self.done += n
            self.calls += 1

    c = Counter()
    _, r = _export(tmp_path, filename, progress=c)
    assert c.total == c.done > 700 * 300 * 4 and c.calls >= 5
    if filename.endswith("nnef"):
        assert c.done == r.archive_bytes


def test_export_quiet_option_draws_nothing(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(progress, "DELAY", 0.0)
    _export(tmp_path, "m.tar", quiet=True, progress=True)
    assert "t2n: writing" not in capfd.readouterr().err
    _export(tmp_path, "m2.tar", progress=True)
    assert "t2n: writing" in capfd.readouterr().err


class _Tied(torch.nn.Module):
    """GPT-2's tied embedding: one table read by a gather and by a rank-3 matmul."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(300, 64)

    def forward(self, ids):
        h = self.emb(ids)
        return torch.nn.functional.linear(h, self.emb.weight)


def test_tied_weight_written_once(tmp_path):
    model = _Tied().eval()
    ids = torch.randint(0, 300, (2, 7))
    assert_exports(model, (ids,), filename="m.tar")
    path = tmp_path / "m.tar"
    t2n.export(model, (ids,), str(path))
    with tarfile.open(path) as t:
        dats = [m for m in t.getmembers() if m.name.endswith(".dat")]
        graph = t.extractfile("graph.nnef").read().decode()
    assert [m.name for m in dats] == ["emb.weight.dat"], graph
    assert sum(m.size for m in dats) == 128 + 300 * 64 * 4


@pytest.mark.parametrize("make", [
    lambda: torch.randn(37, 53).t(),
    lambda: torch.randn(4, 5, 6).permute(2, 0, 1),
    lambda: torch.randn(100)[::3],
    lambda: torch.randn(3, 0, 4).transpose(0, 2),
    lambda: torch.arange(24, dtype=torch.int64).reshape(2, 3, 4).transpose(1, 2),
    lambda: torch.randn(6, 8).half().t()[1:5],
], ids=["t", "permute3d", "strided1d", "empty", "int64", "f16-slice"])
def test_strided_weight_bytes_in_small_pieces(monkeypatch, make):
    from t2n.write import writer

    monkeypatch.setattr(writer, "WRITE_SLICE", 40)  # force row splitting and recursion
    t = make()
    payload = writer.dat_payload(t)
    expected = t.contiguous().numpy().tobytes()
    pieces = [bytes(p) for p in payload]
    assert len(payload) == len(expected) and b"".join(pieces) == expected
    assert all(len(p) <= max(40, t.element_size() * (t.shape[-1] if t.dim() else 1))
               for p in pieces)


def test_transposed_weight_round_trips_in_tract(tmp_path):
    class T(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(40, 30))

        def forward(self, x):
            return x @ self.w.t()  # folded to a strided view of the weight

    assert_exports(T().eval(), (torch.randn(3, 30),), filename="m.tgz")


class _Convs(torch.nn.Module):
    """Convolutions and pools whose arguments are the stdlib's defaults or not."""

    def __init__(self):
        super().__init__()
        self.plain = torch.nn.Conv2d(4, 6, 3, padding=1)  # stride/dilation 1, groups 1
        self.odd = torch.nn.Conv2d(6, 6, 3, stride=(2, 1), dilation=(1, 2), groups=3)
        self.up = torch.nn.ConvTranspose2d(6, 4, 2, stride=2, groups=2)

    def forward(self, x):
        y = self.odd(torch.relu(self.plain(x)))
        y = torch.nn.functional.max_pool2d(y, 3, stride=1, padding=1)
        return self.up(torch.nn.functional.avg_pool2d(y, 2, stride=1, ceil_mode=True))


def test_default_arguments_left_out_of_graph_text(tmp_path):
    # a conv's border/stride/dilation/groups equal to the stdlib default are not written
    # (tract's parser spends per literal); the other values are, and tract computes the same
    from t2n.write.stdlib_defaults import explicit_attrs

    attrs = {"border": "constant", "padding": [(0, 0)], "stride": [1, 1], "dilation": [1, 2],
             "groups": 1}
    assert explicit_attrs("conv", attrs) == {"padding": [(0, 0)], "dilation": [1, 2]}
    assert explicit_attrs("conv", {"groups": 2, "stride": [2, 1], "border": "ignore"}) == \
        {"groups": 2, "stride": [2, 1], "border": "ignore"}
    assert explicit_attrs("matmul", {"transposeA": False, "transposeB": True}) == \
        {"transposeB": True}
    assert explicit_attrs("tract_core_einsum", {"groups": 1}) == {"groups": 1}
    torch.manual_seed(0)
    t2n.export(_Convs().eval(), (torch.randn(1, 4, 9, 10),), str(tmp_path / "c.nnef"),
               check=True)  # tract's outputs compared with torch's
    text = (tmp_path / "c.nnef" / "graph.nnef").read_text()
    convs = [ln for ln in text.splitlines() if "= conv(" in ln or "= deconv(" in ln]
    assert len(convs) == 3, text
    assert "padding = " in convs[0] and "stride" not in convs[0] and "groups" not in convs[0]
    assert "stride = [2, 1]" in text and "dilation = [1, 2]" in text and "groups = 3" in text
    assert "border = 'constant'" not in text


class _Stack(torch.nn.Module):
    """Two convolutions of one geometry, one of another, a reshape and a linear head."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.b = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.c = torch.nn.Conv2d(4, 4, 1, stride=2)
        self.fc = torch.nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        y = self.c(torch.relu(self.b(torch.relu(self.a(x)))))
        return self.fc(y.reshape(y.shape[0], -1))


def test_literal_lists_move_into_shared_fragments(tmp_path):
    # tract's parser spends several times more on a literal nested in a call than on a plain
    # argument: for tract the graph body holds none (t2n.write.shallow_text); ops of one kind and
    # geometry share one fragment; tract computes the same; Khronos keeps the plain lines
    from t2n.archive_info import inspect_archive

    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 6)
    t2n.export(_Stack().eval(), (x,), str(tmp_path / "s.nnef"), check=True)
    text = (tmp_path / "s.nnef" / "graph.nnef").read_text()
    body = text[text.index("graph network"):].splitlines()[3:-1]
    assert body and not [ln for ln in body if "[" in ln], text
    frags = dict(re.findall(r"fragment (\w+)\(.*\n\{\n  output = (\w+)[<(]", text))
    calls = [re.search(r"= (\w+)\(", ln).group(1) for ln in body]
    convs = [c for c in calls if frags.get(c) == "conv"]
    assert len(convs) == 3 and len(set(convs)) == 2, (convs, text)  # a, b share padding 1
    assert sum(frags.get(c) == "variable" for c in calls) == 8, text
    assert inspect_archive(str(tmp_path / "s.nnef"), macs=False).op_histogram["conv"] == 3
    t2n.export(_Stack().eval(), (x,), str(tmp_path / "k.nnef"), target="khronos")
    plain = (tmp_path / "k.nnef" / "graph.nnef").read_text()
    assert "fragment t2n_" not in plain and plain.count("= conv(") == 3, plain
