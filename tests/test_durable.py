"""An archive is on disk before it is renamed to the user's path (t2n.write.durable): the
flush runs beside the engine's load proof, the move waits for it, and a failed flush (a
full disk) fails the export with nothing left behind."""

from __future__ import annotations

import os

import pytest
import torch

import t2n
from t2n.errors import UsageError
from t2n.write import durable


class _Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(x))


def _export(path, **kw):
    torch.manual_seed(0)
    return t2n.export(_Small().eval(), (torch.randn(2, 4),), str(path), quiet=True, **kw)


@pytest.mark.parametrize("name", ["m.nnef.tar", "m.nnef.tgz", "m.nnef"])
def test_every_kind_is_flushed_before_it_reaches_its_path(tmp_path, monkeypatch, name):
    final = tmp_path / name
    flushed = []
    real = durable.flush_to_disk

    def spy(path):
        flushed.append((path, os.path.exists(final)))
        real(path)

    monkeypatch.setattr(durable, "flush_to_disk", spy)
    _export(final)
    assert len(flushed) == 1, f"{name}: flushed {flushed}"
    staged_path, final_existed = flushed[0]
    assert not final_existed, f"{name}: the archive was at its path before its flush"
    assert os.path.dirname(staged_path.rstrip(os.sep)) != str(tmp_path), \
        f"{name}: the flush ran on {staged_path}, not on the staged archive"
    assert final.exists()


def test_a_failed_flush_fails_the_export_and_leaves_nothing(tmp_path, monkeypatch):
    def full(path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(durable, "flush_to_disk", full)
    with pytest.raises(UsageError, match="No space left on device"):
        _export(tmp_path / "m.nnef.tar")
    assert os.listdir(tmp_path) == []


def test_a_check_failure_stays_the_error_when_the_flush_fails_too(tmp_path, monkeypatch):
    from t2n.check import tract_runner
    from t2n.errors import CheckFailedError

    real = tract_runner.run_sets_in_tract  # tract's outputs off by one: the check fails
    monkeypatch.setattr(tract_runner, "run_sets_in_tract",
                        lambda *a, **k: [[o + 1 for o in outs] for outs in real(*a, **k)])

    def full(path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(durable, "flush_to_disk", full)
    with pytest.raises(CheckFailedError):
        _export(tmp_path / "m.nnef.tar", check=True)
    assert os.listdir(tmp_path) == []


def test_flush_to_disk_syncs_a_file_and_each_file_of_a_folder(tmp_path, monkeypatch):
    (tmp_path / "a.tar").write_bytes(b"x" * 10)
    folder = tmp_path / "m.nnef"
    (folder / "sub").mkdir(parents=True)
    for n in ("graph.nnef", "w.dat", "sub/v.dat"):
        (folder / n).write_bytes(b"y")
    synced = []
    real = os.fsync

    def spy(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    durable.flush_to_disk(str(tmp_path / "a.tar"))
    durable.flush_to_disk(str(folder) + os.sep)
    assert synced == [str(tmp_path / "a.tar"), str(folder / "graph.nnef"), str(folder / "w.dat"),
                      str(folder), str(folder / "sub" / "v.dat"), str(folder / "sub")]
