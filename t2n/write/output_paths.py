"""What t2n may write over: the one rule every writer of the package asks.

An export replaces what sits at its output path. A user who types ``-o proj`` for a folder
of their own, or ``-o notes.txt``, must not lose it, so t2n replaces only what it (or
another NNEF writer) wrote before, and refuses everything else, naming the path and what is
in the way, before the trace (fail fast) and again at the final move:

* the kind of archive comes from the name: ``.tar`` a tar file, ``.tgz`` / ``.tar.gz`` a
  gzip tar file, ``.nnef`` or a name without a suffix (``out/model``) a folder; any other
  suffix (``m.zip``, ``model.onnx``, ``notes.txt``) is refused as a likely mistake unless
  the folder is asked for explicitly with a trailing ``/`` (``-o m.zip/``);
* an existing tar file may be replaced only when it is an NNEF tar archive (its members
  are NNEF files and one is ``graph.nnef``);
* an existing folder only when it is empty or an NNEF archive folder (``graph.nnef``, and
  otherwise only ``.dat`` weights and ``graph.quant``);
* anything else (a symbolic link, a file where a folder goes, a folder where a file goes,
  a device, ...) is refused.

The final move first renames what is at the path into a private folder beside it, checks
THAT (what is deleted is what was checked, so a file that appears meanwhile is never lost)
and puts it back on a refusal. Reports (``--junit``, ``--json``) follow the same rule with
their own test of "written by t2n" (:func:`check_report`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tarfile
import tempfile
import zlib

from t2n.errors import OutputPathError, UsageError

TAR, TGZ, DIR = "tar", "tgz", "dir"
_SHOWN = 3  # foreign entries named in a refusal
_HELD = "HELD"  # marks a set-aside folder whose content could not go back
_NNEF_TOP = {"graph.nnef", "graph.quant"}


def output_kind(path) -> str:
    """``"tar"``, ``"tgz"`` or ``"dir"`` from how ``path`` is spelt; an unknown suffix is
    refused (:class:`OutputPathError`) unless the path ends with a separator."""
    text = os.fspath(path)
    if asks_for_folder(text):
        return DIR
    base = os.path.basename(text).lower()
    if base.endswith((".tgz", ".tar.gz")):
        return TGZ
    if base.endswith(".tar"):
        return TAR
    if base.endswith(".nnef") or "." not in base.strip(".") or base in (".", ".."):
        return DIR
    raise OutputPathError(text, _unknown_suffix(text))


def _unknown_suffix(text: str, in_the_way: str = "") -> str:
    return (f"cannot write {text}: t2n writes OUT.tar (tar), OUT.tgz or OUT.tar.gz (gzip tar) "
            f"or a folder (OUT.nnef or a name without a suffix); to write a folder named "
            f"{os.path.basename(text)}, end the path with a slash: {text}{os.sep}"
            f"{in_the_way} (nothing was changed)")


def asks_for_folder(path) -> bool:
    """The path ends with a separator: a folder, whatever its suffix."""
    text = os.fspath(path)
    return text.endswith(os.sep) or bool(os.altsep and text.endswith(os.altsep))


def check_output(path, kind: str | None = None) -> str:
    """Fail fast: the kind of archive ``path`` names, or :class:`OutputPathError` when its
    folder is missing or what is at the path is not t2n's to replace. Changes nothing."""
    text = os.fspath(path)
    full = os.path.abspath(text)
    try:
        kind = kind or output_kind(path)
    except OutputPathError:
        if os.path.lexists(full):  # say what is in the way too
            reason = refusal(full, DIR if os.path.isdir(full) else TAR)
            what = f"; {text} " + (reason.removeprefix("it ") if reason else "exists")
            raise OutputPathError(text, _unknown_suffix(text, what)) from None
        raise
    parent = os.path.dirname(full)
    if not os.path.isdir(parent):
        what = "is not a directory" if os.path.lexists(parent) else "does not exist"
        raise OutputPathError(text, f"cannot write {text}: directory {parent} {what}")
    reason = refusal(full, kind)
    if reason:
        raise OutputPathError(text, refusal_message(text, reason))
    return kind


