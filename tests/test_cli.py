"""The ``t2n`` command as a user runs it: console script, ``python -m t2n``, help, JSON."""

import json
import os
import subprocess
import sys
import tarfile

import pytest
from click.testing import CliRunner

from t2n.cli import cli

HERE = os.path.dirname(os.path.abspath(__file__))


def run_cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def run_process(*argv):
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_console_script_exports_and_checks(tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "t2n")
    assert os.path.exists(exe), "the t2n console script is not installed"
    out = tmp_path / "mlp.nnef.tgz"
    p = run_process(exe, "export", "cli_models:make_mlp", "-o", str(out),
                    "--input", "x:3x8:f32", "--check")
    assert p.returncode == 0, p.stderr
    assert "check in tract: PASSED" in p.stdout
    assert "output_0: ok" in p.stdout
    with tarfile.open(out) as t:
        names = t.getnames()
    assert names[0] == "graph.nnef" and "fc1.weight.dat" in names


def test_python_dash_m_reports_errors_without_traceback(tmp_path):
    p = run_process(sys.executable, "-m", "t2n", "export", str(tmp_path / "missing.pt"),
                    "-o", str(tmp_path / "m.tgz"), "--input", "x:1:f32")
    assert p.returncode == 2
    assert p.stderr.strip() == f"t2n: error: model file not found: {tmp_path / 'missing.pt'}"
    assert p.stdout == ""


