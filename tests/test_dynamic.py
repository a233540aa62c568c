"""Dynamic axes: one archive serves every size.

Each model is exported once with symbolic axes and run in tract at sizes different from the
example; a dynamic axis frozen to its traced size fails these tests (tract rejects the
input or computes with the wrong size)."""

import math

import pytest
import torch
import torch.nn.functional as F

import t2n
from t2n.errors import UnsupportedOperatorsError, UsageError
from t2n.testing import assert_exports
from test_attention import check, r
from t2n.testing import FunctionModule as Fn


# every test through both front ends (torch.jit.trace, torch.export): see conftest.capture
pytestmark = pytest.mark.usefixtures("capture")

def _graph_text(model, args, tmp_path, **kw):
    path = tmp_path / "m.nnef"
    t2n.export(model, args, str(path), **kw)
    return (path / "graph.nnef").read_text()


# ------------------------------------------------------------------ the freeze detector
class ShapeArithmetic(torch.nn.Module):
    """Reads the sequence length and uses it in view, arange, expand, new_zeros and a
    position mask: everything must follow S at run time."""

    def forward(self, x):
        b, s, d = x.shape
        pos = torch.arange(s).float()  # arange of a dynamic size
        h = x.reshape(b * s, d).view(b, s, 2, d // 2)  # computed sizes
        h = h.flatten(2) + pos[None, :, None]
        z = x.new_zeros(b, s, 1) + s  # new_zeros of a dynamic shape, size used as tensor
        mask = pos[None, :] < (s - 2)  # a mask from positions
        h = h.masked_fill(~mask[..., None], 0.0)
        return h + z, pos.expand(b, s) * x.numel()


def test_frozen_axis_is_caught_export_at_8_run_at_13():
    assert_exports(ShapeArithmetic(), (r(2, 8, 4),), input_names=["x"],
                   dynamic_axes={"x": {0: "B", 1: "S"}},
                   more_args=[(r(2, 13, 4),), (r(3, 5, 4),)])


def test_static_export_keeps_literal_shapes(tmp_path):
    text = _graph_text(ShapeArithmetic(), (r(2, 8, 4),), tmp_path)
    assert "tract_symbol" not in text and "shape_of" not in text


def test_dynamic_graph_declares_symbols(tmp_path):
    text = _graph_text(ShapeArithmetic(), (r(2, 8, 4),), tmp_path, input_names=["x"],
                       dynamic_axes={"x": {0: "B", 1: "S"}})
    assert "extension tract_symbol B;" in text and "extension tract_symbol S;" in text
    assert "shape = [B, S, 4]" in text
    # the bounds tract needs to pick its same-shape kernels (1 or more by default)
    assert "extension tract_assert B >= 1;" in text and "extension tract_assert S >= 1;" in text


class AppendToCache(torch.nn.Module):
    """A key/value cache step: the past may be empty (P = 0 for a prompt)."""

    def forward(self, past, x):
        both = torch.cat([past, x], dim=2)
        return both.softmax(dim=2) * both.shape[2], both.sum(dim=2)


def test_an_axis_declared_possibly_empty_runs_empty(tmp_path):
    spec = {"past": {2: ("P", 0)}, "x": {2: "S"}}
    assert_exports(AppendToCache(), (r(1, 2, 3, 4), r(1, 2, 5, 4)), input_names=["past", "x"],
                   dynamic_axes=spec,
                   more_args=[(r(1, 2, 0, 4), r(1, 2, 6, 4)), (r(1, 2, 7, 4), r(1, 2, 1, 4))])
    text = _graph_text(AppendToCache(), (r(1, 2, 3, 4), r(1, 2, 5, 4)), tmp_path,
                       input_names=["past", "x"], dynamic_axes=spec)
    assert "extension tract_assert P >= 0;" in text and "extension tract_assert S >= 1;" in text


def test_an_axis_empty_in_the_example_may_be_empty(capture):
    kw = dict(input_names=["past", "x"], dynamic_axes={"past": {2: "P"}, "x": {2: "S"}},
              more_args=[(r(1, 2, 4, 4), r(1, 2, 1, 4))])
    example = (r(1, 2, 0, 4), r(1, 2, 5, 4))
    if capture == "export":  # torch.export fixes an axis of size 0 or 1: said by name
        with pytest.raises(UsageError, match=r"past axis 2 \(P\) is 0"):
            assert_exports(AppendToCache(), example, **kw)
        return
    assert_exports(AppendToCache(), example, **kw)


def test_model_that_needs_the_traced_size_is_refused():
    class Fixed(torch.nn.Module):
        def forward(self, x):
            return x.reshape(16, 4)  # only valid for B*S == 16

    # the trace's size probe names the axis; torch.export's sizes say the example's
    with pytest.raises(UnsupportedOperatorsError,
                       match="dynamic axis|only works for the example sizes"):
        t2n.export(Fixed(), (r(2, 8, 4),), "/tmp/t2n_fixed.nnef", input_names=["x"],
                   dynamic_axes={"x": {0: "B", 1: "S"}})


def test_two_symbols_the_model_needs_equal_are_refused():
    # the trace's size probe (torch.export keeps S and T apart and exports)
    with pytest.raises(UnsupportedOperatorsError, match="same symbol"):
        t2n.export(Fn(lambda a, b: a + b), (r(2, 8), r(2, 8)), "/tmp/t2n_st.nnef",
                   input_names=["a", "b"], dynamic_axes={"a": {1: "S"}, "b": {1: "T"}},
                   capture="trace")


def test_output_axes_stay_symbolic(tmp_path):
    res = t2n.export(Fn(lambda x: torch.cat([x, x], 1).sum(0)), (r(2, 8),),
                     str(tmp_path / "m.nnef"), input_names=["x"],
                     dynamic_axes={"x": {0: "B", 1: "S"}})
    assert [str(d) for d in res.outputs[0].shape] == ["2*S"]


# ------------------------------------------------------------------ specs
def test_list_spec_names_symbols():
    assert_exports(Fn(lambda x: x * 2), (r(2, 3),), input_names=["x"],
                   dynamic_axes={"x": [0]}, more_args=[(r(5, 3),)])


@pytest.mark.parametrize("spec,msg", [
    ({"y": {0: "B"}}, "not an input"),
    ({"x": {2: "B"}}, "out of range"),
    ({"x": {0: "2B"}}, "identifier"),
    ({"x": {0: "B", 1: "B"}}, "one symbol must name one size"),
    ({"x": {0: "x"}}, "name of an input"),
    ({"x": {0: "info"}}, "literal"),
    ({"x": {0: ("B", -1)}}, "least size"),
    ({"x": {0: ("B", 3)}}, "above the example's 2"),
    ({"x": {0: ("B",)}}, "least size"),
], ids=["unknown_input", "axis_out_of_range", "bad_symbol", "inconsistent_symbol",
        "symbol_named_like_input", "symbol_read_as_literal", "negative_least_size",
        "least_size_above_example", "least_size_missing"])
def test_wrong_specs(spec, msg):
    with pytest.raises(UsageError, match=msg):
        t2n.export(Fn(lambda x: x + 1), (r(2, 3),), "/tmp/t2n_bad.nnef", input_names=["x"],
                   dynamic_axes=spec)


def test_same_symbol_on_two_inputs():
    check(lambda a, b: a @ b.transpose(0, 1), [r(4, 3), r(4, 3)],
          {0: {0: "N"}, 1: {0: "N"}}, more=[(r(7, 3), r(7, 3))])


# ------------------------------------------------------------------ ops owned elsewhere, dynamic
def test_layer_norm_gelu_softmax_dynamic():
    ln = torch.nn.LayerNorm(8).requires_grad_(False)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()

    def f(x):
        h = ln(x)
        return (F.gelu(h), F.gelu(h, approximate="tanh"),
                torch.softmax(h, dim=1, dtype=torch.float64), F.layer_norm(x, (5, 8)))

    check(f, [r(2, 5, 8)], {0: {0: "B"}}, more=[(r(3, 5, 8),)])
    check(lambda x: torch.softmax(ln(x), -1), [r(2, 5, 8)], {0: {0: "B", 1: "S"}},
          more=[(r(1, 9, 8),)])


def test_embedding_dynamic():
    emb = torch.nn.Embedding(20, 6, padding_idx=0).requires_grad_(False)
    check(lambda i: emb(i), [torch.randint(0, 20, (2, 8))], {0: {0: "B", 1: "S"}},
          more=[(torch.randint(0, 20, (3, 13)),)])


def test_masked_fill_causal_dynamic():
    def f(x):
        s = x.shape[-1]
        i = torch.arange(s)
        causal = i[None, :] > i[:, None]
        return torch.softmax(x.masked_fill(causal, float("-inf")), -1)

    check(f, [r(2, 8, 8)], {0: {0: "B", 1: "S", 2: "S"}}, more=[(r(1, 13, 13),)])


def test_multihead_attention_dynamic():
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval().requires_grad_(False)

    def f(x):
        return mha(x, x, x, need_weights=False)[0]

    check(f, [r(2, 8, 16)], {0: {0: "B", 1: "S"}}, more=[(r(3, 13, 16),)])


def test_multihead_attention_weights_and_mask():
    mha = torch.nn.MultiheadAttention(16, 4).eval().requires_grad_(False)

    def f(x):
        s = x.shape[0]
        mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
        return mha(x, x, x, attn_mask=mask)

    check(f, [r(8, 2, 16)], {0: {0: "S", 1: "B"}}, more=[(r(5, 3, 16),)])


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_transformer_encoder_layer_dynamic(norm_first):
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, batch_first=True,
                                             norm_first=norm_first, activation="gelu")
    layer = layer.eval().requires_grad_(False)

    def f(x, pad):
        return layer(x, src_key_padding_mask=pad)

    def pad(b, s):
        m = torch.zeros(b, s, dtype=torch.bool)
        m[-1, s - 2:] = True
        return m

    check(f, [r(2, 8, 16), pad(2, 8)], {0: {0: "B", 1: "S"}, 1: {0: "B", 1: "S"}},
          more=[(r(3, 13, 16), pad(3, 13))])


