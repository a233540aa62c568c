"""The cyclic garbage collector during an export: it looks at the objects the export makes,
not at the whole heap of the process.

An export allocates many short-lived Python objects (ops, tensors, index lists) in a process
that already holds millions (torch, transformers, the model). Every so often CPython then
runs a full collection that walks all of them: about 0.45 s each on a GPT-2 export, most of
the time of the pass it lands in. :func:`collect_young_only` freezes what existed before the
export (``gc.freeze``: left alone by the collector, not copied or changed) and thaws it
afterwards, so collections during the export scan only what the export made. It does
nothing when the collector is off or the caller froze objects of its own (a pre-fork server
does), so it never undoes a caller's choice.
"""

from __future__ import annotations

import contextlib
import functools
import gc


@contextlib.contextmanager
def collect_young_only():
    """Within the block, cyclic collections skip the objects that existed before it."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def young_collections_only(fn):
    """Decorate ``fn`` (``t2n.export``) to run within :func:`collect_young_only`."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        with collect_young_only():
            return fn(*args, **kwargs)
    return call