def _pyproject_version() -> str:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    with open(os.path.join(os.path.dirname(HERE), "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["version"]


def test_version_is_the_pyproject_version():
    """`t2n --version` (in process and as `python -m t2n`) and `t2n.__version__` say the
    version pyproject.toml declares, the one the CHANGELOG's newest release names."""
    import t2n

    version = _pyproject_version()
    assert t2n.__version__ == version
    r = run_cli("--version")
    assert r.exit_code == 0 and r.stdout == f"t2n, version {version}\n"
    p = run_process(sys.executable, "-m", "t2n", "--version")
    assert p.returncode == 0 and p.stdout == f"t2n, version {version}\n", p.stderr
    changelog = open(os.path.join(os.path.dirname(HERE), "CHANGELOG.md"), encoding="utf-8").read()
    released = [line for line in changelog.splitlines()
                if line.startswith("## [") and not line.startswith("## [Unreleased]")]
    assert released and released[0].startswith(f"## [{version}]"), released[:1]


def test_help_texts_explain_usage():
    r = run_cli()
    assert r.exit_code == 0 and r.stdout.startswith("Usage: t2n") and r.stderr == ""
    r = run_cli("--help")
    assert r.exit_code == 0
    for word in ("export", "check", "ops", "Exit codes"):
        assert word in r.output
    r = run_cli("export", "--help")
    assert r.exit_code == 0
    for word in ("NAME:DIMS:DTYPE", "--check", "--dynamic", "--int-range", "--trust-pickle",
                 "package.module:callable", "Examples"):
        assert word in r.output, word
    r = run_cli("check", "--help")
    assert r.exit_code == 0 and "[[model]]" in r.output and "--junit" in r.output


def test_ops_lists_supported_operators():
    r = run_cli("ops")
    assert r.exit_code == 0
    lines = r.output.strip().splitlines()
    assert any(ln.split()[0] == "add" for ln in lines[:-1])
    r = run_cli("ops", "--json")
    rows = json.loads(r.output)
    names = {row["name"] for row in rows}
    import t2n

    assert names == set(t2n.supported_ops())
    assert all(row["family"] for row in rows)


def test_json_result_and_output_names(tmp_path):
    r = run_cli("export", "cli_models:make_mlp", "-o", tmp_path / "m.nnef", "--input", "x:3x8:f32",
            "--output-name", "logits", "--check", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["inputs"] == [{"name": "x", "shape": [3, 8], "dtype": "f32"}]
    assert d["outputs"] == [{"name": "logits", "shape": [3, 4], "dtype": "f32"}]
    assert d["passed"] is True and d["checks"][0]["name"] == "logits"
    assert d["op_count"] == sum(d["op_histogram"].values()) > 0
    assert os.path.isfile(tmp_path / "m.nnef" / "graph.nnef")


def test_callable_returning_example_args_needs_no_input(tmp_path):
    r = run_cli("export", "cli_models:make_mlp_with_args", "-o", tmp_path / "m.tgz", "--check")
    assert r.exit_code == 0, r.output
    assert "input  input_0: 3x8 f32" in r.stdout
    r = run_cli("export", "cli_models:make_mlp", "-o", tmp_path / "m.tgz")
    assert r.exit_code == 2 and "--input" in r.stderr


def test_integer_inputs_drawn_from_int_range(tmp_path):
    r = run_cli("export", "cli_models:make_embed", "-o", tmp_path / "e.tgz",
            "--input", "ids:2x5:i64", "--int-range", "0:10", "--check", "-q")
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    # indices past the table: the model itself fails on the example inputs
    r = run_cli("export", "cli_models:make_embed", "-o", tmp_path / "e.tgz",
            "--input", "ids:2x5:i64", "--int-range", "10:20")
    assert r.exit_code == 2 and "IndexError" in r.stderr


def test_dynamic_axis_from_the_command_line(tmp_path):
    r = run_cli("export", "cli_models:make_mlp", "-o", tmp_path / "m.tgz", "--input", "x:3x8:f32",
            "--dynamic", "x:0=B", "--check", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["inputs"][0]["shape"] == ["B", 8]


def test_failed_check_exits_1_with_figures(tmp_path, monkeypatch):
    import t2n.check.tract_runner as tr

    real = tr.run_sets_in_tract
    monkeypatch.setattr(tr, "run_sets_in_tract",
                        lambda *a, **k: [[o + 0.5 for o in outs] for outs in real(*a, **k)])
    r = run_cli("export", "cli_models:make_mlp", "-o", tmp_path / "m.tgz", "--input", "x:3x8:f32",
            "--check")
    assert r.exit_code == 1
    assert "check in tract: FAILED" in r.stdout
    assert "output_0: MISMATCH max_abs_err=0.5" in r.stdout


def test_failed_check_leaves_the_output_path_as_it_was(tmp_path, monkeypatch):
    # a build step that ships whatever sits at OUT must not find a wrong archive there
    import t2n.check.tract_runner as tr

    fresh, kept = tmp_path / "new.nnef.tar", tmp_path / "kept.tgz"
    ok = run_cli("export", "cli_models:make_mlp", "-o", kept, "--input", "x:3x8:f32")
    assert ok.exit_code == 0, ok.output
    before = kept.read_bytes()
    real = tr.run_sets_in_tract
    monkeypatch.setattr(tr, "run_sets_in_tract",
                        lambda *a, **k: [[o + 0.5 for o in outs] for outs in real(*a, **k)])
    for out in (fresh, kept):
        r = run_cli("export", "cli_models:make_mlp", "-o", out, "--input", "x:3x8:f32",
                    "--check")
        assert r.exit_code == 1 and f"{out} was not written" in r.stderr, r.output
    assert not fresh.exists() and kept.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.tgz"]  # no staging left
    # --keep-failed moves the rejected archive where the user asked, still loadable
    aside = tmp_path / "debug" / "rejected.nnef.tar"
    r = run_cli("export", "cli_models:make_mlp", "-o", fresh, "--input", "x:3x8:f32",
                "--check", "--keep-failed", aside)
    assert r.exit_code == 1 and f"the archive is kept at {aside}" in r.stderr, r.output
    assert not fresh.exists() and tarfile.is_tarfile(aside)


def test_tract_refusal_is_a_failed_check(tmp_path, monkeypatch):
    import t2n.check.tract_runner as tr

    def refuse(*a, **k):
        raise tr.TractRunError("tract crashed (exit code -6): panicked at ...", crashed=True)

    monkeypatch.setattr(tr, "run_sets_in_tract", refuse)
    r = run_cli("export", "cli_models:make_mlp", "-o", tmp_path / "m.tgz", "--input", "x:3x8:f32",
            "--check")
    assert r.exit_code == 1
    assert r.stderr.startswith("t2n: check failed: tract could not run")


def test_internal_errors_are_one_line_unless_debug(tmp_path, monkeypatch):
    import t2n.api

    def broken(*a, **k):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(t2n.api, "export", broken)
    args = ["export", "cli_models:make_mlp", "-o", tmp_path / "m.tgz", "--input", "x:3x8:f32"]
    r = run_cli(*args)
    assert r.exit_code == 3
    assert r.stderr.splitlines()[0] == "t2n: internal error: ZeroDivisionError: a bug"
    assert "--debug" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("--debug", *args)
    assert r.exit_code == 3 and "Traceback" in r.stderr


@pytest.mark.parametrize("spec,shape,dtype", [
    ("x:1x3x224x224:f32", [1, 3, 224, 224], "f32"),
    ("ids:2x16:i64", [2, 16], "i64"),
    ("s:scalar:f16", [], "f16"),
    ("m:4:bool", [4], "bool"),
])
def test_input_specs_make_matching_tensors(spec, shape, dtype):
    from t2n import dtypes
    from t2n.specs import make_inputs, parse_input_spec

    s = parse_input_spec(spec)
    (t,) = make_inputs([s], seed=3, int_range=(5, 7))
    assert list(t.shape) == shape and dtypes.tract_name(t.dtype) == dtype
    if dtype == "i64":
        assert int(t.min()) >= 5 and int(t.max()) < 7
    (again,) = make_inputs([s], seed=3, int_range=(5, 7))
    assert t.equal(again)  # --seed makes the example inputs reproducible


# ---------------------------------------------------------------------------- output paths
def _listing(root):
    return sorted((os.path.relpath(os.path.join(d, n), root),
                   open(os.path.join(d, n), "rb").read() if n in fs else None)
                  for d, ds, fs in os.walk(root) for n in ds + fs)


@pytest.mark.parametrize("case", ["project", "file", "zip", "symlink"])
def test_export_refuses_what_is_not_an_archive(tmp_path, case):
    # issue #29: `-o proj` over a user's folder deleted notes.txt and train.py
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "notes.txt").write_text("my notes\n")
    (proj / "train.py").write_text("print('train')\n")
    out, words = {"project": (proj, ["notes.txt, train.py"]),
                  "file": (proj / "notes.txt", ["notes.txt/", "slash"]),
                  "zip": (tmp_path / "m.zip", [f"{tmp_path / 'm.zip'}/", "slash"]),
                  "symlink": (tmp_path / "link.nnef", ["symbolic link"])}[case]
    if case == "symlink":
        os.symlink(proj, out)
    before = _listing(tmp_path)
    r = run_cli("export", "cli_models:make_mlp", "-o", out, "--input", "x:3x8:f32")
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(f"t2n: error: ") and str(out) in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)
    assert _listing(tmp_path) == before


def test_export_with_a_trailing_slash_writes_a_folder(tmp_path):
    r = run_cli("export", "cli_models:make_mlp", "-o", f"{tmp_path / 'm.zip'}/",
                "--input", "x:3x8:f32", "--check")
    assert r.exit_code == 0, r.output
    assert "graph.nnef" in os.listdir(tmp_path / "m.zip")


def test_keep_failed_refuses_a_user_file(tmp_path):
    (tmp_path / "debug.tar").write_text("mine")
    r = run_cli("export", "cli_models:make_mlp", "-o", tmp_path / "m.tar", "--input",
                "x:3x8:f32", "--check", "--keep-failed", tmp_path / "debug.tar")
    assert r.exit_code == 2 and str(tmp_path / "debug.tar") in r.stderr, r.output
    assert sorted(os.listdir(tmp_path)) == ["debug.tar"]
    assert (tmp_path / "debug.tar").read_text() == "mine"


# ---------------------------------------------------------------------------- papercuts
def test_unknown_dtype_lists_each_once_and_suggests_one(tmp_path):
    r = run_cli("export", "cli_models:make_mlp", "-o", tmp_path / "m.tar", "--input", "x:1:f33")
    assert r.exit_code == 2
    line = r.stderr.strip()
    assert "unknown dtype 'f33'; did you mean 'f32'?" in line, line
    known = line.split("(known: ")[1].rstrip(")").split(", ")
    assert len(known) == len(set(known)) and {"f32", "i64", "bool", "u8"} <= set(known)


def test_builder_returning_a_dict_of_named_inputs(tmp_path):
    # the dict's keys are the input names (in the archive, and for --dynamic), as in the API
    r = run_cli("export", "cli_models:make_masked_embed_with_dict", "-o", tmp_path / "m.tar",
                "--dynamic", "input_ids:1=S", "--dynamic", "attention_mask:1=S", "--check",
                "--json")
    assert r.exit_code == 0, r.output
    inputs = json.loads(r.stdout)["inputs"]
    assert [(i["name"], i["shape"]) for i in inputs] == [("attention_mask", [2, "S"]),
                                                         ("input_ids", [2, "S"])]


def test_builder_dict_must_name_tensors(tmp_path, monkeypatch):
    import cli_models

    monkeypatch.setattr(cli_models, "bad_dict", lambda: (cli_models.make_mlp(), {"x": 3}),
                        raising=False)
    r = run_cli("export", "cli_models:bad_dict", "-o", tmp_path / "m.tar")
    assert r.exit_code == 2 and "dict must map input names" in r.stderr, r.output


def test_int_range_per_input(tmp_path):
    from t2n.specs import make_inputs, parse_input_spec, parse_int_ranges

    specs = [parse_input_spec("input_ids:4x64:i64"), parse_input_spec("attention_mask:4x64:i64")]
    whole, per = parse_int_ranges(["input_ids=0:50", "attention_mask=0:2"],
                                  [s.name for s in specs])
    ids, mask = make_inputs(specs, int_range=whole, per_input=per)
    assert int(ids.max()) > 1 and int(ids.max()) < 50 and set(mask.unique().tolist()) == {0, 1}
    # the global form still sets every other integer input
    whole, per = parse_int_ranges(["5:7", "attention_mask=0:2"], [s.name for s in specs])
    ids, mask = make_inputs(specs, int_range=whole, per_input=per)
    assert set(ids.unique().tolist()) == {5, 6} and set(mask.unique().tolist()) == {0, 1}
    r = run_cli("export", "cli_models:make_masked_embed", "-o", tmp_path / "m.tar",
                "--input", "input_ids:2x6:i64", "--input", "attention_mask:2x6:i64",
                "--int-range", "input_ids=0:50", "--int-range", "attention_mask=0:2",
                "--check", "-q")
    assert r.exit_code == 0, r.output
