"""User mappings (``t2n.mapping``, t2n/extensions.py): a ``torch.library`` custom op exported
through the user's mapping with both captures and checked in tract; the mapping module
loaded by ``--extension``, by a manifest's ``extensions`` and by a ``t2n.mappings`` entry
point; the override rules; the refusals (an unmapped custom op, a mutating one, a mapping
that fails)."""

import importlib
import os
import sys
import textwrap

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import extension_ops
import t2n
from t2n import extensions
from t2n.walk import registry
from t2n.cli import cli
from t2n.errors import ConversionError, UnsupportedOperatorsError, UsageError
from t2n.testing import assert_exports

HERE = os.path.dirname(os.path.abspath(__file__))
MAPPINGS = "extension_mappings"


@pytest.fixture(autouse=True)
def user_mappings(monkeypatch):
    """Each test starts without user mappings and leaves none behind: the table is restored
    and the mapping module forgotten, so importing it registers its mappings again."""
    registry.lookup("add")  # the built-in table, loaded before the snapshot
    monkeypatch.setattr(registry, "_USER", {})
    monkeypatch.setattr(extensions, "_entry_points_loaded", False)
    monkeypatch.delitem(sys.modules, MAPPINGS, raising=False)
    yield
    sys.modules.pop(MAPPINGS, None)
    sys.modules.pop("pt2e_mappings", None)


def _load_mappings():
    importlib.import_module(MAPPINGS)


# ---------------------------------------------------------------------------- export
@pytest.mark.parametrize("capture", ["trace", "export"])
def test_custom_ops_export_through_user_mappings(capture):
    """CustomOpNet: t2n_test::scaled_tanh (a float argument) and t2n_test::row_norm (a
    shape-changing op), mapped with g.op / g.constant, on a dynamic batch axis."""
    _load_mappings()
    model, args = extension_ops.make_model()
    result = assert_exports(model, args, capture=capture, input_names=["x"],
                            dynamic_axes={"x": {0: "B"}}, more_args=[(torch.randn(5, 8),)])
    hist = result.op_histogram
    assert hist.get("tanh") == 1 and hist.get("sum_reduce") == 1, (capture, hist)
    assert [str(o) for o in result.outputs] == ["output_0: Bx6 f32"]


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_unmapped_custom_op_is_refused_naming_op_and_line(capture, tmp_path):
    model, args = extension_ops.make_model()
    with pytest.raises(UnsupportedOperatorsError) as e:
        t2n.export(model, args, tmp_path / "m.nnef", capture=capture)
    text = str(e.value)
    assert "t2n_test::scaled_tanh" in text and "extension_ops.py:43" in text, (capture, text)
    assert "t2n.mapping('t2n_test::scaled_tanh')" in text
    assert not (tmp_path / "m.nnef").exists()


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_custom_op_writing_into_an_argument_is_refused(capture, tmp_path):
    """A mutates_args op: the mapping returns values, the write would be lost."""

    @t2n.mapping("t2n_test::add_into")
    def add_into(g, out, x):
        return g.op("add", out, x)

    with pytest.raises(UnsupportedOperatorsError) as e:
        t2n.export(extension_ops.MutatingNet(), (torch.randn(2, 3),), tmp_path / "m.nnef",
                   capture=capture)
    text = str(e.value)
    assert "t2n_test::add_into" in text and "mutates_args" in text and \
        "extension_ops.py:50" in text, (capture, text)


def test_a_failing_user_mapping_is_reported_as_its_own(tmp_path):
    @t2n.mapping("t2n_test::scaled_tanh")
    def broken(g, x, scale):
        return x.no_such_attribute

    model, args = extension_ops.make_model()
    with pytest.raises(UnsupportedOperatorsError) as e:
        t2n.export(model, args, tmp_path / "m.nnef")
    text = str(e.value)
    assert "t2n_test::scaled_tanh" in text and "<locals>.broken failed: AttributeError" in text and \
        "AttributeError" in text, text


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_pt2e_style_program_exports_with_user_mappings(capture):
    """An exported program (it refuses train()/eval(), as torchao's pt2e output does) whose
    quantize/dequantize ops come from tests/pt2e_mappings.py: the ScalarType arguments
    arrive as torch dtypes with both captures, and the per-channel dequantization of the
    constant weight, which has no mapping, is folded."""
    importlib.import_module("pt2e_mappings")
    x = torch.randn(2, 3, 8, 8)
    program = torch.export.export(extension_ops.Pt2eStyleConv(), (x,)).module()
    hist = assert_exports(program, (x,), capture=capture).op_histogram
    assert hist.get("tract_core_round_even") == 2 and hist.get("conv") == 1, (capture, hist)


