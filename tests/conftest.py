"""Shared test set-up: deterministic seeds; tract always runs in a child process
(``t2n.testing.assert_exports``), so a tract abort fails one test only.

The registry's torchvision wheel is linked against CUDA torch: on the CPU torch of these
machines its C++ extension does not load and ``import torchvision`` (hence ``import timm``,
and ``transformers`` once torchvision is installed) fails with ``operator torchvision::nms
does not exist``. The model classes are pure Python, so declaring the two operator schemas
before the first import makes them importable. This stays in the test set-up: the t2n
package never touches another library's operator namespace."""

import os
import tracemalloc
import zlib

import pytest
import torch


def _declare_torchvision_schemas():
    """The development venv's start-up hook (tools/torchvision_schemas.py), run now: the
    schemas are declared only when torchvision's own extension does not load (a matching
    torch/torchvision pair, e.g. torch 2.14.1 with torchvision 0.29.1, declares them itself:
    declaring them first would make its extension abort on the second definition)."""
    import importlib.machinery
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), os.pardir, "tools", "torchvision_schemas.py")
    spec = importlib.util.spec_from_file_location("t2n_tests_torchvision_schemas", path)
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    found = importlib.machinery.PathFinder.find_spec("torchvision")
    hook.declare_if_missing(found.submodule_search_locations if found else None)
    _declare_torchvision_schemas.hook = hook  # its registrations stay alive with it


_declare_torchvision_schemas()


@pytest.fixture(autouse=True)
def _dat_files_read_back(monkeypatch):
    """Every archive folder a test writes has its .dat files read back with the Khronos
    reference reader (``nnef.read_tensor``) and compared with the tensor they came from, so
    t2n's hand-written writer is held to the reference reader on every weight of the suite.

    Weights stored in a format the reference reader does not know (tract's block-quantized
    vendor codes) are left to the tract checks; a weight stored in another standard dtype
    than its source (f16 storage of an f32 weight) is compared with the source in that dtype.
    """
    import nnef
    import numpy as np
    import t2n.write.writer as writer

    original = writer.write

    def write_and_read_back(g, path, *args, **kwargs):
        size = original(g, path, *args, **kwargs)
        # (not while a test measures the writer's own allocations)
        if writer.output_kind(path) == "dir" and not tracemalloc.is_tracing():
            used = g.used_tensors(g.live_ops())
            labels = g.final_labels(used)
            aliases = writer.same_bytes_aliases(g, used)
            for v in g.variables:
                if id(v.tensor) not in used or id(v.tensor) in aliases:
                    continue
                dat = os.path.join(path, labels[id(v.tensor)] + ".dat")
                with open(dat, "rb") as f:
                    head = f.read(128)
                    if head[50:52] != b"\0\0":
                        continue  # a vendor (tract) item type
                    f.seek(0)
                    got = nnef.read_tensor(f)
                src = v.data.detach()
                if src.dtype == torch.bfloat16:  # written in the export's compute dtype
                    src = src.to(v.tensor.dtype)
                want = src.numpy() if src.dtype != torch.bool else src.numpy().astype(bool)
                if got.dtype != want.dtype:
                    want = want.astype(got.dtype)
                assert got.shape == want.shape and np.array_equal(got, want, equal_nan=True), (
                    f"{dat}: nnef.read_tensor gives {got.dtype}{list(got.shape)} that differs "
                    f"from the source weight {src.dtype}{list(src.shape)}")
        return size

    monkeypatch.setattr(writer, "write", write_and_read_back)
    yield


# The capture fixture's export half runs in full for the modules that pin what export must
# get right on its own (symbolic shapes, functionalised writes, whole models); in the
# op-family modules below, whose export path is the same walker over the same mappings,
# every third test (a fixed choice by test id) runs through export. T2N_ALL_CAPTURES=1
# runs them all (docs/capture.md's suite x capture table was measured so).
EXPORT_SAMPLED_MODULES = {"test_attention", "test_embedding_bag", "test_pruning"}


# The slowest test files (seconds of test time on 2 cores, 2026-12-03), handed to the
# workers first: with --dist loadfile a long file collected last (the zoo folder sorts after
# every test_*.py) ran alone at the end of the run, ~50 s of one idle core. Stable: tests
# keep their order within a file, and the files not listed keep theirs after these.
HEAVY_FILES_FIRST = [
    "zoo/test_vision_zoo.py",  # 148 s
    "test_opinfo_conformance.py",  # 128 s
    "test_linalg_spectral.py",  # 120 s
    "zoo/test_zoo_transformers.py",  # 88 s
    "test_complex.py",  # 83 s
    "test_opinfo_dtypes.py",  # 80 s
    "test_check_manifest.py",  # 61 s
    "test_transformers.py",  # 57 s
]


