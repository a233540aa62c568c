"""``histogram`` and ``histogramdd``: counts (or summed weights) per bin, with PyTorch's
bin-edge rules, as a fixed number of ops whatever the data size.

Edges (PyTorch's ``histogramdd_prepare_out`` / ``select_outer_bin_edges``):

* a tensor of edges is used as given;
* a bin count with a static ``range`` gives ``torch.linspace(lo, hi, bins + 1)`` computed
  here, by PyTorch itself;
* without ``range`` the data's min/max (per dimension) are the outer edges, widened by 0.5
  each side when equal (an empty input uses 0 and 1); the inner edges follow PyTorch's scalar
  linspace (``start + step * i`` in the first half, ``end - step * (n - 1 - i)`` in the
  second). PyTorch's vectorised linspace may differ in the last bit for long edge vectors
  (its lanes add multiples of ``step`` to a base), so an element exactly on such an edge
  could change bin.

Bin of each element (``HistogramKernel.cpp``): elements outside ``[first, last]`` edge (and
NaN) are skipped; the last bin is closed. With tensor edges the bin is a binary search
(``upper_bound - 1``, here: the number of edges <= x, minus one). With a bin count it is
the linear estimate ``trunc((x - lo) * (E - 1) / (hi - lo))`` corrected by an
``upper_bound`` over edges ``[max(0, pos - 1), min(pos + 2, E))``, reproduced with three
gathers. Per-dimension bins become a flat bin number; one ``scatter_elements`` (add) of
ones or weights fills ``[bins + 1]`` slots (the spare one takes skipped elements).
``density`` divides by the total and by each bin's widths.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import where_
from t2n.mappings.helpers.indexing import scatter_elements
from t2n.walk.registry import aten

_I64 = torch.int64


def _b(g, kind, a, b, dtype):
    return g.binary(kind, a, b, dtype, out_dtype=torch.bool)


def _count_edges_le(g, x, edges):
    """For each x, the number of edges <= x (x [M], edges [E] -> [M] i64)."""
    le = _b(g, "le", g.unsqueeze(edges, [0]), g.unsqueeze(x, [1]), x.dtype)
    return g.reduce("sum_reduce", g.cast(le, _I64), [1], keepdim=False)


def _linear_bin(g, x, edges, n_edges):
    """PyTorch's LINEAR_INTERPOLATION_WITH_LOCAL_SEARCH position (before the last-bin fix)."""
    d = x.dtype
    lo = g.slice(edges, 0, 0, 1)
    hi = g.slice(edges, 0, n_edges - 1, n_edges)
    est = g.binary("div", g.binary("mul", g.binary("sub", x, lo, d), float(n_edges - 1), d),
                   g.binary("sub", hi, lo, d), d)
    pos = g.cast(est, _I64)  # truncation toward zero, as static_cast<int64_t>
    pos = g.binary("min", g.binary("max", pos, 0, _I64), n_edges - 1, _I64)
    pos_min = g.binary("max", g.binary("sub", pos, 1, _I64), 0, _I64)
    pos_max = g.binary("min", g.binary("add", pos, 2, _I64), n_edges, _I64)
    count = None
    for k in range(3):
        at = g.binary("add", pos_min, k, _I64)
        live = _b(g, "lt", at, pos_max, _I64)
        edge = g.gather(edges, g.binary("min", at, n_edges - 1, _I64), 0)
        hit = g.binary("and", live, _b(g, "le", edge, x, d), torch.bool)
        hit = g.cast(hit, _I64)
        count = hit if count is None else g.binary("add", count, hit, _I64)
    return g.binary("sub", g.binary("add", pos_min, count, _I64), 1, _I64)


def _linspace_edges(g, lo, hi, bins, d):
    """PyTorch's scalar CPU linspace from rank-0 runtime ``lo``/``hi``, ``bins + 1`` steps."""
    steps = bins + 1
    step = g.binary("div", g.binary("sub", hi, lo, d), float(bins), d)
    idx = torch.arange(steps)
    half = steps // 2
    first = g.binary("add", lo, g.binary("mul", step, g.const(idx[:half].to(d)), d), d)
    back = (steps - idx[half:] - 1).to(d)
    second = g.binary("sub", hi, g.binary("mul", step, g.const(back), d), d)
    return g.concat([first, second], 0) if half else second


def _data_edges(g, col, bins, d):
    """Edges from the data's own min/max (``range`` None)."""
    n = col.shape[0]
    if isinstance(n, int) and n == 0:
        lo, hi = g.scalar(0.0, d), g.scalar(1.0, d)
    else:
        lo = g.reduce("min_reduce", col, [0], keepdim=False)
        hi = g.reduce("max_reduce", col, [0], keepdim=False)
        same = _b(g, "eq", lo, hi, d)
        lo = where_(g, same, g.binary("sub", lo, 0.5, d), lo)
        hi = where_(g, same, g.binary("add", hi, 0.5, d), hi)
    return _linspace_edges(g, lo, hi, bins, d)


