"""The folding and fusing passes (t2n/passes: merge_pad, fold_affine, fuse_norm,
fold_affine_input, einsum_to_matmul, fuse_linear, fold_scale, transpose_first).

Each pass is tested differentially: the export (passes on, the default) runs in tract and is
compared with PyTorch eager, and the op histogram shows that the rewrite happened; cases the
pass must leave alone are checked on the graph (``optimize=False`` gives the graph as the
mappings wrote it)."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from t2n import api
from t2n.testing import FunctionModule, assert_exports


def _fn(fn, *modules):
    """A module computing ``fn``; ``modules`` (used inside ``fn``) become its submodules so
    that their weights are parameters, not traced constants."""
    f = FunctionModule(fn)
    f.parts = nn.ModuleList(modules)
    return f


def _hist(model, args, **kw):
    return api.export_graph(model, args, **kw).op_histogram()


def _randomise_bn(model):
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            m.weight.data.uniform_(0.5, 2)
            m.bias.data.uniform_(-1, 1)
    return model.eval()


# ---------------------------------------------------------------------------- fold_affine
class ConvBN(nn.Module):
    def __init__(self, groups=1, bias=False, dims=2):
        super().__init__()
        conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[dims]
        bn = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}[dims]
        self.c = conv(4, 8, 3, padding=1, groups=groups, bias=bias)
        self.bn = bn(8)

    def forward(self, x):
        return torch.relu(self.bn(self.c(x)))


@pytest.mark.parametrize("groups,bias,dims", [(1, False, 2), (4, True, 2), (1, True, 1),
                                              (2, False, 3)])
def test_batch_norm_folds_into_conv(groups, bias, dims):
    model = _randomise_bn(ConvBN(groups, bias, dims))
    x = torch.randn(2, 4, *([6] * dims))
    r = assert_exports(model, (x,))
    assert r.op_histogram == {"conv": 1, "relu": 1}, r.op_histogram
    assert _hist(model, (x,), optimize=False).get("mul") == 1


def test_zero_bias_after_folding_is_the_literal_zero():
    # a batch norm at its initial statistics (every constructor-built model) folds to a
    # bias of zeros, and a fresh layer may have one: written as 0.0, not as a constant, as
    # the ONNX route drops it; a real bias stays; tract computes the same either way
    x = torch.randn(2, 4, 6, 6)
    fresh = nn.Conv2d(4, 8, 3)
    nn.init.zeros_(fresh.bias)
    for model, zero in ((ConvBN().eval(), True), (_randomise_bn(ConvBN()), False),
                        (_fn(lambda x: fresh(x), fresh).eval(), True)):
        assert_exports(model, (x,))
        conv = next(op for op in api.export_graph(model, (x,)).live_ops() if op.kind == "conv")
        bias = conv.args[2]
        assert (bias.rank == 0 and bias.literal == "0.0") is zero, (type(model).__name__, bias)


def test_linear_then_batch_norm_1d_and_a_scale_fold_into_one_linear():
    model = _randomise_bn(nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5)))
    f = _fn(lambda x: (model(x) * 3.0 - 1.0) / 2.0, model)
    r = assert_exports(f, (torch.randn(4, 6),))
    assert r.op_histogram == {"linear": 1}, r.op_histogram


def test_affine_with_a_second_reader_stays():
    conv = nn.Conv2d(3, 4, 3)
    def fn(x):
        y = conv(x)
        return y * 2.0, y

    f = _fn(fn, conv)
    h = _hist(f, (torch.randn(1, 3, 5, 5),))
    assert h.get("mul") == 1  # the conv output is also returned as is


def test_non_finite_scale_is_not_folded():
    conv = nn.Conv2d(3, 4, 3)
    f = _fn(lambda x: conv(x) * float("inf"), conv)
    assert _hist(f, (torch.randn(1, 3, 5, 5),)).get("mul") == 1


# ---------------------------------------------------------------------------- merge_pad
def test_zero_pad_merges_into_conv_and_avg_pool_and_inf_pad_into_max_pool():
    conv = nn.Conv2d(3, 4, 3)

    def fn(x):
        y = conv(F.pad(x, (1, 2, 0, 1)))  # TF-"same"-style asymmetric padding
        y = F.avg_pool2d(F.pad(y, (1, 1, 1, 1)), 3, 1, count_include_pad=True)
        return F.max_pool2d(F.pad(y, (1, 0, 1, 0), value=-math.inf), 2, 2)

    f = _fn(fn, conv)
    r = assert_exports(f, (torch.randn(1, 3, 9, 9),))
    assert "pad" not in r.op_histogram, r.op_histogram


def test_pads_that_must_stay():
    conv = nn.Conv2d(3, 4, 3)
    cases = [
        lambda x: conv(F.pad(x, (1, 1, 1, 1), mode="reflect")),  # not zeros
        lambda x: conv(F.pad(x, (1, 1, 1, 1), value=0.5)),  # not zeros
        lambda x: F.max_pool2d(F.pad(x, (1, 1, 1, 1)), 2),  # zeros, not -inf, before max
        # the pool's own padding is not counted, the pad's zeros are
        lambda x: F.avg_pool2d(F.pad(x, (1, 1, 1, 1)), 3, 1, 1, count_include_pad=False),
        # windows of only padding: -inf after the pad, undefined for the pool
        lambda x: F.max_pool2d(F.pad(x, (4, 0, 0, 0), value=-math.inf), 2, 2),
    ]
    for fn in cases:
        f = _fn(fn, conv)
        x = torch.randn(1, 3, 6, 6)
        assert "pad" in _hist(f, (x,)), fn
    assert_exports(_fn(cases[0], conv), (torch.randn(1, 3, 6, 6),))


# ---------------------------------------------------------------------------- fuse_norm
@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_layer_norm_and_rms_norm_use_tract_rms_norm(eps):
    ln = nn.LayerNorm(16, eps=eps)
    rms = nn.RMSNorm(16, eps=eps)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 2), ln.bias.uniform_(-1, 1), rms.weight.uniform_(0.5, 2)
    f = _fn(lambda x: (ln(x * 3 + 1), rms(x)), ln, rms)
    x = torch.randn(2, 5, 16)
    x[0, 1] = 0.0  # a constant row: the centred values are all zero
    r = assert_exports(f, (x,))
    h = r.op_histogram  # the layer norm's rms_norm is inside its t2n_layer_norm_affine call
    assert h.get("tract_core_rms_norm") == 1 and h.get("t2n_layer_norm_affine") == 1, h
    assert "rsqrt" not in h
    h = _hist(f, (x,), optimize=True)
    assert "rsqrt" not in h


def test_norm_nan_propagates_like_pytorch():
    ln = nn.LayerNorm(8)
    x = torch.randn(3, 8)
    x[1, 2] = float("nan")
    r = assert_exports(_fn(lambda x: ln(x), ln), (x,))
    assert r.op_histogram.get("t2n_layer_norm_affine") == 1, r.op_histogram


def test_norm_over_two_axes_is_not_fused():
    ln = nn.LayerNorm([4, 6])
    f = _fn(lambda x: ln(x), ln)
    x = torch.randn(2, 4, 6)
    assert "tract_core_rms_norm" not in _hist(f, (x,))
    assert_exports(f, (x,))


# ---------------------------------------------------------------------------- fold_affine_input
def test_layer_norm_affine_folds_into_every_reading_linear():
    ln, q, k = nn.LayerNorm(12), nn.Linear(12, 8), nn.Linear(12, 8, bias=False)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 2), ln.bias.uniform_(-1, 1)
    f = _fn(lambda x: q(ln(x)) + k(ln(x)) * 2, ln, q, k)
    x = torch.randn(3, 12)
    r = assert_exports(f, (x,))
    h = r.op_histogram
    # the affine went into both layers; k's "* 2" folded into k's weights
    assert h.get("linear") == 2 and "mul" not in h and "t2n_scale_shift" not in h, h
    # with a residual reader the affine stays (in the layer norm's call)
    g = _fn(lambda x: q(ln(x)) + ln(x)[:, :8], ln, q)
    assert _hist(g, (x,)).get("t2n_layer_norm_affine") == 1


# ---------------------------------------------------------------------------- einsum_to_matmul
@pytest.mark.parametrize("expr,sa,sb", [
    ("bhxe,bhye->bhxy", (2, 3, 4, 5), (2, 3, 6, 5)),
    ("bhxy,bhye->bhxe", (2, 3, 4, 6), (2, 3, 6, 5)),
    ("bkx,bky->bxy", (2, 5, 4), (2, 5, 3)),  # contracted axis first in both
])
def test_matmul_like_einsums_become_matmul(expr, sa, sb):
    f = FunctionModule(lambda a, b: torch.einsum(expr, a, b))
    r = assert_exports(f, (torch.randn(*sa), torch.randn(*sb)))
    assert r.op_histogram.get("matmul") == 1 and "tract_core_einsum" not in r.op_histogram, \
        r.op_histogram


def test_other_einsums_stay():
    for expr, sa, sb in [("bij,bjk->bki", (2, 3, 4), (2, 4, 5)),  # result transposed
                         ("ij,ij->i", (3, 4), (3, 4))]:
        f = FunctionModule(lambda a, b, e=expr: torch.einsum(e, a, b))
        assert "tract_core_einsum" in _hist(f, (torch.randn(*sa), torch.randn(*sb))), expr


# ---------------------------------------------------------------------------- fold_scale
class QKV(nn.Module):
    """Fused-qkv self-attention written out (timm's ViT attention)."""

    def __init__(self, dim=16, heads=2, divide=False, leak=False):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.heads, self.divide, self.leak = heads, divide, leak

    def forward(self, x):
        b, n, c = x.shape
        y = self.qkv(x)
        qkv = y.reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        d = c // self.heads
        s = q @ k.transpose(-2, -1)
        s = s / math.sqrt(d) if self.divide else s * d ** -0.5
        out = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)
        return (out, y[..., 12:20]) if self.leak else out


