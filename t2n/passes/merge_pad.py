"""Merge an explicit ``pad`` into the convolution or pooling that reads it.

TF-style "same" padding (timm's ``Conv2dSame``, ``F.pad`` before a layer) is written as a
``pad`` followed by a conv or pool with no padding. The layer's own padding does the same
work without materialising the padded tensor, when the two pad with the same thing:

* ``conv`` (``border = 'constant'``, zero padding) after a zero ``pad``;
* ``avg_pool`` with ``border = 'constant'`` (padding counted as zeros, PyTorch's
  ``count_include_pad=True``) after a zero ``pad``;
* ``max_pool`` with ``border = 'ignore'`` (padding never wins) after a ``-inf`` ``pad``,
  when every window still holds at least one real element (a window of only padding is
  ``-inf`` after the ``pad`` but undefined for the pool), which is checked on the static
  sizes.

Only spatial axes may be padded (the layer cannot pad batch or channels), the pad must be
non-negative, and the ``pad`` result must have no other reader. The padding amounts add up.
"""

from __future__ import annotations

import math

from t2n.walk.builder import Graph, Op
from t2n.passes import GraphPass
from t2n.passes.rewrite import Index, enabled


def run(g: Graph, session) -> None:
    if not enabled(session) or session.streaming is not None:
        return  # a streaming export keeps its explicit pads and layout for tract's pulsing
    index = Index(g)
    dropped = set()
    for op in list(g.ops):
        if op.kind != "pad" or id(op) in dropped:
            continue
        found = index.only_reader(op.outputs[0])
        if found is None or found[1] != 0:
            continue
        user = found[0]
        if _merge(op, user):
            user.args[0] = op.args[0]
            dropped.add(id(op))
    if dropped:
        g.ops = [o for o in g.ops if id(o) not in dropped]


PASS = GraphPass("merge_pad", run, options=("optimize",))


def _pad_value(op: Op):
    v = op.attrs.get("value", 0.0)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _merge(pad: Op, user: Op) -> bool:
    """Add the pad's amounts to ``user``'s padding when exact; False leaves both alone."""
    if pad.attrs.get("border", "constant") != "constant":
        return False
    value = _pad_value(pad)
    amounts = pad.attrs.get("padding")
    x = pad.args[0]
    if value is None or not amounts or len(amounts) != x.rank:
        return False
    if any(not isinstance(a, int) or not isinstance(b, int) or a < 0 or b < 0
           for a, b in amounts):
        return False
    if user.kind == "conv":
        if value != 0.0 or user.attrs.get("border", "constant") != "constant":
            return False
        lead = 2  # conv padding lists the spatial axes only
    elif user.kind == "avg_pool":
        if value != 0.0 or user.attrs.get("border") != "constant":
            return False
        lead = 0  # pools list every axis
    elif user.kind == "max_pool":
        if not (math.isinf(value) and value < 0) or user.attrs.get("border") != "ignore":
            return False
        lead = 0
    else:
        return False
    if any(a or b for a, b in amounts[:2]):
        return False  # batch or channel padding
    own = user.attrs.get("padding")
    if not own:
        return False  # [] is automatic padding in NNEF: not a zero padding to add to
    own = [(int(a), int(b)) for a, b in own]
    spatial = [(int(a), int(b)) for a, b in amounts[2:]]
    if lead == 0:
        if len(own) != x.rank or any(a or b for a, b in own[:2]):
            return False
        theirs = own[2:]
    else:
        theirs = own
    if len(theirs) != len(spatial):
        return False
    merged = [(a + p, b + q) for (a, b), (p, q) in zip(theirs, spatial)]
    if user.kind == "max_pool" and not _windows_see_data(x, user, merged):
        return False
    user.attrs["padding"] = merged if lead == 2 else own[:2] + merged
    return True


def _windows_see_data(x, pool: Op, padding) -> bool:
    """Whether every max-pool window over the padded input covers a real element."""
    sizes = pool.attrs.get("size", [])[2:]
    strides = pool.attrs.get("stride", [1] * (2 + len(padding)))[2:]
    dil = pool.attrs.get("dilation", [1] * (2 + len(padding)))[2:]
    if len(sizes) != len(padding):
        return False
    for n, k, s, d, (pb, pa) in zip(x.shape[2:], sizes, strides, dil, padding):
        if not isinstance(n, int):
            return False
        total = n + pb + pa
        span = d * (k - 1) + 1
        if total < span:
            return False
        for start in range(0, total - span + 1, s):
            taps = [start + j * d - pb for j in range(k)]
            if not any(0 <= t < n for t in taps):
                return False
    return True
