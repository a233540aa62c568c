"""t2n.walk.loops on its own: a Loop built by hand (scan inputs both ways, a full input, a
state, per-step and last outputs, a weight created inside the body, a nested loop) written
as fragments and run in tract."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
import torch

from t2n.write import writer
from t2n.session import ExportSession
from t2n.walk.builder import Graph
from t2n.walk.loops import Loop
from t2n.check.tract_runner import run_in_tract


def _running_sums(g, x, w, step):
    """Per step: s = s * w + x_t (w a full input); outputs every s and the last one."""
    loop = Loop(g, "acc")
    xt = loop.scan(x, axis=0, step=step)  # [1, 3]
    s = loop.state(g.broadcast_to(g.scalar(0.0, torch.float32), [1, 3]))
    new = loop.body.binary("add", loop.body.binary("mul", s, loop.full(w)), xt)
    big = loop.body.const(torch.arange(12.0).reshape(4, 3))  # a weight made in the body
    extra = loop.body.reduce("sum_reduce", big, [0], keepdim=True)  # [1, 3]
    loop.update(s, new)
    return loop.outputs([loop.scan_output(new, axis=0, step=step),
                         loop.last_output(loop.body.binary("add", new, extra))])


def _expected(x, w, reverse):
    s = np.zeros((1, 3), np.float32)
    ys = np.zeros_like(x)
    order = range(len(x) - 1, -1, -1) if reverse else range(len(x))
    for t in order:
        s = s * w + x[t:t + 1]
        ys[t] = s
    return ys, s + np.arange(12.0, dtype=np.float32).reshape(4, 3).sum(0, keepdims=True)


@pytest.mark.parametrize("dynamic", [False, True])
def test_loop_forward_and_reverse(tmp_path, dynamic):
    g = Graph(ExportSession())
    n = sympy.Symbol("T", integer=True, positive=True) if dynamic else 5
    if dynamic:
        g.add_symbol("T")
    x = g.add_input("x", [n, 3], torch.float32)
    w = g.const(torch.tensor([[0.5, 1.0, 2.0]]))
    fwd = _running_sums(g, x, w, 1)
    rev = _running_sums(g, x, w, -1)
    g.set_outputs(list(fwd) + list(rev), ["yf", "lf", "yr", "lr"])
    path = str(tmp_path / "loop.nnef.tgz")
    writer.write(g, path)
    text = writer.render_graph(g)
    assert text.count("fragment t2n_acc_body_") == 2
    for steps in ([5, 1, 9] if dynamic else [5]):
        xv = np.random.default_rng(steps).standard_normal((steps, 3)).astype(np.float32)
        yf, lf, yr, lr = run_in_tract(path, [xv])
        for got, want in zip((yf, lf), _expected(xv, np.array([[0.5, 1, 2]], np.float32),
                                                  False)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        for got, want in zip((yr, lr), _expected(xv, np.array([[0.5, 1, 2]], np.float32),
                                                  True)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_loop_misuse_is_an_error():
    g = Graph(ExportSession())
    x = g.add_input("x", [4, 2], torch.float32)
    loop = Loop(g)
    xt = loop.scan(x, axis=0)
    s = loop.state(g.broadcast_to(g.scalar(0.0, torch.float32), [1, 2]))
    with pytest.raises(ValueError, match="update"):
        loop.outputs([loop.last_output(xt)])
    loop2 = Loop(g)
    xt2 = loop2.scan(x, axis=0)
    outer_read = loop2.body.binary("add", xt2, x)  # x is not declared as a loop input
    with pytest.raises(Exception, match="without declaring"):
        loop2.outputs([loop2.last_output(outer_read)])
    assert s is not None
