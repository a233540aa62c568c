"""Shared pieces of the benchmarks: the fixed models, child processes, memory readings.

Every measurement runs in a fresh child process (``python -m bench.<script> --child JOB``) so
that its peak memory (``VmHWM`` from /proc/self/status: the high-water mark of resident memory)
belongs to that one measurement, and so that one run's caches do not flatter the next. The
child prints one JSON line last; the parent repeats, takes medians and prints a table.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------------------ models
def _mlp(n_layers: int, width: int, dtype=None):
    import torch

    layers = []
    for _ in range(n_layers):
        lin = torch.nn.Linear(width, width, device="meta")
        # build on meta then materialise with a cheap init: the benchmark times export, not init
        lin.weight = torch.nn.Parameter(torch.empty(width, width).normal_(0, width ** -0.5))
        lin.bias = torch.nn.Parameter(torch.empty(width).normal_(0, 0.02))
        layers += [lin, torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).eval()
    if dtype is not None:
        model = model.to(dtype)
    x = torch.randn(1, width, dtype=dtype or torch.float32)
    return model, (x,)


def mlp100m():
    """6 x Linear(4096, 4096) with GELU: 100.7 M parameters, 403 MB of f32."""
    return _mlp(6, 4096)


def mlp1b():
    """8 x Linear(11008, 11008) with GELU: 969 M parameters, 3.9 GB of f32."""
    return _mlp(8, 11008)


def _fixtures_module(name: str):
    sys.path.insert(0, ROOT)
    try:
        return __import__(f"tests.fixtures.{name}", fromlist=["_"])
    except ImportError as e:
        raise Skip(f"fixtures/{name}.py is not importable ({e})") from None


def resnet18():
    """The ResNet-18-shaped fixture (tests/fixtures/models.py make_resnet18), 1x3x224x224."""
    fm = _fixtures_module("models")
    if not hasattr(fm, "make_resnet18"):
        raise Skip("tests/fixtures/models.py has no make_resnet18() yet")
    return fm.make_resnet18(), fm.example_inputs("resnet18")


def dlrm():
    """The DLRM fixture (tests/fixtures/dlrm.py make_dlrm), batch of 64."""
    fd = _fixtures_module("dlrm")
    if not hasattr(fd, "make_dlrm"):
        raise Skip("tests/fixtures/dlrm.py has no make_dlrm() yet")
    return fd.make_dlrm(), fd.example_inputs(64)


def declare_torchvision_schemas() -> None:
    """transformers imports torchvision when it is installed, and torchvision's C++ schemas
    do not load on this CPU torch: declaring the two it registers makes the import work
    (as tests/conftest.py does)."""
    import torch

    try:
        torch._C._get_schema("torchvision::nms", "")
        return
    except RuntimeError:
        pass
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    declare_torchvision_schemas.library = lib  # keep the registration alive


def gpt2():
    """transformers GPT-2 small config (124 M parameters), random weights, 16 tokens."""
    import torch

    declare_torchvision_schemas()
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as e:
        raise Skip(f"transformers is not installed ({e})") from None
    torch.manual_seed(0)
    config = GPT2Config(use_cache=False)
    config._attn_implementation = "eager"
    inner = GPT2LMHeadModel(config).eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, ids):
            return self.inner(input_ids=ids, return_dict=False)[0]

    return Logits().eval(), (torch.randint(0, config.vocab_size, (1, 16)),)


MODELS = {"mlp100m": mlp100m, "resnet18": resnet18, "gpt2": gpt2, "dlrm": dlrm, "mlp1b": mlp1b}


class Skip(Exception):
    """A model the benchmark cannot build here (missing fixture or package)."""


def build(name: str):
    import torch

    torch.manual_seed(0)
    return MODELS[name]()


def model_bytes(model) -> int:
    """Bytes of the model's own tensors (each storage once)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        key = t.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


# ------------------------------------------------------------------------------ memory
def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def peak_rss() -> int:
    """High-water mark of this process's resident memory, bytes."""
    return _status("VmHWM")


def rss() -> int:
    return _status("VmRSS")


# ------------------------------------------------------------------------------ children
def run_child(module: str, job: dict, timeout: float = 3600) -> dict:
    """Run ``python -m module --child JOB`` and return the JSON dict it printed last."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", module, "--child", json.dumps(job)], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout, env=env)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        lines_err = p.stderr.strip().splitlines() or ["(no output)"]
        errors = [ln for ln in lines_err if "Error" in ln or "panicked" in ln]
        return {"error": f"exit {p.returncode}: {(errors or lines_err)[-1][:300]}"}
    return json.loads(lines[-1])


def run_file_child(module: str, spec: dict) -> dict:
    """Run ``python -m module --child SPEC.json`` (a spec too large for the command line)
    and return the JSON dict it printed last; a failure exits with its stderr."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        p = subprocess.run([sys.executable, "-m", module, "--child", f.name],
                           capture_output=True, text=True, cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=ROOT))
    finally:
        os.unlink(f.name)
    if p.returncode != 0:
        raise SystemExit(f"tract child failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def serve_file_child(spec_path: str, work) -> None:
    """The child side of :func:`run_file_child`: ``work(spec)``'s JSON on stdout."""
    with open(spec_path) as f:
        print(json.dumps(work(json.load(f))))


def child_main(handlers: dict) -> bool:
    """In a child: run the job named on the command line, print its JSON result."""
    if len(sys.argv) < 3 or sys.argv[1] != "--child":
        return False
    job = json.loads(sys.argv[2])
    try:
        out = handlers[job["kind"]](job)
    except Skip as e:
        out = {"skip": str(e)}
    print(json.dumps(out), flush=True)
    return True


def medians(runs: list[dict]) -> dict:
    """Per-key median over the runs that succeeded (first error/skip wins if none did)."""
    ok = [r for r in runs if "error" not in r and "skip" not in r]
    if not ok:
        return runs[0]
    out = dict(ok[0])
    for k, v in ok[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = statistics.median(r[k] for r in ok)
    out["runs"] = len(ok)
    return out


def load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover
        return float("nan")


def mb(n) -> str:
    return "-" if n is None else f"{n / 1e6:,.0f}"


def secs(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def timer():
    return time.perf_counter()