def _heavy_first(items) -> None:
    rank = {name: i for i, name in enumerate(HEAVY_FILES_FIRST)}

    def key(item):
        path = item.nodeid.split("::", 1)[0].removeprefix("tests/")
        return rank.get(path, len(rank))
    items.sort(key=key)


def pytest_collection_modifyitems(config, items):
    _heavy_first(items)
    if os.environ.get("T2N_ALL_CAPTURES"):
        return
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        module = getattr(item.module, "__name__", "")
        if params.get("capture") == "export" and module in EXPORT_SAMPLED_MODULES \
                and zlib.crc32(item.nodeid.encode()) % 3:
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(params=["trace", "export"])
def capture(request, monkeypatch):
    """Run a test through both front ends: ``assert_exports``, ``t2n.export`` and
    ``export_graph`` (as ``t2n.api``'s or the package's names) default to this capture.
    Modules opt in with ``pytestmark = pytest.mark.usefixtures("capture")``; a test may also
    take ``capture``."""
    _default_capture(monkeypatch, request.param)
    return request.param


def _default_capture(monkeypatch, chosen: str) -> None:
    """``t2n.export`` and ``export_graph`` (``t2n.api``'s and the package's names: the
    package keeps the function it first handed out) default to ``chosen``."""
    import t2n
    import t2n.api as api

    def defaulting(fn):
        def call(*args, **kwargs):
            kwargs.setdefault("capture", chosen)
            return fn(*args, **kwargs)
        return call

    for name in ("export", "export_graph"):
        wrapped = defaulting(getattr(api, name))
        # the package's name first: reading it may resolve it lazily from t2n.api, which
        # must still hold the real function then, or the undo would restore the wrapper
        monkeypatch.setattr(t2n, name, wrapped, raising=False)
        monkeypatch.setattr(api, name, wrapped)


@pytest.fixture(autouse=True)
def _suite_capture(monkeypatch):
    """``T2N_TEST_CAPTURE=trace`` (or ``export``, ``auto``) runs a suite through that
    capture: every ``t2n.export`` / ``export_graph`` call that does not choose a capture
    itself gets it. A test that names its capture, and the ``capture`` fixture's two runs,
    keep theirs."""
    chosen = os.environ.get("T2N_TEST_CAPTURE")
    if chosen:
        _default_capture(monkeypatch, chosen)


@pytest.fixture(scope="session", autouse=True)
def _one_tract_child_per_test_process():
    """Every check of the suite (``export(check=True)``, all its input sets), and the load
    every export without a check proves, runs tract in one long-lived child per test
    process instead of a new interpreter per run (about 0.3 s of CPU each, most of
    the suite's time otherwise); a crash or a hang still fails only the run that caused it,
    and the next run starts a fresh child. ``t2n.check.tract_runner``'s own tests call
    ``run_in_child`` directly and keep exercising the per-run child."""
    from t2n.check import tract_runner

    worker = tract_runner.TractWorker(timeout=600)
    original = tract_runner.run_in_tract, tract_runner.run_sets_in_tract

    def run_in_tract(archive, inputs, timeout=600):
        return worker.run(archive, inputs)

    def run_sets_in_tract(archive, sets, timeout=600):
        return worker.run_sets(archive, sets)

    def load_in_tract(archive, timeout=600):  # the load every export proves (t2n.check.load)
        worker.load(archive)

    def prestart(timeout=600):  # the worker is up already: no shared child to start
        worker.start()

    original_load, original_prestart = tract_runner.load_in_tract, tract_runner.prestart
    tract_runner.run_in_tract = run_in_tract
    tract_runner.run_sets_in_tract = run_sets_in_tract
    tract_runner.load_in_tract = load_in_tract
    tract_runner.prestart = prestart
    yield worker
    tract_runner.run_in_tract, tract_runner.run_sets_in_tract = original
    tract_runner.load_in_tract, tract_runner.prestart = original_load, original_prestart
    worker.close()


@pytest.fixture(scope="session")
def tract_worker(_one_tract_child_per_test_process):
    """The test process's tract child, for tests that run archives themselves (the OpInfo
    sweeps)."""
    return _one_tract_child_per_test_process


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
