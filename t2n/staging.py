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
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from .errors import CheckFailedError, TractError, UsageError


@contextlib.contextmanager
def staged(path: str, keep_failed: str | None = None):
    """Yield the path to write and check the archive at; it moves to ``path`` on success
    (and to ``keep_failed``, when given, if its check fails)."""
    path = os.path.abspath(path)
    parent = os.path.dirname(path) or "."
    base = os.path.basename(path)
    try:
        folder = tempfile.mkdtemp(prefix=f".{base}.", suffix=".staging", dir=parent)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        work = os.path.join(folder, base)
        try:
            yield work
        except (CheckFailedError, TractError) as e:
            if keep_failed is not None and os.path.lexists(work):
                try:
                    e.kept_archive = _keep(work, keep_failed)
                except OSError as oe:  # the check's failure stays the error reported
                    e.add_note(f"could not keep the archive at {keep_failed}: "
                               f"{oe.strerror or oe}")
            raise
        move_into_place(work, path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _keep(work: str, keep_failed: str) -> str:
    """Move a rejected archive to ``keep_failed`` (any file system), replacing what is there."""
    keep = os.path.abspath(keep_failed)
    os.makedirs(os.path.dirname(keep), exist_ok=True)
    if os.path.isdir(keep) and not os.path.islink(keep):
        shutil.rmtree(keep)
    elif os.path.lexists(keep):
        os.remove(keep)
    shutil.move(work, keep)
    return keep


def move_into_place(work: str, path: str) -> None:
    """Rename the written archive ``work`` (same file system) to ``path``: a directory
    replaces what the path held, a file replaces a file (the writer's last step too)."""
    try:
        if os.path.isdir(work):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            elif os.path.lexists(path):
                os.remove(path)
            os.rename(work, path)
        else:
            os.replace(work, path)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