def test_constant_takes_numpy_torch_and_python_values():
    from t2n.session import ExportSession
    from t2n.walk.builder import Graph

    g = Graph(ExportSession())
    a = g.constant(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert a.dtype == torch.int32 and tuple(a.shape) == (2, 3)
    b = g.constant(np.float32(1.5))
    assert b.dtype == torch.float32 and tuple(b.shape) == ()
    c = g.constant(torch.ones(100, 3, dtype=torch.float16))  # a .dat weight
    assert c.dtype == torch.float16 and g.variables[-1].tensor is c
    assert g.constant(3).dtype == torch.int64 and g.constant(0.5).dtype == torch.float32
    assert g.constant([1, 2]).dtype == torch.float32  # a list: float32 unless dtype= says
    assert g.constant([1, 2], torch.int64).dtype == torch.int64


# ---------------------------------------------------------------------------- overrides
def test_overriding_an_aten_mapping_must_be_explicit(tmp_path):
    def relu_as_max(g, self):
        return g.op("max", self, g.constant(np.array(0, dtype=np.float32)))

    with pytest.raises(UsageError, match=r"aten::relu already has t2n's built-in mapping.*"
                                         r"override=True"):
        t2n.mapping("aten::relu")(relu_as_max)
    t2n.mapping("aten::relu", override=True)(relu_as_max)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    hist = assert_exports(model, (torch.randn(3, 4),)).op_histogram
    assert hist.get("max") == 1 and "relu" not in hist, hist


def test_override_rules_for_user_mappings():
    def first(g, x, scale):
        return x

    def second(g, x, scale):
        return x

    t2n.mapping("t2n_test::scaled_tanh")(first)
    t2n.mapping("t2n_test::scaled_tanh")(first)  # the same function again: no replacement
    with pytest.raises(UsageError, match=r"t2n_test::scaled_tanh already has "
                                         r"test_extensions\.test_override_rules.*first"):
        t2n.mapping("t2n_test::scaled_tanh")(second)
    t2n.mapping("t2n_test::scaled_tanh", override=True)(second)
    assert registry.lookup("t2n_test::scaled_tanh").__wrapped__ is second
    with pytest.raises(UsageError, match="no mapping of aten::not_an_op to override"):
        t2n.mapping("aten::not_an_op", override=True)(first)
    for bad in ("scaled_tanh", "t2n_test::scaled_tanh.default", "prim::If", ""):
        with pytest.raises(UsageError, match=r"t2n\.mapping"):
            t2n.mapping(bad)


def test_a_library_op_ending_in_underscore_is_not_in_place():
    """``mylib::op_`` is its own op (the name says nothing about writes, the schema does):
    it neither falls back to ``mylib::op``'s mapping nor writes into its first argument."""
    t2n.mapping("t2n_test::scaled_tanh")(lambda g, x, scale: x)
    assert registry.lookup("t2n_test::scaled_tanh_") is None
    assert not registry.is_inplace("t2n_test::scaled_tanh_") and registry.is_inplace("add_")


def test_a_new_aten_mapping_needs_no_override():
    """An aten op t2n has no mapping for is the user's to add (here a made-up name)."""
    t2n.mapping("aten::t2n_test_only")(lambda g, x: x)
    assert registry.lookup("t2n_test_only") is not None


# ---------------------------------------------------------------------------- loading
def test_cli_export_with_extension(tmp_path, monkeypatch):
    monkeypatch.chdir(HERE)
    out = tmp_path / "m.nnef.tgz"
    args = ["export", "extension_ops:make_model", "-o", str(out), "--check"]
    refused = CliRunner().invoke(cli, args)
    assert refused.exit_code == 2, refused.output
    assert "t2n_test::scaled_tanh" in refused.output and "extension_ops.py:43" in \
        refused.output
    ok = CliRunner().invoke(cli, args + ["--extension", MAPPINGS])
    assert ok.exit_code == 0, ok.output
    assert "check in tract: PASSED" in ok.output and out.exists()
    missing = CliRunner().invoke(cli, args + ["--extension", "no_such_t2n_extension"])
    assert missing.exit_code == 2
    assert "extension no_such_t2n_extension failed to import: ModuleNotFoundError" in \
        missing.output
    llm = CliRunner().invoke(cli, ["llm", "some.model:build", "-o", str(tmp_path / "lm.tgz"),
                                   "--extension", "no_such_t2n_extension"])
    assert llm.exit_code == 2 and "extension no_such_t2n_extension" in llm.output, llm.output


def test_manifest_extensions(tmp_path):
    from t2n.check import manifest_run as checkrun, manifest

    (tmp_path / "models.toml").write_text(textwrap.dedent(f"""
        pythonpath = [{HERE!r}]
        extensions = ["{MAPPINGS}"]
        [[model]]
        name = "custom_ops"
        model = "extension_ops:make_model"
        """))
    entries = manifest.load_manifest(str(tmp_path / "models.toml"))
    assert entries[0].extensions == [MAPPINGS]
    results = checkrun.run_all(entries, keep_dir=str(tmp_path))
    assert results[0].status == "pass", results[0].message
    (tmp_path / "bad.toml").write_text('extensions = "x"\n[[model]]\nname = "a"\nmodel = "b:c"\n')
    with pytest.raises(UsageError, match="extensions must be a list of module names"):
        manifest.load_manifest(str(tmp_path / "bad.toml"))


def _install_entry_point(site, value: str) -> None:
    """A package installed in ``site`` that declares ``value`` in group t2n.mappings."""
    info = site / "t2n_test_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: t2n-test-plugin\n"
                                   "Version: 1.0\n")
    (info / "entry_points.txt").write_text(f"[t2n.mappings]\ncustom_ops = {value}\n")


def test_entry_point_mappings_load_on_the_first_export(tmp_path, monkeypatch):
    _install_entry_point(tmp_path / "site", MAPPINGS)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert registry.lookup("t2n_test::scaled_tanh") is None
    model, args = extension_ops.make_model()
    assert_exports(model, args)
    assert registry.lookup("t2n_test::scaled_tanh") is not None
    assert extensions._entry_points_loaded


def test_a_broken_entry_point_is_named(tmp_path, monkeypatch):
    _install_entry_point(tmp_path / "site", "no_such_t2n_plugin_module")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model, args = extension_ops.make_model()
    for _ in range(2):  # not loaded: named again at the next export
        with pytest.raises(UsageError, match=r"entry point custom_ops = no_such_t2n_plugin_"
                                             r"module \(group t2n.mappings, package "
                                             r"t2n-test-plugin\) failed to load"):
            t2n.export(model, args, tmp_path / "m.nnef")
    assert not (tmp_path / "m.nnef").exists()