@pytest.mark.parametrize("divide", [False, True])
def test_attention_scale_folds_into_the_q_projection(divide):
    m = QKV(divide=divide).eval()
    x = torch.randn(2, 5, 16)
    r = assert_exports(m, (x,))
    h = r.op_histogram
    assert "mul" not in h and "div" not in h, h
    assert h.get("matmul") == 2, h  # q @ k^T and p @ v (the projection of a batch of 2 is
    # an einsum: t2n.passes.broadcast_axes)


def test_scale_stays_when_the_projection_has_another_reader():
    m = QKV(leak=True).eval()  # channels of both q and k are also an output
    x = torch.randn(1, 4, 16)
    assert _hist(m, (x,)).get("mul") == 1
    assert_exports(m, (x,))


# ---------------------------------------------------------------------------- transpose_first
def test_patch_embedding_transpose_moves_before_the_flatten():
    conv = nn.Conv2d(3, 8, 4, stride=4)
    f = _fn(lambda x: F.layer_norm(conv(x).flatten(2).transpose(1, 2), (8,)), conv)
    x = torch.randn(2, 3, 16, 16)
    g = api.export_graph(f, (x,))
    kinds = [op.kind for op in g.live_ops()]
    assert kinds.index("transpose") < kinds.index("reshape"), kinds
    assert_exports(f, (x,))


