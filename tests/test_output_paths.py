"""What an export may write over (t2n.write.output_paths): only an archive t2n could have
written; a user's folder, file or symbolic link is refused before the trace and at the final
move, and nothing on disk changes. Each writer (export, the writer itself, keep_failed,
T2N_KEEP_FAILED) is pinned here; the CLI, ``t2n check`` and ``t2n llm`` in their own files."""

from __future__ import annotations

import os
import tarfile

import pytest
import torch

import t2n
from t2n.write import output_paths, staging, writer
from t2n.errors import OutputPathError, UsageError


class _Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)


def _export(path, **kw):
    torch.manual_seed(0)
    return t2n.export(_Small().eval(), (torch.randn(1, 4),), str(path), **kw)


def snapshot(root) -> dict:
    """{relative path: bytes, or 'dir', or 'link->target'} of everything under ``root``."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            full = os.path.join(dirpath, n)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                out[rel] = "link->" + os.readlink(full)
            elif os.path.isdir(full):
                out[rel] = "dir"
            else:
                with open(full, "rb") as f:
                    out[rel] = f.read()
    return out


def _user_project(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "notes.txt").write_text("my notes\n")
    (proj / "train.py").write_text("print('train')\n")
    return proj


# ---------------------------------------------------------------------------- kinds
@pytest.mark.parametrize("path,kind", [
    ("a.tgz", "tgz"), ("a.TAR.GZ", "tgz"), ("a.tar", "tar"), ("a.nnef.tar", "tar"),
    ("a.nnef", "dir"), ("out/model", "dir"), ("kept", "dir"), ("m.zip/", "dir"),
    ("notes.txt" + os.sep, "dir")])
def test_output_kind_from_the_name(path, kind):
    assert output_paths.output_kind(path) == kind


@pytest.mark.parametrize("name", ["m.zip", "notes.txt", "model.onnx", "model.pt"])
def test_unknown_suffix_is_refused_before_the_trace(tmp_path, name, monkeypatch):
    # refused before the trace: the model is never run
    calls = []
    model = _Small().eval()
    model.register_forward_hook(lambda *a: calls.append(1))
    with pytest.raises(OutputPathError) as e:
        t2n.export(model, (torch.randn(1, 4),), str(tmp_path / name))
    msg = str(e.value)
    assert name in msg and f"{tmp_path / name}{os.sep}" in msg and "slash" in msg, msg
    assert calls == [] and list(tmp_path.iterdir()) == []


def test_unknown_suffix_over_a_user_file_names_it(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    msg = _refuses(tmp_path / "notes.txt", tmp_path, "slash",
                   f"{tmp_path / 'notes.txt'} is an existing file that is not an NNEF "
                   "tar archive")
    assert msg.startswith(f"cannot write {tmp_path / 'notes.txt'}")


def test_trailing_slash_asks_for_a_folder_of_any_name(tmp_path):
    r = _export(f"{tmp_path / 'm.zip'}{os.sep}", check=True)
    assert r.passed and sorted(os.listdir(tmp_path / "m.zip")) == ["fc.bias.dat",
                                                                   "fc.weight.dat",
                                                                   "graph.nnef"]
    assert sorted(os.listdir(tmp_path)) == ["m.zip"]  # no staging left
    _export(f"{tmp_path / 'm.zip'}{os.sep}")  # and it is replaced by a re-export


# ---------------------------------------------------------------------------- refusals
def _refuses(path, tmp_path, *words, named=None, **kw):
    """Export to ``path`` is refused, naming ``named`` (default ``path``) and ``words``,
    and nothing under ``tmp_path`` changed."""
    before = snapshot(tmp_path)
    with pytest.raises(OutputPathError) as e:
        _export(path, **kw)
    assert isinstance(e.value, UsageError) and e.value.exit_code == 2
    msg = str(e.value)
    assert str(named or path) in msg and "nothing was changed" in msg, msg
    for w in words:
        assert w in msg, (w, msg)
    assert snapshot(tmp_path) == before  # bytes and listings alike
    return msg


def test_folder_with_user_files_is_refused(tmp_path):
    proj = _user_project(tmp_path)
    _refuses(proj, tmp_path, "notes.txt", "train.py")
    _refuses(f"{proj}{os.sep}", tmp_path, "notes.txt")


def test_archive_folder_with_a_user_file_added_is_refused(tmp_path):
    out = tmp_path / "m.nnef"
    _export(out)
    (out / "README.md").write_text("mine")
    _refuses(out, tmp_path, "README.md")


def test_many_foreign_entries_are_named_in_part(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    for i in range(10):
        (proj / f"f{i}.txt").write_text(str(i))
    msg = _refuses(proj, tmp_path, "f0.txt, f1.txt, f2.txt, ...")
    assert "f5.txt" not in msg


def test_folder_of_dat_files_without_graph_is_refused(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "samples.dat").write_bytes(b"\0" * 16)
    _refuses(data, tmp_path, "no graph.nnef")


@pytest.mark.parametrize("name", ["model", "m.nnef", "m.tar", "m.tgz"])
def test_existing_user_file_is_refused(tmp_path, name):
    (tmp_path / name).write_text("not an archive")
    _refuses(tmp_path / name, tmp_path, "not")


def test_tar_of_other_files_is_refused(tmp_path):
    src = tmp_path / "code.py"
    src.write_text("x = 1\n")
    with tarfile.open(tmp_path / "backup.tar", "w") as t:
        t.add(src, arcname="code.py")
    _refuses(tmp_path / "backup.tar", tmp_path, "code.py")


def test_folder_where_a_tar_goes_is_refused(tmp_path):
    (tmp_path / "m.tar").mkdir()
    _refuses(tmp_path / "m.tar", tmp_path, "folder")


@pytest.mark.parametrize("name", ["m.nnef", "m.tar"])
def test_symbolic_link_is_refused(tmp_path, name):
    target = tmp_path / "elsewhere"
    _export(target)  # even to an archive: the link is the user's
    os.symlink(target, tmp_path / name)
    _refuses(tmp_path / name, tmp_path, "symbolic link", str(target))


# ---------------------------------------------------------------------------- replacements
@pytest.mark.parametrize("name", ["m.nnef", "m.tar", "m.tgz", "model"])
def test_re_export_replaces_a_previous_archive(tmp_path, name):
    path = tmp_path / name
    _export(path)
    first = snapshot(tmp_path)
    with torch.no_grad():
        model = _Small().eval()
        model.fc.bias.fill_(7.0)
    t2n.export(model, (torch.randn(1, 4),), str(path), check=True)
    assert sorted(os.listdir(tmp_path)) == [name]  # nothing set aside is left behind
    assert snapshot(tmp_path) != first


def test_empty_folder_is_filled(tmp_path):
    (tmp_path / "out").mkdir()
    _export(tmp_path / "out")
    assert "graph.nnef" in os.listdir(tmp_path / "out")


def test_archive_folder_with_label_subfolders_is_replaced(tmp_path):
    # NNEF labels with '/' are .dat files in sub-folders (nnef-tools writes them so)
    out = tmp_path / "m.nnef"
    (out / "layer").mkdir(parents=True)
    (out / "graph.nnef").write_text("version 1.0;\n")
    (out / "layer" / "w.dat").write_bytes(b"\0" * 128)
    _export(out)
    assert not (out / "layer").exists()


# ---------------------------------------------------------------------------- the final move
def test_final_move_checks_again(tmp_path, monkeypatch):
    # a folder that turned into a user's folder after the fail-fast check is not removed
    out = tmp_path / "m.nnef"
    _export(out)
    real = writer.write

    def write_then_user_adds_a_file(g, path, *a, **k):
        size = real(g, path, *a, **k)
        (out / "notes.txt").write_text("added meanwhile")
        return size

    monkeypatch.setattr(writer, "write", write_then_user_adds_a_file)
    before = None
    with pytest.raises(OutputPathError, match="notes.txt"):
        _export(out)
    before = snapshot(out)
    assert before["notes.txt"] == b"added meanwhile" and "graph.nnef" in before
    assert sorted(os.listdir(tmp_path)) == ["m.nnef"]  # staging and set-aside folders gone


def test_final_move_checks_what_it_removes(tmp_path, monkeypatch):
    # the check at the move is made on what was set aside: a swap just before it is caught
    out = tmp_path / "m.tar"
    _export(out)
    real = output_paths.refusal
    calls = []

    def swap_after_first_check(path, kind):
        calls.append(path)
        reason = real(path, kind)
        if len(calls) == 1 and reason is None:  # the user writes a file there now
            out.unlink()
            out.write_text("user data")
        return reason

    work = tmp_path / "w.tar"
    work.write_bytes(b"archive")
    monkeypatch.setattr(output_paths, "refusal", swap_after_first_check)
    with pytest.raises(OutputPathError, match="not an NNEF tar archive"):
        output_paths.replace(str(work), str(out), "tar")
    assert out.read_text() == "user data" and work.read_bytes() == b"archive"
    assert sorted(os.listdir(tmp_path)) == ["m.tar", "w.tar"]


def test_writer_applies_the_rule_too(tmp_path):
    from t2n.session import ExportSession
    from t2n.walk.builder import Graph

    proj = _user_project(tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(OutputPathError, match="notes.txt"):
        writer.write(Graph(ExportSession()), str(proj))
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------------------- keep_failed
def _failing_check(monkeypatch):
    import t2n.check.tract_runner as tr

    real = tr.run_sets_in_tract  # every input set of the check: tract's outputs off by one
    monkeypatch.setattr(tr, "run_sets_in_tract",
                        lambda *a, **k: [[o + 1 for o in outs] for outs in real(*a, **k)])


def test_keep_failed_refuses_a_user_file_before_the_trace(tmp_path):
    (tmp_path / "keep.tar").write_text("mine")
    msg = _refuses(tmp_path / "m.tar", tmp_path, named=tmp_path / "keep.tar", check=True,
                   keep_failed=str(tmp_path / "keep.tar"))
    assert "not an NNEF tar archive" in msg


def test_keep_failed_must_be_the_same_kind(tmp_path):
    with pytest.raises(OutputPathError, match="names a gzip tar archive but .*m.tar is a "
                       "tar archive"):
        _export(tmp_path / "m.tar", check=True, keep_failed=str(tmp_path / "k.tgz"))
    assert list(tmp_path.iterdir()) == []


def test_keep_failed_replaces_a_previous_kept_archive(tmp_path, monkeypatch):
    _failing_check(monkeypatch)
    keep = tmp_path / "debug" / "k.nnef"
    for _ in range(2):
        with pytest.raises(t2n.CheckFailedError) as e:
            _export(tmp_path / "m.nnef", check=True, keep_failed=str(keep))
        assert e.value.kept_archive == str(keep)
    assert "graph.nnef" in os.listdir(keep) and not (tmp_path / "m.nnef").exists()
    assert sorted(os.listdir(tmp_path / "debug")) == ["k.nnef"]


def test_keep_failed_checks_again_when_keeping(tmp_path, monkeypatch):
    # a user folder that appears at the keep path during the export is left alone; the
    # check failure stays the error, with a note saying why nothing was kept
    _failing_check(monkeypatch)
    keep = tmp_path / "k.nnef"
    real = staging.check_destination

    def then_user_folder(*a, **k):
        kind = real(*a, **k)
        if not keep.exists():
            _user_project(tmp_path).rename(keep)
        return kind

    monkeypatch.setattr(staging, "check_destination", then_user_folder)
    with pytest.raises(t2n.CheckFailedError) as e:
        _export(tmp_path / "m.nnef", check=True, keep_failed=str(keep))
    assert getattr(e.value, "kept_archive", None) is None
    assert any("notes.txt" in n for n in e.value.__notes__), e.value.__notes__
    assert sorted(os.listdir(keep)) == ["notes.txt", "train.py"]
    assert sorted(os.listdir(tmp_path)) == ["k.nnef"]


def test_t2n_keep_failed_must_be_a_folder(tmp_path, monkeypatch):
    from t2n.testing import assert_exports

    (tmp_path / "file").write_text("mine")
    monkeypatch.setenv("T2N_KEEP_FAILED", str(tmp_path / "file"))
    with pytest.raises(OutputPathError, match="not a folder"):
        assert_exports(_Small().eval(), (torch.randn(1, 4),))
    assert (tmp_path / "file").read_text() == "mine"


# ---------------------------------------------------------------------------- reports
def test_reports_replace_only_their_own_kind():
    from t2n.check.manifest_run import _json_looks_ours, _junit_looks_ours

    assert _junit_looks_ours(b"<?xml version='1.0' encoding='utf-8'?>\n"
                             b'<testsuites name="t2n" tests="1">')
    assert not _junit_looks_ours(b"<testsuites name='other'>")
    assert _json_looks_ours(b'{\n  "passed": true,\n  "models": [\n')
    assert not _json_looks_ours(b'{"name": "my config"}')
