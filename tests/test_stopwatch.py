"""Seconds per export phase (t2n.stopwatch): what ExportResult.phase_seconds holds."""

import time

import torch

import t2n
from t2n import passes
from t2n.stopwatch import Stopwatch, phase, timing


def test_a_nested_phase_is_counted_once():
    watch = Stopwatch()
    with timing(watch):
        with phase("capture"):
            time.sleep(0.02)
            with phase("types"):
                time.sleep(0.05)
        with phase("capture"):  # a second call adds to the first
            time.sleep(0.01)
    assert list(watch.seconds) == ["types", "capture"]
    assert 0.05 <= watch.seconds["types"] < 0.2
    assert 0.03 <= watch.seconds["capture"] < 0.05 + 0.1, "capture must exclude types"


def test_phase_outside_an_export_does_nothing():
    with phase("walk"):
        pass  # no stopwatch active: no error, nothing recorded


def test_export_reports_every_phase(tmp_path):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                torch.nn.ReLU()).eval()
    start = time.perf_counter()
    r = t2n.export(model, (torch.randn(1, 3, 8, 8),), str(tmp_path / "m.nnef.tar"),
                   check=True, quiet=True)
    wall = time.perf_counter() - start
    names = set(r.phase_seconds)
    assert {"capture", "walk", "lower", "write", "check"} <= names, names
    assert {p.name for p in passes.pipeline()} <= names, "each pass is timed by its name"
    assert all(v >= 0 for v in r.phase_seconds.values())
    assert sum(r.phase_seconds.values()) <= wall
    # the second export has its own figures
    r2 = t2n.export(model, (torch.randn(1, 3, 8, 8),), str(tmp_path / "m2.nnef.tar"),
                    quiet=True)
    assert "check" not in r2.phase_seconds


def test_json_report_has_the_phases(tmp_path):
    from t2n.jsonreport import result_dict

    r = t2n.export(torch.nn.ReLU(), (torch.randn(2, 3),), str(tmp_path / "m.nnef.tar"),
                   quiet=True)
    d = result_dict(r)
    assert set(d["phase_seconds"]) == set(r.phase_seconds) and "write" in d["phase_seconds"]