# ------------------------------------------------------------------ command line
def test_cli_dynamic_flag(tmp_path):
    from click.testing import CliRunner

    import cli_models
    from t2n.cli import cli
    from t2n.check.tract_runner import run_in_tract

    out = tmp_path / "m.nnef.tgz"
    res = CliRunner().invoke(cli, ["export", "cli_models:make_mlp", "-o", str(out), "--input",
                                   "x:3x8:f32", "--dynamic", "x:0=B", "--check"])
    assert res.exit_code == 0, res.output
    x = torch.randn(7, 8)
    got = run_in_tract(str(out), [x.numpy()])[0]
    with torch.no_grad():
        want = cli_models.make_mlp()(x).numpy()
    assert got.shape == (7, 4)
    assert abs(got - want).max() < 1e-5
    bad = CliRunner().invoke(cli, ["export", "cli_models:make_mlp", "-o", str(out), "--input",
                                   "x:3x8:f32", "--dynamic", "x:5=B"])
    assert bad.exit_code != 0 and "out of range" in bad.output
    folder = tmp_path / "empty_ok.nnef"
    res = CliRunner().invoke(cli, ["export", "cli_models:make_mlp", "-o", str(folder), "--input",
                                   "x:3x8:f32", "--dynamic", "x:0=B>=0", "--check"])
    assert res.exit_code == 0, res.output
    assert "extension tract_assert B >= 0;" in (folder / "graph.nnef").read_text()


