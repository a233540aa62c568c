"""``t2n check MANIFEST``: the CI gate over a list of models."""

import json
import os
import textwrap
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import cli_models
from t2n.cli import cli

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def run_cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def write_manifest(tmp_path, body: str):
    path = tmp_path / "models.toml"
    path.write_text(f'pythonpath = ["{HERE}"]\n' + textwrap.dedent(body))
    return path


@pytest.fixture
def assets(tmp_path):
    """A TorchScript file and an .npz of inputs beside the manifest."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(cli_models.make_mlp().eval(), torch.randn(2, 8))
        torch.jit.save(traced, str(tmp_path / "mlp.pt"))
    np.savez(tmp_path / "inputs.npz", x=np.random.default_rng(0).standard_normal((2, 8),
                                                                              np.float32))
    return tmp_path


def test_passing_manifest_writes_table_junit_and_json(assets):
    manifest = write_manifest(assets, """
        [[model]]
        name = "mlp-specs"
        model = "cli_models:make_mlp"
        inputs = ["x:4x8:f32"]
        dynamic = ["x:0=B"]

        [[model]]
        name = "mlp-torchscript-npz"
        model = "mlp.pt"
        inputs = "inputs.npz"
        rtol = 1e-3
        atol = 1e-4

        [[model]]
        name = "embed-int-range"
        model = "cli_models:make_embed"
        inputs = ["ids:3x4:i64"]
        int_range = [0, 10]
    """)
    junit, report = assets / "junit.xml", assets / "report.json"
    r = run_cli("check", manifest, "--jobs", "2", "--junit", junit, "--json", report)
    assert r.exit_code == 0, r.output
    table = r.stdout.splitlines()
    assert table[0].split()[:3] == ["MODEL", "RESULT", "OPS"]
    assert table[-1] == "3 passed, 0 failed, 0 errors"
    assert sum(" PASS " in ln for ln in table) == 3

    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "0", "0")
    names = [c.get("name") for c in suite.findall("testcase")]
    assert names == ["mlp-specs", "mlp-torchscript-npz", "embed-int-range"]
    assert all(c.find("failure") is None and c.find("error") is None
               for c in suite.findall("testcase"))

    data = json.loads(report.read_text())
    assert data["passed"] is True
    first = data["models"][0]
    assert first["export"]["inputs"][0]["shape"] == ["B", 8]
    assert first["export"]["checks"][0]["ok"] is True
    assert data["models"][1]["export"]["inputs"][0]["name"] == "x"  # the .npz key


def test_one_broken_entry_fails_the_run_and_the_others_still_run(tmp_path):
    manifest = write_manifest(tmp_path, """
        [[model]]
        name = "good"
        model = "cli_models:make_mlp"
        inputs = "cli_models:mlp_inputs"

        [[model]]
        name = "unsupported"
        model = "cli_models:make_two_unsupported"
        inputs = ["x:2x8:f32"]

        [[model]]
        name = "crashes"
        model = "cli_models:make_abort"
        inputs = ["x:2x8:f32"]

    """)
    junit = tmp_path / "junit.xml"
    r = run_cli("check", manifest, "--junit", junit)
    assert r.exit_code == 1, r.output
    rows = {ln.split()[0]: ln.split()[1] for ln in r.stdout.splitlines()[1:4]}
    assert rows["good"] == "PASS"
    assert rows["unsupported"] == "ERROR"
    assert rows["crashes"] == "ERROR"
    assert "_unique2" in r.stdout and "crashed (signal 6)" in r.stdout

    suite = ET.parse(junit).getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert cases["good"].find("failure") is None and cases["good"].find("error") is None
    assert "_unique2" in cases["unsupported"].find("error").text
    assert cases["crashes"].find("error") is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "0", "2")


def test_mismatch_is_a_failure_entry(tmp_path, monkeypatch):
    import t2n.check.manifest_run as cr

    manifest = write_manifest(tmp_path, """
        [[model]]
        name = "mlp"
        model = "cli_models:make_mlp"
        inputs = ["x:2x8:f32"]
    """)

    def fake_run_entry(entry, work, out_dir, trust_pickle=False):
        return cr.EntryResult(entry.name, "fail", 0.1, "tract's outputs differ from PyTorch's:"
                              "\n  output_0: MISMATCH max_abs_err=0.5 max_rel_err=1",
                              {"op_count": 3, "checks": [
                                  {"name": "output_0", "ok": False, "max_abs_err": 0.5,
                                   "max_rel_err": 1.0, "message": ""}]})

    monkeypatch.setattr(cr, "run_entry", fake_run_entry)
    junit = tmp_path / "j.xml"
    r = run_cli("check", manifest, "--junit", junit)
    assert r.exit_code == 1
    assert r.stdout.splitlines()[1].split()[:5] == ["mlp", "FAIL", "3", "5.00e-01", "1.00e+00"]
    assert r.stdout.splitlines()[-1] == "0 passed, 1 failed, 0 errors"
    case = ET.parse(junit).getroot().find("testsuite/testcase")
    assert case.find("failure").get("message") == "tract's outputs differ from PyTorch's:"


@pytest.mark.parametrize("body,needle", [
    ('[[model]]\nname = "a"\nmodel = "cli_models:make_mlp"\ninputs = ["x:2x8:f32"]\n'
     'rtoll = 1\n', "unknown key(s) rtoll"),
    ('[[model]]\nname = "a"\ninputs = ["x:2x8:f32"]\n', "'model'"),
    ('[[model]]\nname = "a"\nmodel = "m:f"\ninputs = ["x:2x8"]\n', "NAME:DIMS:DTYPE"),
    ('[[model]]\nname = "a"\nmodel = "m:f"\n[[model]]\nname = "a"\nmodel = "m:f"\n',
     "unique"),
    ('name = "a"\n', "unknown top-level"),
    ('[[model]\n', "invalid TOML"),
    ('[[model]]\nname = "a"\nmodel = "m:f"\ninputs = ["x:2x8:i64"]\n'
     'int_range = ["y=0:2"]\n', "'y', which is not an input"),
    ('[[model]]\nname = "a"\nmodel = "m:f"\ninputs = ["x:2x8:f32"]\ncapture = "jit"\n',
     "capture='jit': choose 'export'"),
], ids=["typo", "no-model", "bad-spec", "duplicate", "top-level", "toml-syntax",
        "int-range-unknown-input", "capture"])
def test_bad_manifest_is_a_usage_error(tmp_path, body, needle):
    path = tmp_path / "m.toml"
    path.write_text(body)
    r = run_cli("check", path)
    assert r.exit_code == 2, r.output
    assert needle in r.stderr and "Traceback" not in r.output
    assert r.stdout == ""


def test_missing_manifest(tmp_path):
    r = run_cli("check", tmp_path / "nope.toml")
    assert r.exit_code == 2 and "manifest not found" in r.stderr


def test_npz_with_objects_is_refused(tmp_path):
    np.savez(tmp_path / "evil.npz", x=np.array([{"a": 1}], dtype=object))
    from t2n.errors import UsageError
    from t2n.specs import load_npz

    with pytest.raises(UsageError, match="object arrays are refused"):
        load_npz(str(tmp_path / "evil.npz"))


@pytest.mark.slow
def test_example_manifest_over_the_fixtures(tmp_path):
    manifest = os.path.join(REPO, "examples", "manifest.toml")
    junit = tmp_path / "junit.xml"
    r = run_cli("check", manifest, "--jobs", "2", "--junit", junit)
    assert r.exit_code == 0, r.output
    suite = ET.parse(junit).getroot().find("testsuite")
    assert int(suite.get("tests")) >= 3
    assert suite.get("failures") == "0" and suite.get("errors") == "0"


def test_keep_holds_a_failing_archive_under_its_own_name(tmp_path):
    # tract's tanh differs from PyTorch's in the last place: at zero tolerance the check
    # fails for real (in the child), and --keep keeps that archive apart from passing ones
    (tmp_path / "tanh_model.py").write_text(textwrap.dedent("""
        import torch

        def build():
            return torch.nn.Tanh(), (torch.linspace(-4, 4, 4001).reshape(1, -1),)
    """))
    manifest = write_manifest(tmp_path, """
        [[model]]
        name = "tanh"
        model = "tanh_model:build"
        rtol = 0.0
        atol = 0.0
    """)
    manifest.write_text(manifest.read_text().replace(f'["{HERE}"]', f'["{HERE}", "{tmp_path}"]'))
    keep = tmp_path / "kept"
    keep.mkdir()
    r = run_cli("check", manifest, "--keep", keep)
    assert r.exit_code == 1, r.output
    assert r.stdout.splitlines()[-1] == "0 passed, 1 failed, 0 errors", r.output
    assert "MISMATCH" in r.stdout and "archive kept in" in r.stdout, r.output
    assert sorted(p.name for p in keep.iterdir()) == ["tanh.failed.nnef.tar"], r.output


@pytest.mark.parametrize("what", ["keep", "junit", "json"])
def test_paths_the_run_would_write_over_user_files_are_refused(tmp_path, what):
    # nothing runs and nothing changes: --keep's archives and the reports replace only
    # what t2n wrote there before (t2n.write.output_paths)
    manifest = write_manifest(tmp_path, """
        [[model]]
        name = "mlp"
        model = "cli_models:make_mlp"
        inputs = ["x:2x8:f32"]
    """)
    keep = tmp_path / "kept"
    keep.mkdir()
    victim = {"keep": keep / "mlp.nnef.tar", "junit": tmp_path / "junit.xml",
              "json": tmp_path / "report.json"}[what]
    victim.write_text("the user's own file\n")
    args = {"keep": ["--keep", keep], "junit": ["--junit", victim],
            "json": ["--json", victim]}[what]
    r = run_cli("check", manifest, *args)
    assert r.exit_code == 2, r.output
    assert f"refusing to replace {victim}" in r.stderr and "t2n check: mlp" not in r.stderr
    assert victim.read_text() == "the user's own file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["models.toml", "kept"] + ([victim.name] if what != "keep" else []))


def test_reports_of_a_previous_run_are_replaced(tmp_path):
    manifest = write_manifest(tmp_path, """
        [[model]]
        name = "mlp"
        model = "cli_models:make_mlp"
        inputs = ["x:2x8:f32"]
    """)
    keep = tmp_path / "kept"
    keep.mkdir()
    args = ["--junit", tmp_path / "junit.xml", "--json", tmp_path / "report.json",
            "--keep", keep]
    for _ in range(2):
        r = run_cli("check", manifest, *args)
        assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junit.xml", "kept", "models.toml",
                                                          "report.json"]
    assert sorted(p.name for p in keep.iterdir()) == ["mlp.nnef.tar"]


def test_per_input_int_range_and_dict_builder(tmp_path):
    # a 0/1 mask beside token ids: each input its own range; a builder's dict example
    # names the inputs (for dynamic axes too)
    manifest = write_manifest(tmp_path, """
        [[model]]
        name = "masked-specs"
        model = "cli_models:make_masked_embed"
        inputs = ["input_ids:2x6:i64", "attention_mask:2x6:i64"]
        int_range = ["input_ids=0:50", "attention_mask=0:2"]

        [[model]]
        name = "masked-dict"
        model = "cli_models:make_masked_embed_with_dict"
        dynamic = ["input_ids:1=S", "attention_mask:1=S"]
    """)
    report = tmp_path / "report.json"
    r = run_cli("check", manifest, "--json", report)
    assert r.exit_code == 0, r.output
    models = json.loads(report.read_text())["models"]
    assert [i["shape"] for i in models[1]["export"]["inputs"]] == [[2, "S"], [2, "S"]]