def test_optimize_false_keeps_the_mapping_graph():
    model = _randomise_bn(ConvBN())
    x = torch.randn(1, 4, 6, 6)
    h = _hist(model, (x,), optimize=False)
    assert h.get("mul") == 1 and h.get("add") == 1
    assert_exports(model, (x,), optimize=False)


# ---------------------------------------------------------------------------- compose
class Composite(nn.Module):
    """One of each composite the compose pass names (GELU, layer norm, ReLU6, a batch norm
    after a concat, mean without keepdim, chunk)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 4, 1)
        self.bn = nn.BatchNorm2d(8)
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        y = self.bn(torch.cat([self.c1(x), self.c2(x)], 1))  # not foldable: after a concat
        a, b = F.relu6(y).chunk(2, dim=1)
        m = (a * b).mean((2, 3))
        return F.gelu(self.ln(torch.cat([m, m * 2], 1)))


def test_compose_is_for_tract_only(tmp_path):
    ln = nn.LayerNorm(8)
    f = _fn(lambda x: F.gelu(ln(x)), ln)
    import t2n
    t2n.export(f, (torch.randn(2, 8),), str(tmp_path / "k.nnef"), target="khronos")
    text = (tmp_path / "k.nnef" / "graph.nnef").read_text()
    assert "t2n_gelu" not in text and "tract_core" not in text
    assert "t2n_gelu" in _hist(f, (torch.randn(2, 8),))


class Chains(nn.Module):
    """One model for the rewrites that close the op-count gap to the ONNX route: GELU's tanh
    form written out (transformers' gelu_new), a NaN-keeping clamp_min, a three-way split,
    a layer norm whose affine cannot fold (a conv follows), x @ W + b with W stored
    [in, out] (GPT-2's Conv1D), view of a view, transpose of a permute, expand_as into a
    division."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 12) * 0.3)
        self.b = nn.Parameter(torch.randn(12))
        self.ln = nn.LayerNorm(6)
        nn.init.normal_(self.ln.weight)
        nn.init.normal_(self.ln.bias)
        self.conv = nn.Conv1d(3, 2, 1)

    def forward(self, x):  # x: [2, 3, 6]
        h = self.ln(x)
        c = self.conv(h)  # [2, 2, 6]
        y = (h.reshape(6, 6) @ self.w + self.b).view(2, 3, 12)
        g = 0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                        * (y + 0.044715 * torch.pow(y, 3.0))))
        q, k, v = g.view(2, 3, 3, 4).view(2, 3, 12).split(4, dim=-1)
        kt = k.view(2, 3, 2, 2).permute(0, 2, 1, 3).transpose(-1, -2)  # [2, 2, 2, 3]
        n = q.norm(dim=-1, keepdim=True).clamp_min(1e-3)
        return (q / n.expand_as(q)) @ kt.reshape(2, 4, 3), v, c


