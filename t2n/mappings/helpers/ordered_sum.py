"""Sums of taps added one at a time, in a fixed order, each addition rounded to the dtype.

A few of PyTorch's float16 CPU kernels accumulate in float16, term after term:
``adaptive_avg_pool3d`` adds each window's values in raster order (``scalar_t sum``) and
the transposed convolutions' ``col2im``/``col2vol`` add every kernel tap's column into the
output in turn. A tract reduction, a ``deconv`` or an f32 sum rounds differently (tens of
f16 ulps apart on long sums or cancelling columns). :func:`ordered_tap_sum` reproduces the
order with one ``tract_core_scan`` over the taps, whose op count depends neither on the data
nor on the number of taps.

A tap is a gather: along each listed axis, tap ``k`` reads the positions ``index[k]`` of
that axis; an index equal to the axis size reads a zero appended there (a position the tap
does not reach: adding +0 leaves an f16 sum unchanged, and NaN/inf of the data are kept
where a tap reads them). The tables are per axis (``K x output size of that axis``), so
they stay small.
"""

from __future__ import annotations

import torch

from t2n.walk.loops import Loop


def _zero_padded(g, src, tables):
    """``src`` with one zero appended on each axis some table reads past the end of."""
    pads = [(0, 0)] * src.rank
    for axis, index in tables:
        if bool((index == src.shape[axis]).any()):
            pads[axis] = (0, 1)
    if all(p == (0, 0) for p in pads):
        return src
    shape = [d + p[1] for d, p in zip(src.shape, pads)]
    return g.op("pad", src, padding=pads, border="constant", value=0.0, out_shape=shape,
                out_dtype=src.dtype)


def _runtime_zero(g, x):
    """An int64 0 that tract cannot fold to a constant (it folds a scan over a constant
    into the loop body and then fails: "Remove a non-1 axis"), computed from one element of
    ``x`` (a saturating cast, then ``& 0``)."""
    one = x
    for axis in range(x.rank):
        one = g.slice(one, axis, 0, 1)
    m = g.reduce("min_reduce", one, list(range(x.rank)), keepdim=False)
    return g.binary("tract_core_bitand", g.cast(m, torch.int64), g.scalar(0, torch.int64),
                    torch.int64)


def _tap(b, src, rows):
    """One tap: ``src`` gathered along each axis with that axis's index row."""
    v = src
    for axis, idx in rows:
        v = b.gather(v, b.reshape(idx, [idx.shape[-1]]), axis)
    return v


def ordered_tap_sum(g, src, tables, tap_axis: int | None = None):
    """``sum_k tap_k(src)`` with the additions made in order ``k = 0, 1, ...`` in ``src``'s
    dtype, starting from 0 (PyTorch's ``sum = 0; sum += ...``).

    ``tables``: ``[(axis, index)]`` with ``index`` an int64 torch tensor ``[K, M]``: the
    positions of ``axis`` tap ``k`` reads for each of the ``M`` output positions, the axis
    size for "nothing" (see the module docstring). With ``tap_axis``, ``src`` also has an
    axis of size ``K`` holding tap ``k``'s values at ``k`` (a column buffer): it is walked
    along, and the result keeps a size-1 axis there. ``src``'s listed axes must be static.
    """
    counts = {int(index.shape[0]) for _, index in tables}
    if tap_axis is not None:
        counts.add(int(src.shape[tap_axis]))
    if len(counts) != 1 or not tables:
        raise ValueError(f"ordered_tap_sum: tap tables of lengths {sorted(counts)}")
    taps = counts.pop()
    if any(isinstance(d, int) and d == 0 for d in src.shape):
        # nothing to add (tract fails on a scan over empty tensors): zeros of the result shape
        shape = list(src.shape)
        for axis, index in tables:
            shape[axis] = int(index.shape[1])
        if tap_axis is not None:
            shape[tap_axis] = 1
        return g.op("tract_core_broadcast", g.scalar(0.0, src.dtype), shape=shape,
                    out_shape=shape, out_dtype=src.dtype)
    src = _zero_padded(g, src, tables)
    first = src if tap_axis is None else g.slice(src, tap_axis, 0, 1)
    # 0 + first tap: PyTorch's running sum starts at +0 (a -0 first value becomes +0)
    total = g.binary("add", _tap(g, first, [(a, g.const(i[:1])) for a, i in tables]), 0.0,
                     src.dtype)
    if taps == 1:
        return total
    zero = _runtime_zero(g, src)
    loop = Loop(g, "tap_sum")
    step_src = loop.full(src) if tap_axis is None else \
        loop.scan(g.slice(src, tap_axis, 1, taps), axis=tap_axis)
    rows = [(axis, loop.scan(g.binary("add", g.const(index[1:]), zero, torch.int64), axis=0))
            for axis, index in tables]
    state = loop.state(total)
    new = loop.body.binary("add", state, _tap(loop.body, step_src, rows), src.dtype)
    loop.update(state, new)
    return loop.outputs([loop.last_output(new)])[0]


def col2im_tables(first_axis: int, sizes, kernel, stride, padding, dilation, out) -> list:
    """The tap tables of PyTorch's ``col2im``/``col2vol`` for :func:`ordered_tap_sum`:
    kernel taps in raster order; output position ``o`` of tap ``a`` (per spatial axis) reads
    column position ``q = (o + padding - a * dilation) / stride`` when that is a whole
    number in ``[0, size)``, nothing otherwise. Spatial axis ``i`` is ``first_axis + i``."""
    n = len(kernel)
    taps = torch.cartesian_prod(*[torch.arange(k) for k in kernel]).reshape(-1, n)
    tables = []
    for i in range(n):
        num = torch.arange(out[i])[None, :] + padding[i] - taps[:, i:i + 1] * dilation[i]
        q = torch.div(num, stride[i], rounding_mode="floor")
        hit = (num % stride[i] == 0) & (q >= 0) & (q < sizes[i])
        tables.append((first_axis + i, torch.where(hit, q, sizes[i])))
    return tables