def refusal(path: str, kind: str) -> str | None:
    """Why what is at ``path`` may not be replaced by an archive of ``kind``; None if the
    path is free, or holds an NNEF archive of that kind (or an empty folder, for a folder)."""
    if not os.path.lexists(path):
        return None
    if os.path.islink(path):
        return f"it is a symbolic link (to {os.readlink(path)})"
    if kind == DIR:
        if not os.path.isdir(path):
            return "it is an existing file, and t2n writes a folder there"
        return _folder_refusal(path)
    if os.path.isdir(path):
        return f"it is a folder, and t2n writes a {'gzip ' if kind == TGZ else ''}tar file there"
    if not os.path.isfile(path):
        return "it is not a regular file"
    return _tar_refusal(path)


def refusal_message(shown: str, reason: str) -> str:
    """The error text of a refusal: the path, what is in the way, and that nothing changed."""
    return (f"refusing to replace {shown}: {reason}; t2n replaces only an NNEF archive it "
            "could have written (nothing was changed: choose another path, or move it away)")


def _folder_refusal(path: str) -> str | None:
    """An empty folder or an NNEF archive folder passes; else the first foreign entries."""
    foreign: list[str] = []
    has_graph = False
    stack = [""]
    while stack and len(foreign) <= _SHOWN:
        rel = stack.pop()
        try:
            entries = sorted(os.scandir(os.path.join(path, rel)), key=lambda e: e.name)
        except OSError as e:
            return f"its content cannot be listed ({e.strerror or e})"
        for e in entries:
            name = os.path.join(rel, e.name)
            if e.is_symlink():
                foreign.append(name)
            elif e.is_dir():  # NNEF labels with '/' are sub-folders of .dat files
                stack.append(name)
            elif not e.is_file():
                foreign.append(name)
            elif rel == "" and e.name in _NNEF_TOP:
                has_graph = has_graph or e.name == "graph.nnef"
            elif not e.name.endswith(".dat"):
                foreign.append(name)
    if foreign:
        more = ", ..." if len(foreign) > _SHOWN else ""
        return ("it is a folder holding files that are not an NNEF archive's: "
                + ", ".join(foreign[:_SHOWN]) + more)
    if not has_graph and os.listdir(path):
        return "it is a folder holding .dat files but no graph.nnef (not an NNEF archive)"
    return None


def _tar_refusal(path: str) -> str | None:
    """An NNEF tar archive passes: members read until ``graph.nnef`` (t2n writes it first,
    so a t2n archive costs one header), each an NNEF file."""
    try:
        with tarfile.open(path, "r:*") as tar:
            for m in tar:
                name = m.name[2:] if m.name.startswith("./") else m.name
                if m.isdir():
                    continue
                if not m.isfile() or not (name in _NNEF_TOP or name.endswith(".dat")):
                    return f"it is a tar archive holding {m.name}, not an NNEF archive"
                if name == "graph.nnef":
                    return None
    except (tarfile.TarError, OSError, EOFError, zlib.error):
        return "it is an existing file that is not an NNEF tar archive"
    return "it is a tar archive without graph.nnef, not an NNEF archive"


# ---------------------------------------------------------------------------- the final move
def replace(work: str, path: str, kind: str, shown: str | None = None) -> None:
    """Move the written archive ``work`` (same file system) to ``path``, replacing what is
    there only if :func:`refusal` allows it, checked on what is actually removed."""
    shown = shown or path
    reason = refusal(path, kind)
    if reason:
        raise OutputPathError(shown, refusal_message(shown, reason))
    if not os.path.lexists(path):
        _place(work, path)
        return
    with _aside(path) as (old, holder):
        reason = refusal(old, kind)
        if reason:
            _restore(old, path, holder)
            raise OutputPathError(shown, refusal_message(shown, reason))
        try:
            _place(work, path)
        except BaseException:
            _restore(old, path, holder)
            raise