class Both(nn.Module):
    """Composite and Chains in one export (one tract run for both sets of rewrites)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = _randomise_bn(Composite()), Chains()

    def forward(self, x, y):
        return self.a(x), *self.b(y)


def test_composites_and_chains_become_single_ops_and_match():
    model = Both().eval()
    x = torch.randn(2, 3, 6, 6) * 4
    y = torch.randn(2, 3, 6)
    y[0, 0, 0] = float("nan")  # the NaN-keeping max must keep it
    r = assert_exports(model, (x, y))
    h = r.op_histogram
    for name in ("t2n_gelu", "t2n_clamp", "t2n_mean", "t2n_split2", "t2n_gelu_tanh3",
                 "t2n_max_nan", "t2n_split3", "t2n_scale_shift"):  # BN after the concat
        assert h.get(name) == 1, (name, h)
    assert h.get("t2n_layer_norm_affine") == 2, h
    assert "tract_core_erf" not in h and "max" not in h and "slice" not in h, h
    # x @ W + b with W [in, out] is a linear; view(view), transpose(permute) and
    # expand_as before the division are gone
    assert h.get("linear") == 1 and "matmul" in h and h.get("transpose") == 1, h
    assert "tract_core_broadcast" not in h and h.get("reshape", 0) <= 4, h
    before = _hist(model.b, (y,), optimize=False)
    assert before.get("transpose") == 2 and "tract_core_broadcast" in before, before


def test_cube_and_inverse_square_are_products_not_powf():
    # GPT-2's NewGELUActivation: pow(x, 3.0) ran as tract's per-element powf, a fifth of the
    # model's run time; PyTorch itself computes x ** 3 and x ** -2 as products
    def f(x, d):
        gelu = 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 3.0))))
        other = 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 4.0))))
        return gelu, other, x ** 3, x ** -2, d ** 3, d ** -2, x.abs() ** -0.5, x ** 2.5

    x = torch.randn(4, 40) * 3
    x[0, :3] = torch.tensor([0.0, float("inf"), float("nan")])
    d = torch.randn(3, 5, dtype=torch.float64) * 3
    r = assert_exports(FunctionModule(f), (x, d))
    h = r.op_histogram
    assert h.get("t2n_gelu_tanh3") == 1 and h.get("t2n_gelu_tanh") == 1, h
    assert h.get("pow") == 1 and h.get("rsqrt") == 1, h  # x ** 2.5 only: the fourth power
    # stays in its fragment


def test_minimal_range_of_reshapes():
    from t2n.passes.minimal_reshape import minimal_range

    assert minimal_range([1, 116, 8, 8], [1, 2, 58, 8, 8]) == (1, 1, [2, 58])
    assert minimal_range([1, 58, 2, 8, 8], [1, 116, 8, 8]) == (1, 2, [116])
    assert minimal_range([1, 16, 576], [1, 16, 3, 4, 48]) == (2, 1, [3, 4, 48])
    assert minimal_range([6, 4], [4, 6]) is None  # nothing shared
    assert minimal_range([2, 3, 1], [2, 3]) == (1, 2, [3])  # one axis kept on each side
    assert minimal_range([2, 3], [2, 3, 1]) == (1, 1, [3, 1])
    assert minimal_range([4, 5], [4, -1]) is None and minimal_range([4, 5], [4, 0, 5]) is None


class Shuffles(nn.Module):
    """Channel shuffle (ShuffleNet), an attention head split and merge, a flatten."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(24, 72)

    def forward(self, x, t):
        b, c, h, w = x.shape
        y = x.view(b, 2, c // 2, h, w).transpose(1, 2).reshape(b, c, h, w)
        q = self.qkv(t).reshape(t.shape[0], t.shape[1], 3, 4, 6).permute(2, 0, 3, 1, 4)
        a = (q[0] @ q[1].transpose(-1, -2)).softmax(-1) @ q[2]
        return y.flatten(1), a.transpose(1, 2).reshape(t.shape[0], t.shape[1], 24)


def test_reshapes_written_over_their_changed_axes(tmp_path):
    # same outputs, static and with a dynamic batch; the archive's reshapes name a range
    import t2n

    args = (torch.randn(2, 6, 5, 4), torch.randn(2, 7, 24))
    assert_exports(Shuffles().eval(), args)
    assert_exports(Shuffles().eval(), args, more_args=[(torch.randn(3, 6, 5, 4),
                                                        torch.randn(3, 7, 24))],
                   input_names=["x", "t"], dynamic_axes={"x": {0: "B"}, "t": {0: "B"}})
    t2n.export(Shuffles().eval(), args, str(tmp_path / "s.nnef"))
    lines = [ln for ln in (tmp_path / "s.nnef" / "graph.nnef").read_text().splitlines()
             if "= reshape(" in ln]
    assert lines and all("axis_start" in ln for ln in lines), lines
    shuffle = _fn(lambda x: x.view(2, 2, 3, 5, 4).transpose(1, 2).reshape(2, 6, 5, 4))
    t2n.export(shuffle, (args[0],), str(tmp_path / "k.nnef"), target="khronos")
    text = (tmp_path / "k.nnef" / "graph.nnef").read_text()
    assert "= reshape(" in text and "axis_start" not in text  # the tract target only


# ---------------------------------------------------------------------------- squeeze_weights
def test_product_weights_lose_their_size_1_leading_axes(tmp_path):
    # NNEF's linear/matmul lift a weight to the input's rank ([1, K, C]); tract then copies
    # it to drop the axis again. For tract the weight is stored [K, C] and read by an
    # einsum (one fragment call per linear, so the op count stays); a weight read twice
    # keeps its form; tract computes the same on a fixed and on a dynamic batch
    lin, shared = nn.Linear(8, 6), nn.Linear(6, 6)
    model = _fn(lambda x: shared(shared(torch.relu(lin(x)))), lin, shared).eval()
    x = torch.randn(1, 5, 8)
    g = api.export_graph(model, (x,))
    h = g.op_histogram()
    assert h.get("t2n_linear3_f32") == 1 and h.get("linear") == 2, h
    used = g.used_tensors(g.live_ops())
    ranks = {v.label: v.tensor.rank for v in g.variables if id(v.tensor) in used}
    assert ranks["parts.0.weight"] == 2 and ranks["parts.1.weight"] == 3, ranks
    assert_exports(model, (x,))
    assert_exports(model, (torch.randn(2, 5, 8),), input_names=["x"],
                   dynamic_axes={"x": {0: "B"}}, more_args=[(torch.randn(3, 5, 8),)])
    api.export(model, (x,), str(tmp_path / "k.nnef"), target="khronos")
    assert "t2n_linear" not in (tmp_path / "k.nnef" / "graph.nnef").read_text()
