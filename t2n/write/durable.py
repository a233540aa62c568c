"""An archive reaches the user's path only once its bytes are on disk, and that wait is hidden.

The final rename that puts an archive in place must not outrun its data: after a power loss
a file system may keep the new name with no contents behind it, and the user's last good
archive would be gone. So every archive is flushed (``fsync``) before that rename. Flushing
half a gigabyte takes about as long as writing it, though (0.95 s of GPT-2's 1.7 s write on
these machines), and nothing needs to wait for it in the meantime: the engine's load proof
and the check read the archive from the page cache. :func:`flushing` runs the flush in a
thread beside them and waits for it only when they are done, before the move.
"""

from __future__ import annotations

import contextlib
import os
import threading

from t2n.errors import UsageError
from t2n.stopwatch import phase


def flush_to_disk(path: str) -> None:
    """``fsync`` the archive at ``path``: the file, or every file of a folder archive and
    the folder itself (so its entries are durable too)."""
    path = path.rstrip(os.sep) or path
    if not os.path.isdir(path):
        _fsync(path, os.O_RDONLY)
        return
    for root, _dirs, files in os.walk(path):
        for name in sorted(files):
            _fsync(os.path.join(root, name), os.O_RDONLY)
        _fsync(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def _fsync(path: str, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def flushing(path: str):
    """Flush the archive at ``path`` to disk in a thread while the block runs; the block's
    end waits for it (and an error of the flush, e.g. a full disk, raises as the write's
    own error would, once the block itself succeeded)."""
    failure: list[OSError] = []

    def flush():
        try:
            flush_to_disk(path)
        except OSError as e:
            failure.append(e)

    worker = threading.Thread(target=flush, name="t2n-flush", daemon=True)
    worker.start()
    try:
        yield
    finally:
        with phase("flush"):  # what is left of it once the block is done
            worker.join()
    if failure:
        e = failure[0]
        raise UsageError(f"cannot write {path}: {e.strerror or e}")