@contextlib.contextmanager
def _aside(path: str):
    """Rename what is at ``path`` into a private folder beside it (atomic, same file
    system); the folder and what it holds go at the end, unless a restore found the path
    taken and left the user's content there (named in its error)."""
    holder = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.", suffix=".replaced",
                              dir=os.path.dirname(path))
    old = os.path.join(holder, "previous")
    try:
        os.rename(path, old)
        yield old, holder
    finally:
        if not os.path.exists(os.path.join(holder, _HELD)):
            shutil.rmtree(holder, ignore_errors=True)


def _restore(old: str, path: str, holder: str) -> None:
    """Put what was set aside back at ``path``."""
    if not os.path.lexists(path):
        os.rename(old, path)
        return
    open(os.path.join(holder, _HELD), "w").close()
    raise OutputPathError(path, f"{path} changed while t2n replaced it; what it held "
                          f"before is at {old}")


def _place(work: str, path: str) -> None:
    """Rename ``work`` to a free ``path``; a file by a hard link (fails if the path was
    taken meanwhile, where a rename would replace it), else by a rename."""
    if not os.path.isdir(work):
        try:
            os.link(work, path)
        except FileExistsError:
            raise OutputPathError(path, f"cannot write {path}: it appeared while t2n wrote "
                                  "the archive; nothing was replaced") from None
        except OSError:  # no hard links on this file system
            if os.path.lexists(path):
                raise
            os.rename(work, path)
            return
        os.unlink(work)
        return
    os.rename(work, path)  # a folder: fails on anything but a free or empty-folder path


# ---------------------------------------------------------------------------- reports
def check_report(path, looks_ours) -> None:
    """Fail fast for a report file (``--junit``, ``--json``): free, or a regular file that
    ``looks_ours(first bytes)`` says t2n wrote; else :class:`OutputPathError`."""
    text = os.fspath(path)
    full = os.path.abspath(text)
    parent = os.path.dirname(full)
    if not os.path.isdir(parent):
        what = "is not a directory" if os.path.lexists(parent) else "does not exist"
        raise OutputPathError(text, f"cannot write {text}: directory {parent} {what}")
    _refuse_report(full, looks_ours, text)


def _refuse_report(path: str, looks_ours, shown: str) -> None:
    reason = _report_refusal(path, looks_ours)
    if reason:
        raise OutputPathError(shown, f"refusing to replace {shown}: {reason}; t2n replaces "
                              "only a report it wrote (nothing was changed: choose another "
                              "path, or move it away)")


def _report_refusal(path: str, looks_ours) -> str | None:
    if not os.path.lexists(path):
        return None
    if os.path.islink(path):
        return f"it is a symbolic link (to {os.readlink(path)})"
    if not os.path.isfile(path):
        return "it is not a regular file"
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        return f"it cannot be read ({e.strerror or e})"
    return None if looks_ours(head) else "it is an existing file that t2n did not write"


def write_report(path, data: bytes, looks_ours) -> None:
    """Write a report atomically: a temporary file beside it, then the move, which replaces
    only a report t2n wrote (checked on the file set aside, as for archives)."""
    check_report(path, looks_ours)
    text = os.fspath(path)
    full = os.path.abspath(text)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(full)}.", suffix=".partial",
                               dir=os.path.dirname(full))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644 & ~umask())
        if not os.path.lexists(full):
            _place(tmp, full)
            return
        with _aside(full) as (old, holder):
            if _report_refusal(old, looks_ours):
                _restore(old, full, holder)
                _refuse_report(full, looks_ours, text)
            try:
                _place(tmp, full)
            except BaseException:
                _restore(old, full, holder)
                raise
    except OSError as e:
        raise UsageError(f"cannot write {text}: {e.strerror or e}") from None
    finally:
        if os.path.lexists(tmp):
            os.remove(tmp)


def umask() -> int:
    """The process's umask (files t2n writes get the modes a plain open would give)."""
    m = os.umask(0)
    os.umask(m)
    return m
