"""Child process of ``t2n inspect``: tract's own cost model of an archive.

``python -m t2n.check.tract_cost ARCHIVE '{"B": 1}'`` (run by :func:`profile_in_child`) loads the
archive in tract, binds the symbols, profiles one run on zero inputs and prints JSON: the
sum of the FMA costs tract attributes to its nodes (multiply-accumulates), the output
facts (with their symbols, as the archive declares them: ``Bx1000``), and how many nodes
of each op the optimised model runs (``ops``: ``OptMatMulPack`` nodes beside the
``OptMatMul`` ones are packings done at every run). A separate process, because tract
aborts its process on a Rust panic.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np

_NUMPY = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i8": np.int8,
          "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u16": np.uint16,
          "u32": np.uint32, "u64": np.uint64, "bool": np.bool_}


def _fact(text: str) -> tuple[list, str]:
    *dims, dtype = str(text).split(",")
    return [int(d) if d.lstrip("-").isdigit() else d for d in dims], dtype.lower()


def main(argv: list[str]) -> int:
    import tract

    from t2n.check.tract_runner import declares_transformers

    archive, symbols = argv[0], json.loads(argv[1])
    nnef = tract.nnef()
    if declares_transformers(archive):  # a stateful cache (t2n llm --kv-cache inplace)
        nnef = nnef.with_tract_transformers()
    model = nnef.load(archive)
    # the output facts as the archive declares them: symbols (Bx1000), before binding them
    outputs = []
    for i in range(model.output_count()):
        shape, dtype = _fact(model.output_fact(i))
        outputs.append({"shape": shape, "dtype": dtype})
    if symbols:
        model.transform(tract.SetSymbols(symbols))
    runnable = model.into_runnable()
    inputs = []
    for i in range(runnable.input_count()):
        shape, dtype = _fact(runnable.input_fact(i))
        inputs.append(np.zeros(shape, dtype=_NUMPY.get(dtype, np.float32)))
    profile = json.loads(runnable.profile_json(inputs))
    macs, ops = 0, {}
    for node in profile.get("nodes", []):
        name = node.get("op_name", "?")
        ops[name] = ops.get(name, 0) + 1
        for kind, value in (node.get("cost") or {}).items():
            if kind.startswith("FMA("):
                macs += int(float(value))
    print(json.dumps({"macs": macs, "outputs": outputs, "ops": dict(sorted(ops.items()))}))
    return 0


def profile_in_child(archive: str, symbols: dict,
                     timeout: float = 600) -> tuple[dict | None, str]:
    """This module's JSON for ``archive`` (symbols bound to ``symbols``), computed in a
    child process; ``(None, tract's last message)`` when tract could not load or run it."""
    from t2n.check.child import run_child

    with tempfile.TemporaryDirectory(prefix="t2n-cost-") as d:
        run = run_child("t2n.check.tract_cost", [os.path.abspath(str(archive)),
                                                 json.dumps(symbols)], workdir=d, timeout=timeout)
    if run.returncode is None:
        return None, f"tract {run.crash_text()}"
    if not run.ok:
        return None, (run.stderr.strip().splitlines() or ["(no message)"])[-1]
    return json.loads(run.stdout), ""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
