"""Write each reshape over the axes it changes only (NNEF's ``axis_start``/``axis_count``).

A reshape arrives with its whole target shape: ShuffleNet's channel shuffle
``reshape(x, shape = [1, 2, 58, 8, 8])`` of a ``[1, 116, 8, 8]`` tensor, attention's
``[1, 16, 576] -> [1, 16, 3, 4, 48]``. tract builds the reshape of the whole shape and its
declutter then rewrites it into the reshape of the changed axes (one graph patch per
reshape, and every patch re-sorts the graph), and its parser reads every entry of the
target. Written as ``reshape(x, shape = [2, 58], axis_start = 1, axis_count = 1)``, the
reshape tract builds is already the simplified one: ShuffleNetV2 loads in 32 fewer patches
and parses in 2.6 % fewer instructions. The element order and the result are the same (an
NNEF reshape over ``axis_count`` axes from ``axis_start`` keeps the other axes as they are).

Leading and trailing axes the input and the target share (equal sizes, numbers or the same
symbolic expression) are left out, keeping at least one axis on each side. Targets with
NNEF's special entries (0: copy the axis, -1: infer it) are left alone, and so are
reshapes already written over a range. Runs last (the other passes read reshapes by their
full ``shape``), for the tract target and non-streaming exports (the pulse analysis reads
full shapes).
"""

from __future__ import annotations

from t2n.walk.builder import Graph, Tensor
from t2n.passes import GraphPass
from t2n.passes.rewrite import enabled


def run(g: Graph, session) -> None:
    if not enabled(session) or not session.target.can("partial_reshape") \
            or session.streaming is not None:
        return
    for op in g.ops:
        if op.kind != "reshape" or set(op.attrs) != {"shape"} or len(op.args) != 1:
            continue
        x = op.args[0]
        if not isinstance(x, Tensor) or x.rank < 1:
            continue
        found = minimal_range(list(x.shape), list(op.attrs["shape"]))
        if found is None:
            continue
        start, count, middle = found
        op.attrs = {"shape": middle, "axis_start": start, "axis_count": count}


def minimal_range(src: list, dst: list):
    """``(axis_start, axis_count, shape)`` of the reshape ``src -> dst`` over its changed axes
    only, or None when there is nothing to leave out (or the target is not plain sizes)."""
    if any(isinstance(d, int) and d <= 0 for d in dst) or not src or not dst:
        return None
    if any(d is None or (isinstance(d, int) and d < 0) for d in src):
        return None  # a size the graph does not know
    lead = 0
    while lead < len(src) - 1 and lead < len(dst) - 1 and _same(src[lead], dst[lead]):
        lead += 1
    trail = 0
    while trail < len(src) - 1 - lead and trail < len(dst) - 1 - lead \
            and _same(src[-1 - trail], dst[-1 - trail]):
        trail += 1
    if lead == 0 and trail == 0:
        return None
    count = len(src) - lead - trail
    return lead, count, list(dst[lead:len(dst) - trail])


def _same(a, b) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    try:
        return bool(a == b)
    except TypeError:
        return False


PASS = GraphPass("minimal_reshape", run, options=("optimize",))
