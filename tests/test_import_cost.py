"""``import t2n`` stays cheap: heavy modules load only when the feature that needs them runs.

Checked through ``sys.modules`` in a fresh interpreter (timings are for bench/import_bench.py,
not for tests): ``import t2n`` loads no torch at all, and reaching the export entry point loads
torch but none of the heavy parts t2n does not use to export (dynamo, inductor, onnx, sympy,
transformers, tract, the CLI's click) nor the op mappings (registered on first lookup).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ["torch._dynamo", "torch._inductor", "torch.onnx", "transformers", "tract", "sympy",
         "scipy", "click", "hypothesis", "t2n.mappings", "t2n.check.tract_runner", "t2n.cli"]


def _loaded(code: str) -> set[str]:
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def test_import_t2n_loads_no_torch():
    mods = _loaded("import t2n")
    assert not {m for m in mods if m == "torch" or m.startswith("torch.")}
    assert not mods & set(HEAVY)


@pytest.mark.parametrize("code", ["import t2n.api",
                                  "import t2n; t2n.export; t2n.ConversionError"])
def test_export_entry_point_loads_nothing_heavy(code):
    mods = _loaded(code)
    heavy = sorted(m for m in mods if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == [], f"{code!r} imports {heavy}"



def test_static_traced_export_loads_nothing_heavy():
    """Exporting a model without dynamic axes through the trace needs neither sympy
    (symbolic sizes only) nor torch's compiler stacks nor tract in this process: the load
    check runs tract in a child (through t2n.check.tract_runner, which imports numpy only).
    The default capture, torch.export, imports torch._dynamo and sympy itself (about 2 CPU
    s, once per process: docs/capture.md)."""
    mods = _loaded("import torch, t2n, tempfile, os\n"
                   "m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())\n"
                   "d = tempfile.mkdtemp()\n"
                   "t2n.export(m, (torch.randn(2, 8),), os.path.join(d, 'm.tgz'), "
                   "capture='trace')")
    heavy = sorted(m for m in mods if any(m == h or m.startswith(h + ".") for h in HEAVY
                                          if h not in ("t2n.mappings", "t2n.check.tract_runner")))
    assert heavy == [], heavy
