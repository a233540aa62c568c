"""The sizes of common ops on dynamic axes read from three runs on meta tensors
(t2n/walk/shape_points.py) instead of PyTorch's symbolic shape functions: the same archive,
byte for byte, as with PyTorch's answers alone, the same refusals, and the meta runs really
answering (each case counts them)."""

import pytest
import torch
import torch.nn.functional as F

import t2n
from t2n.errors import T2NError
from t2n.walk import shape_points


class Attention(torch.nn.Module):
    """Linear projections, heads split by reshape, a causal mask, a past joined by cat
    (``P + S``), softmax, norms, an embedding: a decoder layer's ops."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.qkv = torch.nn.Linear(16, 48)
        self.out = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, ids, past):
        b, s = ids.shape
        x = self.norm(self.emb(ids))
        q, k, v = self.qkv(x).split(16, dim=-1)
        q, k, v = (t.reshape(b, s, 2, 8).transpose(1, 2) for t in (q, k, v))
        k = torch.cat([past, k], dim=2)
        v = torch.cat([past, v], dim=2)
        scores = q @ k.transpose(-1, -2) / 8 ** 0.5
        p = past.shape[2]
        mask = torch.ones(s, p + s, dtype=torch.bool).tril(p)
        scores = scores.masked_fill(~mask, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, 16)
        return F.gelu(self.out(y)) + x, y.mean(dim=1, keepdim=True)


class ConvNet(torch.nn.Module):
    """Convolutions, batch norm, in-place ReLU, pooling over a dynamic batch."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = F.max_pool2d(torch.relu_(self.bn(self.conv(x))), 2)
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


class Chunked(torch.nn.Module):
    """A length padded up to a multiple of 4 (a floor in its size: left to PyTorch's
    functions) and used after."""

    def forward(self, x):
        pad = (4 - x.shape[1] % 4) % 4
        y = F.pad(x, (0, 0, 0, pad)).reshape(x.shape[0], -1, 4, x.shape[2])
        return y.sum(2).exp()


# the nodes the meta runs answer at least, per case (none where every size is rounded)
ANSWERED = {"attention": 20, "conv_batch": 5, "chunked_pad": 0}
CASES = {
    "attention": (Attention, lambda: (torch.randint(0, 50, (2, 5)), torch.randn(2, 2, 3, 8)),
                  dict(input_names=["ids", "past"],
                       dynamic_axes={"ids": {0: "B", 1: "S"}, "past": {0: "B", 2: ("P", 0)}})),
    "conv_batch": (ConvNet, lambda: (torch.randn(2, 3, 8, 8),),
                   dict(input_names=["x"], dynamic_axes={"x": {0: "B"}})),
    "chunked_pad": (Chunked, lambda: (torch.randn(1, 6, 3),),
                    dict(input_names=["x"], dynamic_axes={"x": {1: "S"}})),
}


def _export(case, path, monkeypatch, fast: bool, capture: str = "trace"):
    build, args, kw = CASES[case]
    torch.manual_seed(0)
    model = build().eval()
    answered = []
    original = shape_points.PointShapes.out_shapes

    def out_shapes(self, schema, inputs):
        out = original(self, schema, inputs) if fast else None
        answered.append(out is not None)
        return out

    monkeypatch.setattr(shape_points.PointShapes, "out_shapes", out_shapes)
    t2n.export(model, args(), path, capture=capture, **kw)
    monkeypatch.setattr(shape_points.PointShapes, "out_shapes", original)
    with open(path, "rb") as f:
        return f.read(), sum(answered)


@pytest.mark.parametrize("case", list(CASES))
def test_same_archive_as_with_pytorchs_shape_functions(case, tmp_path, monkeypatch):
    """The trace's mechanism (its sizes come from SymbolicShapes, t2n/walk/dynamic.py);
    torch.export gives every node's sizes itself: the test after this one."""
    fast, answered = _export(case, tmp_path / "fast.nnef.tar", monkeypatch, fast=True)
    slow, _ = _export(case, tmp_path / "slow.nnef.tar", monkeypatch, fast=False)
    assert answered >= ANSWERED[case], f"{case}: the meta runs answered {answered} nodes"
    assert fast == slow, f"{case}: the archive differs from the one PyTorch's shapes give"


@pytest.mark.parametrize("case", list(CASES))
def test_each_case_converts_through_both_captures(case, capture):
    """torch.export gives every node's sizes itself: its ``S % 4`` is read as floor
    arithmetic, as the trace's is, so tract proves the padded length a whole number of
    chunks (``Mod`` kept made it refuse the reshape's ``4 * ((S + 3) / 4)``)."""
    from t2n.testing import assert_exports

    build, args, kw = CASES[case]
    torch.manual_seed(0)
    assert_exports(build().eval(), args(), **kw)


def test_the_archive_runs_at_other_sizes(capture):
    from t2n.testing import assert_exports

    build, args, kw = CASES["attention"]
    torch.manual_seed(0)
    assert_exports(build().eval(), args(), **kw,
                   more_args=[(torch.randint(0, 50, (3, 7)), torch.randn(3, 2, 0, 8))])


def test_two_symbols_broadcast_together_are_still_refused(tmp_path):
    """``S`` against ``T`` fails at the other points: PyTorch's functions then name the
    condition, as before."""
    with pytest.raises(T2NError, match="only works when (S == T|T == S): give those axes"):
        t2n.export(t2n.testing.FunctionModule(lambda a, b: a + b),
                   (torch.randn(1, 4), torch.randn(1, 4)), tmp_path / "m.nnef.tar",
                   input_names=["a", "b"], dynamic_axes={"a": {1: "S"}, "b": {1: "T"}},
                   capture="trace")  # the meta runs are the trace's (export keeps S, T)


def test_a_reshape_to_the_example_sizes_is_still_refused(tmp_path):
    with pytest.raises(T2NError, match="only works when 4.B.S == 24 .* would be frozen"):
        t2n.export(t2n.testing.FunctionModule(lambda x: x.reshape(12, 2)),
                   (torch.randn(2, 3, 4),), tmp_path / "m.nnef.tar",
                   input_names=["x"], dynamic_axes={"x": {0: "B", 1: "S"}},
                   capture="trace")  # the trace's sizes (test_dynamic pins export's refusal)


def test_sizes_not_polynomial_in_the_symbols_are_not_read_from_points():
    """A size rounded up to a multiple is the same at every point near the example: the
    meta runs must not take it for a number."""
    import sympy

    s = sympy.Symbol("S", integer=True, positive=True)
    points = shape_points.PointShapes({s: 6})
    rounded = -4 * sympy.floor(-s / 4)
    assert len(set(points.values(rounded))) == 1
    assert len(set(points.values(2 * s + 1))) == 3
