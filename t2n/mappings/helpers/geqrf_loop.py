"""Householder QR (LAPACK ``geqrf``/``larfg``) and the products with its Q, for any static
size, as ``tract_core_scan`` loops (a column, or a reflector, per iteration), so the op
count does not grow with the matrix side (``factorizations.geqrf``/``apply_q`` unroll up
to ``MAX_N``).

Step ``j`` of ``geqrf`` does the unrolled step with row/column masks: with ``x`` column
``j``, ``alpha = x_j`` and ``v`` its rows below ``j``,

    beta = -sign(alpha) * |x[j:]|,  tau = (beta - alpha) / beta,  v = v / (alpha - beta)
    a[j:, j+1:] -= tau w (w^T a[j:, j+1:])      with w = [1, v]

and, as LAPACK's ``larfg``/``larf`` do, ``tau = 0`` and no update where ``v`` is zero. The
taus come out as one ``[..., 1, k]`` scan output. Loops are counted by ``getrf_loop``'s
run-time ramp and counter (tract folds constant scan inputs, drops unused ones, and
mispatches ops it pulls out on the scanned input alone).
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import select
from t2n.mappings.helpers.getrf_loop import counter, runtime_ramp
from t2n.walk.loops import Loop

_F64 = torch.float64


def _masks(b, m, n, j):
    i64, bool_ = torch.int64, torch.bool
    rows = b.const(torch.arange(m).reshape(m, 1))
    cols = b.const(torch.arange(n).reshape(1, n))
    return {k: b.binary(op, ax, j, i64, out_dtype=bool_) for k, (op, ax) in {
        "below": ("gt", rows), "at": ("eq", rows), "from": ("ge", rows),
        "col": ("eq", cols), "right": ("gt", cols)}.items()}


def _and(b, u, v):
    return b.binary("and", u, v, out_dtype=torch.bool)


def geqrf_scan(g, a):
    """(reflectors and R packed as LAPACK does, taus ``[..., 1, k]``) of float64
    ``a [..., m, n]``."""
    m, n = a.shape[-2:]
    k = min(m, n)
    r = a.rank - 2
    loop = Loop(g, "geqrf")
    j = counter(loop, loop.scan(runtime_ramp(g, a, k), axis=0), 0, 1)
    held = loop.state(a)
    b = loop.body
    mk = _masks(b, m, n, j)
    x = b.gather(held, j, r + 1)  # [..., m, 1]
    alpha = b.gather(x, j, r)  # [..., 1, 1]
    v = select(b, mk["below"], x, 0.0)
    xn2 = b.reduce("sum_reduce", b.binary("mul", v, v), [r], keepdim=True)
    norm = b.unary("sqrt", b.binary("add", b.binary("mul", alpha, alpha), xn2))
    nonneg = b.binary("ge", alpha, b.scalar(0.0, _F64), out_dtype=torch.bool)
    beta = select(b, nonneg, b.unary("neg", norm), norm)
    moved = b.binary("ne", xn2, b.scalar(0.0, _F64), out_dtype=torch.bool)
    tau = select(b, moved, b.binary("div", b.binary("sub", beta, alpha), beta), 0.0)
    v = select(b, moved, b.binary("mul", v, b.unary("recip", b.binary("sub", alpha, beta))),
               v)
    col = select(b, mk["at"], select(b, moved, beta, alpha), select(b, mk["below"], v, x))
    w = select(b, mk["at"], 1.0, v)  # zero above j
    wtc = b.reduce("sum_reduce", b.binary("mul", w, held), [r], keepdim=True)  # [..., 1, n]
    upd = b.binary("sub", held, b.binary("mul", b.binary("mul", tau, w), wtc))
    change = _and(b, _and(b, mk["right"], mk["from"]), moved)
    new = select(b, mk["col"], col, select(b, change, upd, held))
    loop.update(held, new)
    out, taus = loop.outputs([loop.last_output(new), loop.scan_output(tau, axis=r + 1)])
    return out, taus


def apply_q_scan(g, refl, taus, c, transpose):
    """``Q @ c`` (``Q^T @ c``) for ``Q = H_0 ... H_{k-1}`` from ``refl [..., m, >=k]`` and
    ``taus [..., 1, k]``, ``c [..., m, q]`` (all float64, batch broadcast)."""
    m = c.shape[-2]
    k = taus.shape[-1]
    r = c.rank - 2
    step = 1 if transpose else -1
    src = next(t for t in (taus, refl, c) if not t.is_const) if not all(
        t.is_const for t in (taus, refl, c)) else c
    loop = Loop(g, "apply_q")
    i = counter(loop, loop.scan(runtime_ramp(g, src, k), axis=0, step=step),
                0 if transpose else k - 1, step)
    held = loop.state(c)
    b = loop.body
    mk = _masks(b, m, 1, i)
    w = b.gather(loop.full(refl), i, r + 1)  # [..., m, 1]
    w = select(b, mk["at"], 1.0, select(b, mk["below"], w, 0.0))
    tau = b.gather(loop.full(taus), i, r + 1)  # [..., 1, 1]
    wtc = b.reduce("sum_reduce", b.binary("mul", w, held), [r], keepdim=True)
    upd = b.binary("sub", held, b.binary("mul", b.binary("mul", tau, w), wtc))
    new = select(b, mk["from"], upd, held)
    loop.update(held, new)
    return loop.outputs([loop.last_output(new)])[0]
