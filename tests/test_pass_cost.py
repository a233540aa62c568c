"""What keeps the export's cost linear in the graph and its memory near the model's: the index
the folding passes keep up to date instead of rebuilding, weights scaled a block at a time,
transposed weights kept as views, and traced graphs typed without a second run."""

import torch

from t2n.capture import script_types
from t2n.api import export_graph
from t2n.passes import fold_affine, fold_affine_input, fold_scale, rewrite
from t2n.passes.rewrite import Index


class ConvBnStack(torch.nn.Module):
    """conv + batch norm (fold_affine), a per-feature scale before a linear layer
    (fold_affine_input) and an attention-like scaled product (fold_scale)."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.b2 = torch.nn.BatchNorm2d(8)
        self.scale = torch.nn.Parameter(torch.rand(8) + 0.5)
        self.q = torch.nn.Linear(8, 8)
        self.k = torch.nn.Linear(8, 8)
        for b in (self.b1, self.b2):
            b.running_mean.uniform_(-1, 1)
            b.running_var.uniform_(0.5, 2)
            b.weight.data.uniform_(0.5, 1.5)

    def forward(self, x):
        y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
        t = y.flatten(2).transpose(1, 2) * self.scale  # [B, HW, 8]
        s = self.q(t) @ self.k(t).transpose(1, 2)
        return s * 0.125


def _rebuilt_view(index: Index, g):
    """The view of a fresh index of the graph as ``index`` sees it now."""
    kept = g.ops
    g.ops = index.ops_in_order()
    try:
        return _view(Index(g), g)
    finally:
        g.ops = kept


def _view(index: Index, g):
    ops = index.ops_in_order()
    tensors = {id(t): t for op in ops for t in list(op.outputs) + [a for a, _ in
                                                                   Index._slots(op)]}
    producers = {k: id(index.producer[k]) for k in tensors if k in index.producer}
    readers = {k: [(id(o), p) for o, p in index.readers(t)] for k, t in tensors.items()}
    over = {id(v.tensor): [id(t) for t in index.variables_over(
        g, v.data.untyped_storage().data_ptr())] for v in g.variables if v.data.numel()}
    return [id(o) for o in ops], producers, readers, over


def test_the_kept_index_equals_a_rebuilt_one_after_every_fold(monkeypatch):
    """Model ConvBnStack, passes fold_affine/fold_affine_input/fold_scale: after each rewrite
    the index the rule goes on reading (producers, readers in graph order, variables over a
    storage) is the one a rebuild of the graph would give."""
    fired = []
    real = rewrite.rewrite_until_stable

    def checking(g, rule):
        def rule_then_compare(g, index, op):
            done = rule(g, index, op)
            if done:
                fired.append(op.kind)
                assert _view(index, g) == _rebuilt_view(index, g), f"after folding at {op.kind}"
            return done
        real(g, rule_then_compare)

    for module in (fold_affine, fold_affine_input, fold_scale):
        monkeypatch.setattr(module, "rewrite_until_stable", checking)
    g = export_graph(ConvBnStack().eval(), (torch.randn(2, 3, 4, 4),))
    assert fired.count("conv") == 2 and fired.count("mul") == 2, fired
    assert "mul" not in g.op_histogram(), g.op_histogram()


def test_folded_model_still_matches_torch(tmp_path):
    """Model ConvBnStack: the folds made through the kept index give torch's numbers."""
    from t2n.testing import assert_exports

    torch.manual_seed(0)
    assert_exports(ConvBnStack().eval(), (torch.randn(2, 3, 4, 4),))


def test_scaled_weight_is_the_whole_float64_product_bit_for_bit(monkeypatch):
    """Blocks of rows give the very bits of ``(float64(w) * f).to(w.dtype)``: every axis of the
    factor, a transposed (non-contiguous) weight, float32/float16/float64, blocks of 1..n rows."""
    monkeypatch.setattr(rewrite, "SCALE_BLOCK", 7)
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16, torch.float64):
        w = (torch.randn(5, 6, 3, 2, generator=gen) * 10).to(dtype)
        for axis in range(4):
            shape = [1] * 4
            shape[axis] = w.shape[axis]
            f = torch.randn(shape, generator=gen, dtype=torch.float64)
            want = (w.to(torch.float64) * f).to(dtype)
            got = rewrite.scaled_weight(w, f)
            assert got.is_contiguous() and torch.equal(got.view(torch.uint8 if dtype ==
                   torch.float64 else got.dtype).flatten(), want.contiguous().view(
                   torch.uint8 if dtype == torch.float64 else want.dtype).flatten()), \
                (dtype, axis)
        wt = w.reshape(30, 6).t()  # [6, 30] view, not contiguous
        f = torch.randn(6, 1, generator=gen, dtype=torch.float64)
        assert torch.equal(rewrite.scaled_weight(wt, f), (wt.to(torch.float64) * f).to(dtype))
    one = torch.randn(1, 1, 40, generator=gen)  # leading size-1 axes: blocks along the last
    f = torch.randn(40, generator=gen, dtype=torch.float64)
    assert torch.equal(rewrite.scaled_weight(one, f), (one.double() * f).float())