def histogramdd_of(g, x2d, bins, ranges, weight, density):
    """x2d [M, D]; ``bins``: per dimension an int (count) or an edges tensor; ``ranges``:
    per dimension (lo, hi) or None. Returns (hist [B_0, ..., B_{D-1}], [edges_d])."""
    d = x2d.dtype
    m, n_dim = x2d.shape
    edges_list, positions, inside = [], [], None
    for k in range(n_dim):
        col = g.reshape(g.slice(x2d, 1, k, k + 1), [m])
        b = bins[k]
        if isinstance(b, int):
            if b < 1:
                raise g.error(f"bins: must be positive, got {b}")
            if ranges is not None:
                lo, hi = float(ranges[k][0]), float(ranges[k][1])
                if lo == hi:
                    lo, hi = lo - 0.5, hi + 0.5
                edges = g.const(torch.linspace(lo, hi, b + 1, dtype=d))
            else:
                edges = _data_edges(g, col, b, d)
            n_edges = b + 1
        else:
            if b.rank != 1 or not isinstance(b.shape[0], int):
                raise g.error("bins: a tensor of edges must be 1-D with a static length")
            edges, n_edges = g.cast(b, d), b.shape[0]
            if n_edges < 2:
                raise g.error("bins: at least two edges are needed")
        edges_list.append(edges)
        first = g.slice(edges, 0, 0, 1)
        last = g.slice(edges, 0, n_edges - 1, n_edges)
        ok = g.binary("and", _b(g, "ge", col, first, d), _b(g, "le", col, last, d), torch.bool)
        inside = ok if inside is None else g.binary("and", inside, ok, torch.bool)
        safe = where_(g, ok, col, first)  # no NaN/inf into the estimate below
        if isinstance(b, int):
            pos = _linear_bin(g, safe, edges, n_edges)
        else:
            pos = g.binary("sub", _count_edges_le(g, safe, edges), 1, _I64)
        pos = g.binary("min", pos, n_edges - 2, _I64)  # the last bin is closed
        positions.append((pos, n_edges - 1))
    flat, total = None, 1
    for pos, nb in reversed(positions):
        term = g.binary("mul", pos, total, _I64) if total != 1 else pos
        flat = term if flat is None else g.binary("add", flat, term, _I64)
        total *= nb
    flat = where_(g, inside, flat, g.scalar(total, _I64))
    values = g.broadcast_to(g.scalar(1.0, d), [m]) if weight is None else \
        g.reshape(g.cast(weight, d), [m])
    hist = scatter_elements(g, g.broadcast_to(g.scalar(0.0, d), [total + 1]), 0, flat, values,
                            "add")
    hist = g.reshape(g.slice(hist, 0, 0, total), [nb for _, nb in positions])
    if density:
        hist = g.binary("div", hist, g.reduce("sum_reduce", hist, list(range(n_dim)),
                                              keepdim=True), d)
        for k, (edges, (_, nb)) in enumerate(zip(edges_list, positions)):
            width = g.binary("sub", g.slice(edges, 0, 1, nb + 1), g.slice(edges, 0, 0, nb), d)
            shape = [1] * n_dim
            shape[k] = nb
            hist = g.binary("div", hist, g.reshape(width, shape), d)
    return hist, edges_list


def _check(g, self):
    if self.dtype not in (torch.float32, torch.float64):
        raise g.error(f"self: {self.dtype} (PyTorch histograms float data only)")
    if not all(isinstance(n, int) for n in self.shape):
        raise g.error("self: dynamic sizes are not supported (static element count needed)")


@aten("histogram")
def histogram(g, self, bins=100, *rest):
    """Both overloads: ``(self, int bins, range, weight, density)`` and
    ``(self, Tensor bins, weight, density)``."""
    rest = list(rest)
    ranges = None
    if isinstance(bins, int):
        rng = rest.pop(0) if rest else None
        if rng is not None:
            if len(rng) != 2:
                raise g.error(f"range: expected (min, max), got {rng}")
            ranges = [tuple(rng)]
    weight = rest.pop(0) if rest else None
    density = bool(rest.pop(0)) if rest else False
    _check(g, self)
    n = 1
    for s in self.shape:
        n *= s
    x = g.reshape(self, [n, 1]) if self.rank else g.reshape(g.unsqueeze(self, [0]), [1, 1])
    hist, edges = histogramdd_of(g, x, [bins], ranges, weight, density)
    return hist, edges[0]


@aten("histogramdd")
def histogramdd(g, self, bins, bounds=None, weight=None, density=False):
    """Overloads: ``bins`` an int (every dimension), a list of ints, or a list of edge
    tensors; ``bounds`` (aten's ``range``) a flat [lo0, hi0, lo1, hi1, ...] list."""
    _check(g, self)
    if self.rank < 1:
        raise g.error("self: must have at least one dimension (its last one is D)")
    n_dim = self.shape[-1]
    m = 1
    for s in self.shape[:-1]:
        m *= s
    bins = [bins] * n_dim if isinstance(bins, int) else list(bins)
    if len(bins) != n_dim:
        raise g.error(f"bins: {len(bins)} entries for {n_dim} dimensions")
    ranges = None
    if bounds is not None:
        if len(bounds) != 2 * n_dim:
            raise g.error(f"range: expected {2 * n_dim} values, got {len(bounds)}")
        ranges = [(bounds[2 * k], bounds[2 * k + 1]) for k in range(n_dim)]
    return histogramdd_of(g, g.reshape(self, [m, n_dim]), bins, ranges, weight, density)
