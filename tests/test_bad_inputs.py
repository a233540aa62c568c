"""The bad-input matrix: every way a user can hand t2n something wrong.

Each row: a clear one-line message on stderr (no traceback), exit code 2 (1 for a failed
check), and nothing left in the output directory.
"""

import errno
import os

import pytest
import torch
from click.testing import CliRunner

import cli_models
from t2n.cli import cli


def t2n(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def assert_one_line_error(r, code, *needles):
    assert r.exit_code == code, (r.exit_code, r.output)
    err = r.stderr.strip().splitlines()
    assert "Traceback" not in r.output
    assert len(err) == 1, err
    assert err[0].startswith("t2n: "), err
    for n in needles:
        assert n in err[0], (n, err[0])


def leftovers(d):
    return sorted(os.listdir(d))


@pytest.fixture
def out(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    return d


@pytest.fixture
def scripted(tmp_path):
    path = tmp_path / "mlp.pt"
    torch.jit.save(torch.jit.script(cli_models.make_mlp()), str(path))
    return path


def test_missing_model_file(out):
    r = t2n("export", out / "nope.pt", "-o", out / "m.tgz", "--input", "x:2x8:f32")
    assert_one_line_error(r, 2, "model file not found", "nope.pt")
    assert leftovers(out) == []


def test_truncated_torchscript_archive(scripted, out):
    data = scripted.read_bytes()
    bad = out.parent / "truncated.pt"
    bad.write_bytes(data[: len(data) // 2])
    r = t2n("export", bad, "-o", out / "m.tgz", "--input", "x:2x8:f32")
    assert_one_line_error(r, 2, "truncated.pt", "not a TorchScript archive")
    assert leftovers(out) == []


def test_corrupt_member_in_torchscript_archive(scripted, out):
    data = bytearray(scripted.read_bytes())
    mid = len(data) // 3
    data[mid:mid + 64] = b"\xff" * 64  # damage a member, keep the zip directory intact
    bad = out.parent / "corrupt.pt"
    bad.write_bytes(bytes(data))
    r = t2n("export", bad, "-o", out / "m.tgz", "--input", "x:2x8:f32")
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.stderr.startswith("t2n: error:")
    assert leftovers(out) == []


def test_text_file_is_not_a_model(tmp_path, out):
    f = tmp_path / "notes.txt"
    f.write_text("hello\n")
    r = t2n("export", f, "-o", out / "m.tgz", "--input", "x:2x8:f32")
    assert_one_line_error(r, 2, "not a TorchScript archive")
    assert leftovers(out) == []


def test_pickled_module_refused_without_trust_pickle(tmp_path, out):
    f = tmp_path / "pickled.pt"
    torch.save(cli_models.make_mlp(), str(f))
    r = t2n("export", f, "-o", out / "m.tgz", "--input", "x:2x8:f32")
    assert_one_line_error(r, 2, "pickled", "--trust-pickle")
    assert leftovers(out) == []
    r = t2n("export", f, "-o", out / "m.tgz", "--input", "x:2x8:f32", "--trust-pickle",
            "--check", "-q")
    assert r.exit_code == 0, r.output
    assert leftovers(out) == ["m.tgz"]


def test_pickled_state_dict_is_not_a_model(tmp_path, out):
    f = tmp_path / "weights.pt"
    torch.save(cli_models.make_mlp().state_dict(), str(f))
    r = t2n("export", f, "-o", out / "m.tgz", "--input", "x:2x8:f32", "--trust-pickle")
    assert_one_line_error(r, 2, "not an nn.Module")


@pytest.mark.parametrize("ref,needle", [
    ("no_such_module_xyz:make", "cannot import"),
    ("cli_models:no_such_fn", "no attribute"),
    ("cli_models:not_a_module", "returned a int"),
], ids=["missing-module", "missing-callable", "callable-returns-non-module"])
def test_bad_callable_reference(ref, needle, out):
    r = t2n("export", ref, "-o", out / "m.tgz", "--input", "x:2x8:f32")
    assert_one_line_error(r, 2, needle)


def test_model_raising_in_forward(out):
    r = t2n("export", "cli_models:make_raises", "-o", out / "m.tgz", "--input", "x:2x8:f32")
    assert_one_line_error(r, 2, "ValueError: boom in forward")
    assert leftovers(out) == []


@pytest.mark.parametrize("inputs,needle", [
    (["x:2x8:f32", "y:2x8:f32"], "forward()"),
    (["x:2x5:f32"], "shape"),
    (["x:2x8:i64"], "dtype"),
], ids=["wrong-number", "wrong-shape", "wrong-dtype"])
def test_wrong_inputs(inputs, needle, out):
    args = [a for spec in inputs for a in ("--input", spec)]
    r = t2n("export", "cli_models:make_mlp", "-o", out / "m.tgz", *args)
    assert_one_line_error(r, 2, "on the example inputs")
    assert needle in r.stderr
    assert leftovers(out) == []


def test_wrong_inputs_to_torchscript_file(scripted, out):
    r = t2n("export", scripted, "-o", out / "m.tgz", "--input", "x:2x3:f32")
    assert_one_line_error(r, 2, "traced on the example inputs")
    assert leftovers(out) == []


@pytest.mark.parametrize("maker", ["make_float_output", "make_string_in_dict"])
def test_non_tensor_output(maker, out):
    r = t2n("export", f"cli_models:{maker}", "-o", out / "m.tgz", "--input", "x:2x8:f32")
    assert_one_line_error(r, 2, "tensors")
    assert "tensor([" not in r.stderr  # no dump of tensor values in the message
    assert leftovers(out) == []


def test_data_dependent_control_flow_is_warned_by_the_trace(out):
    r = t2n("export", "cli_models:make_data_dependent", "-o", out / "m.tgz",
            "--input", "x:2x8:f32", "--check", "-q", "--capture", "trace")
    assert r.exit_code == 0, r.output
    warn = [ln for ln in r.stderr.splitlines() if ln.startswith("t2n: warning:")]
    assert len(warn) == 1 and "data-dependent control flow" in warn[0], r.stderr
    assert "Traceback" not in r.output


def test_data_dependent_control_flow_is_refused_by_torch_export(out):
    """torch.export refuses the branch on a value, naming the line, and the error names
    the captures that take the model along the example's path."""
    r = t2n("export", "cli_models:make_data_dependent", "-o", out / "m.tgz",
            "--input", "x:2x8:f32", "--capture", "export")
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert "depends on tensor values" in lines[0] and "cli_models.py:" in lines[0], lines
    assert len(lines) == 2 and "capture='trace'" in lines[1] and "capture='auto'" in lines[1]
    assert "Traceback" not in r.output and leftovers(out) == []


def test_nan_and_inf_outputs_are_compared_and_reported(out):
    r = t2n("export", "cli_models:make_nan_inf", "-o", out / "m.tgz", "--input", "x:2x8:f32",
            "--check")
    assert r.exit_code == 0, r.output
    assert "NaN in both torch and tract" in r.stdout
    assert "Inf in both torch and tract" in r.stdout


def test_nan_where_torch_has_a_number_fails_the_check(out, monkeypatch):
    import numpy as np

    import t2n.check.tract_runner as tr

    real = tr.run_sets_in_tract

    def nan_first(*a, **k):
        sets = real(*a, **k)
        for got in sets:
            got[0] = got[0].copy()
            got[0].flat[0] = np.nan
        return sets

    monkeypatch.setattr(tr, "run_sets_in_tract", nan_first)
    r = t2n("export", "cli_models:make_mlp", "-o", out / "m.tgz", "--input", "x:2x8:f32",
            "--check")
    assert r.exit_code == 1, r.output
    assert "MISMATCH" in r.stdout and "NaN in 1 place(s)" in r.stdout
    assert r.stderr.strip().splitlines()[-1].startswith("t2n: check failed")


@pytest.mark.parametrize("where", ["missing-dir", "under-a-file", "proc", "read-only-fs"])
def test_unwritable_output_path(where, tmp_path):
    f = tmp_path / "a_file"
    f.write_text("x")
    target = {"missing-dir": tmp_path / "no" / "such" / "m.tgz",
              "under-a-file": f / "m.tgz",
              "proc": "/proc/t2n-test.tgz",
              "read-only-fs": "/sys/t2n-test.tgz"}[where]
    r = t2n("export", "cli_models:make_mlp", "-o", target, "--input", "x:2x8:f32")
    assert_one_line_error(r, 2, "cannot write")
    assert not os.path.exists(target)


def _fail_after_first_member(exc):
    import t2n.write.writer as w

    real = w._members

    def members(*a, **k):
        gen = real(*a, **k)
        yield next(gen)
        raise exc

    return members


@pytest.mark.parametrize("name", ["m.nnef.tgz", "m.nnef.tar", "m.nnef"])
def test_disk_full_leaves_nothing(name, out, monkeypatch):
    import t2n.write.writer as w

    monkeypatch.setattr(w, "_members", _fail_after_first_member(
        OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))))
    r = t2n("export", "cli_models:make_mlp", "-o", out / name, "--input", "x:2x8:f32")
    assert_one_line_error(r, 2, "cannot write", "No space left on device")
    assert leftovers(out) == []


@pytest.mark.parametrize("name", ["m.nnef.tgz", "m.nnef"])
def test_ctrl_c_during_export_leaves_nothing(name, out, monkeypatch):
    import t2n.write.writer as w

    (out / "keep.txt").write_text("unrelated")
    monkeypatch.setattr(w, "_members", _fail_after_first_member(KeyboardInterrupt()))
    r = t2n("export", "cli_models:make_mlp", "-o", out / name, "--input", "x:2x8:f32")
    assert r.exit_code == 130, r.output
    assert "interrupted" in r.stderr and "Traceback" not in r.output
    assert leftovers(out) == ["keep.txt"]


def test_ctrl_c_keeps_an_existing_archive(out, monkeypatch):
    import t2n.write.writer as w

    target = out / "m.tgz"
    assert t2n("export", "cli_models:make_mlp", "-o", target, "--input", "x:2x8:f32",
               "-q").exit_code == 0
    before = target.read_bytes()
    monkeypatch.setattr(w, "_members", _fail_after_first_member(KeyboardInterrupt()))
    r = t2n("export", "cli_models:make_mlp", "-o", target, "--input", "x:2x8:f32")
    assert r.exit_code == 130
    assert target.read_bytes() == before
    assert leftovers(out) == ["m.tgz"]


def test_two_unsupported_ops_one_error_with_source_lines(out):
    r = t2n("export", "cli_models:make_two_unsupported", "-o", out / "m.tgz",
            "--input", "x:2x8:f32")
    assert r.exit_code == 2, r.output
    err = r.stderr
    assert "Traceback" not in r.output
    assert err.count("t2n: error:") == 1
    assert "2 operator(s)" in err
    assert "_unique2" in err and "sigmoid" in err and "complex" in err
    assert err.count("cli_models.py:") >= 2, err
    assert leftovers(out) == []


@pytest.mark.parametrize("spec,needle", [
    ("x:1x8", "NAME:DIMS:DTYPE"),
    ("x:1xa:f32", "dims"),
    ("x:1x8:f99", "unknown dtype"),
    ("1x:1x8:f32", "identifier"),
    ("x:1x-3:f32", ">= 0"),
], ids=["no-dtype", "bad-dims", "bad-dtype", "bad-name", "negative"])
def test_bad_input_spec(spec, needle, out):
    r = t2n("export", "cli_models:make_mlp", "-o", out / "m.tgz", "--input", spec)
    assert_one_line_error(r, 2, needle)
    assert leftovers(out) == []


@pytest.mark.parametrize("args,needle", [
    (["--dynamic", "x:zero=B"], "NAME:AXIS=SYMBOL"),
    (["--dynamic", "y:0=B"], "not an input"),
    (["--int-range", "5:1"], "LO < HI"),
    (["--int-range", "y=0:2"], "'y', which is not an input"),
    (["--int-range", "x=0:2", "--int-range", "x=0:3"], "given twice"),
    (["--int-range", "0:2", "--int-range", "0:3"], "one LO:HI for all inputs"),
    (["--input", "x:2x8:f32"], "unique"),
    (["--rtol", "-1"], ">= 0"),
], ids=["dynamic-syntax", "dynamic-unknown-input", "int-range", "int-range-unknown-input",
        "int-range-twice", "int-range-two-globals", "duplicate-input", "rtol"])
def test_bad_options(args, needle, out):
    r = t2n("export", "cli_models:make_mlp", "-o", out / "m.tgz", "--input", "x:2x8:f32", *args)
    assert_one_line_error(r, 2, needle)
    assert leftovers(out) == []


def test_click_usage_errors_are_one_line(out):
    r = t2n("export", "cli_models:make_mlp", "--input", "x:2x8:f32")
    assert_one_line_error(r, 2, "Missing option", "--help")
    r = t2n("export", "cli_models:make_mlp", "-o", out / "m.tgz", "--seed", "many")
    assert_one_line_error(r, 2, "--seed")
    r = t2n("frobnicate")
    assert_one_line_error(r, 2, "No such command")