def test_a_multiple_of_a_floor_division_keeps_its_floor():
    """``2 * (S // 2)`` is written ``2*((S)/2)``: tract reads ``2*(S)/2`` as ``(2*S)/2``,
    which kept every odd length whole (a slice to the even part ran to S)."""
    assert_exports(Fn(lambda x: x[..., : 2 * (x.shape[-1] // 2)] * 2), torch.randn(2, 7),
                   input_names=["x"], dynamic_axes={"x": {1: "S"}},
                   more_args=[(torch.randn(2, 8),), (torch.randn(2, 5),)])


def test_view_minus_one_keeps_the_dynamic_batch():
    """Swin's window partition, ``view(-1, 7, 7, C)`` of ``[B, 3, 3, 7, 7, C]`` where
    PyTorch's shape function gives no answer: the -1 is ``9*B``, not the traced 9 (tract
    refused to load the archive)."""
    def windows(x):
        b, h, w, c = x.shape
        x = x.view(b, 3, 7, 3, 7, c).permute(0, 1, 3, 2, 4, 5).contiguous()
        return x.view(-1, 7, 7, c).view(-1, 49, c) * 2

    assert_exports(Fn(windows), torch.randn(2, 21, 21, 8), input_names=["x"],
                   dynamic_axes={"x": {0: "B"}}, more_args=[(torch.randn(3, 21, 21, 8),)])


def test_a_size_that_fits_the_example_only_points_the_trace_to_capture_export(capture,
                                                                             tmp_path):
    """The refusal lists the op; under the trace it adds where sizes computed in Python
    are recorded (pvt_v2 with dynamic H, W exports with capture='export')."""
    m = Fn(lambda x: x.reshape(x.shape[0], 2, math.ceil(x.shape[1] / 2)) * 2)  # S even only
    with pytest.raises(UnsupportedOperatorsError, match="only works") as e:
        t2n.export(m, (r(2, 8),), tmp_path / "m.nnef.tar", input_names=["x"],
                   dynamic_axes={"x": {1: "S"}}, capture=capture)
    assert ("capture='export'" in str(e.value)) == (capture == "trace")