class Conv1DStack(torch.nn.Module):
    """transformers' Conv1D: ``addmm(b, x, W)`` with W stored [in, out]."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 24))
        self.b = torch.nn.Parameter(torch.randn(24))

    def forward(self, x):
        return torch.addmm(self.b, x.reshape(-1, 16), self.w).reshape(x.shape[0], -1, 24)


def test_transposed_linear_weight_is_a_view_of_the_model_weight(tmp_path):
    """Model Conv1DStack, pass fuse_linear: the [out, in] weight of the fused linear is a
    transposed view of the model's [in, out] weight (no copy held), written in C order."""
    from t2n.testing import assert_exports

    model = Conv1DStack().eval()
    x = torch.randn(2, 3, 16)
    g = export_graph(model, (x,))
    lin = [op for op in g.live_ops() if op.kind == "linear"]
    assert len(lin) == 1, g.op_histogram()
    w = lin[0].args[1].value
    assert tuple(w.shape) == (24, 16) and not w.is_contiguous()
    assert w.untyped_storage().data_ptr() == model.w.untyped_storage().data_ptr()
    assert torch.equal(w, model.w.t())
    assert_exports(model, (x,))


def test_traced_graph_typed_from_attributes_without_a_second_run(monkeypatch):
    """A graph traced here leaves only its GetAttr values (parameters, buffers) untyped: they
    get the types the run would give (checked against a run on a copy) and the graph is not
    run again."""
    model = ConvBnStack().eval()
    x = torch.randn(2, 3, 4, 4)
    traced = torch.jit.trace(model, (x,), check_trace=False)
    graph = traced.inlined_graph
    by_run = graph.copy()
    monkeypatch.setattr(script_types, "_type_attributes", lambda g, r: None)
    script_types.complete_types(by_run, traced, (x,))
    monkeypatch.undo()
    assert any(script_types._untyped(v) for n in graph.nodes() for v in n.outputs())

    def no_run(*a, **k):
        raise AssertionError("the traced graph was run a second time")

    monkeypatch.setattr(torch._C, "_create_function_from_graph", no_run)
    script_types.complete_types(graph, traced, (x,))
    types = [str(v.type()) for n in graph.nodes() for v in n.outputs()]
    assert types == [str(v.type()) for n in by_run.nodes() for v in n.outputs()]
    assert not any(script_types._untyped(v) for n in graph.nodes() for v in n.outputs())


def test_scripted_graph_that_sets_attributes_is_still_run():
    """A scripted module that assigns an attribute before reading it: its attribute reads are
    typed by running the graph (the attribute's value before the run is not what it reads)."""

    class Grow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.state = torch.zeros(2)

        def forward(self, x):
            self.state = torch.cat([self.state, x])
            return self.state * 2

    scripted = torch.jit.script(Grow())
    graph = scripted.inlined_graph
    x = torch.ones(3)
    script_types.complete_types(graph, scripted, (x,))
    reads = [n.output() for n in graph.nodes() if n.kind() == "prim::GetAttr"
             and n.s("name") == "state"]
    assert [r.type().sizes() for r in reads] == [[2], [5]], [r.type() for r in reads]


def test_a_float32_scale_folds_without_float64_and_gives_the_same_bits():
    """float32 weights times float32-exact factors (norm scales) take float32's own product:
    bit for bit the rounded float64 product, on contiguous and transposed weights; a factor
    that float32 cannot hold (a batch norm's 1/sqrt(var + eps)) keeps the float64 blocks."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(300, 257, generator=g) * 10
    exact = (torch.rand(257, generator=g) + 0.5).double()  # float32 numbers
    inexact = 1 / torch.sqrt(torch.rand(257, generator=g, dtype=torch.float64) + 1e-5)
    for weight in (w, w.t().contiguous().t()):
        for factor in (exact, inexact):
            got = rewrite.scaled_weight(weight, factor)
            want = (weight.double() * factor).to(torch.float32)
            assert got.is_contiguous() and torch.equal(got.view(torch.int32),
                                                       want.contiguous().view(torch.int32))
