"""Archives appear at their path only once their export has succeeded, check included.

An export writes its archive, then (with ``check=True``) runs it in tract and compares with
PyTorch. If the archive went straight to the user's path, a failed check would leave an
archive there whose numbers are known to be wrong, and a re-export that fails would have
replaced the last good one: a build step that ships whatever sits at the path would ship
either. So the archive is written and checked in a private folder beside its path (same
file system, so the final move is a rename) under the same file name (tract picks the
container from the name), and moved into place when the block ends without an error; on
an error the folder and everything in it go, and the path keeps what it held before.

A rejected archive can still be wanted, to see why tract differs: ``keep_failed`` names a
path it moves to instead when the check fails or tract refuses it (the error then carries
that path as ``kept_archive``).

Neither move replaces what t2n may not (:mod:`t2n.write.output_paths`: a user's folder or file,
a symbolic link): both paths are checked before the trace (:func:`check_destination`) and
again on what the move would remove.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from t2n.write import output_paths
from t2n.errors import CheckFailedError, OutputPathError, TractError, UsageError


def check_destination(path, keep_failed=None) -> str:
    """Fail fast (before a trace that can take minutes): the kind of archive ``path``
    names, or :class:`OutputPathError` when ``path`` or ``keep_failed`` may not be written
    (``keep_failed`` must name the same kind of archive: tract reads it by its name)."""
    kind = output_paths.check_output(path)
    if keep_failed is not None:
        keep = os.fspath(keep_failed)
        keep_kind = output_paths.output_kind(keep)
        if keep_kind != kind:
            raise OutputPathError(keep, f"keep_failed {keep} names a {_KINDS[keep_kind]} but "
                                  f"{os.fspath(path)} is a {_KINDS[kind]}: give both the same "
                                  "kind")
        reason = output_paths.refusal(os.path.abspath(keep), kind)
        if reason:
            raise OutputPathError(keep, output_paths.refusal_message(keep, reason))
    return kind


_KINDS = {output_paths.TAR: "tar archive", output_paths.TGZ: "gzip tar archive",
          output_paths.DIR: "folder archive"}


@contextlib.contextmanager
def staged(path: str, keep_failed: str | None = None):
    """Yield the path to write and check the archive at; it moves to ``path`` on success
    (and to ``keep_failed``, when given, if its check fails)."""
    kind = check_destination(path, keep_failed)
    shown = os.fspath(path)
    path = os.path.abspath(shown)
    parent = os.path.dirname(path) or "."
    base = os.path.basename(path)
    try:
        folder = tempfile.mkdtemp(prefix=f".{base}.", suffix=".staging", dir=parent)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        # a folder asked for by a trailing slash keeps it: the writer reads the kind there
        explicit = kind == output_paths.DIR and output_paths.asks_for_folder(shown)
        work = os.path.join(folder, base) + (os.sep if explicit else "")
        try:
            yield work
        except (CheckFailedError, TractError) as e:
            if keep_failed is not None and os.path.lexists(work):
                try:
                    e.kept_archive = _keep(work, keep_failed, kind)
                except (OSError, UsageError) as oe:  # the check's failure stays the error
                    e.add_note(f"could not keep the archive at {keep_failed}: "
                               f"{getattr(oe, 'strerror', None) or oe}")
            raise
        move_into_place(work, path, kind, shown)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _keep(work: str, keep_failed: str, kind: str) -> str:
    """Move a rejected archive to ``keep_failed`` (any file system): copied into a private
    folder beside it first, then moved in as any archive is (replacing only an archive)."""
    keep = os.path.abspath(keep_failed)
    os.makedirs(os.path.dirname(keep), exist_ok=True)
    holder = tempfile.mkdtemp(prefix=f".{os.path.basename(keep)}.", suffix=".staging",
                              dir=os.path.dirname(keep))
    try:
        moved = os.path.join(holder, os.path.basename(keep))
        shutil.move(work.rstrip(os.sep), moved)
        move_into_place(moved, keep, kind, os.fspath(keep_failed))
    finally:
        shutil.rmtree(holder, ignore_errors=True)
    return keep


def move_into_place(work: str, path: str, kind: str | None = None,
                    shown: str | None = None) -> None:
    """Rename the written archive ``work`` (same file system) to ``path``, replacing only
    what :mod:`t2n.write.output_paths` allows (the writer's last step too)."""
    kind = kind or output_paths.output_kind(shown or path)
    try:
        output_paths.replace(work.rstrip(os.sep), path, kind, shown)
    except OSError as e:
        raise UsageError(f"cannot write {shown or path}: {e.strerror or e}") from None
