"""PyTorch's OpInfo samples in float16, int64, bool and bfloat16, exported and run in tract.

The float32 conformance test (test_opinfo_conformance.py) covers 4 samples per op; here each
op runs its first sample in each dtype (a deterministic choice that keeps CI short; the
full sweep is ``python tools/opinfo_sweep.py --dtype int64``). Float outputs of float16
samples compare within a few f16 ulps (rtol 1e-2, atol 1e-3); integer and bool outputs
compare exactly. bfloat16 samples run inside a float32 model (their values are its inputs,
cast to bf16 first: tract has no bf16 inputs) and compare within 1.6e-2 relative, a bf16
ulp or two (reductions accumulate in another order; element-wise ops match to the bit, see
tests/test_bfloat16_values.py). A mismatch, a tract failure or an unexpected error fails the op's test;
refusing with a clear error is allowed. The floors guard the coverage reached per dtype
(ops whose sample passes): raise them, never lower them.
"""

from __future__ import annotations

import pytest

import opinfo_harness as H

DTYPES = ("float16", "int64", "bool", "bfloat16")
MIN_OPS_PASSING = {"float16": 472, "int64": 405, "bool": 291, "bfloat16": 428}
CASES = [(d, op) for d in DTYPES for op in H.in_scope_ops(H.DTYPES[d][0])]
RESULTS: dict[str, dict[str, H.OpOutcome]] = {d: {} for d in DTYPES}


@pytest.mark.parametrize("dtype,op", CASES, ids=[f"{d}-{H.op_key(o)}" for d, o in CASES])
def test_opinfo_dtype_sample(dtype, op, tract_worker):
    H.assert_sound(H.run_op(op, tract_worker, 1, dtype), RESULTS[dtype], f"{dtype} ")


@pytest.mark.parametrize("dtype", DTYPES)
def test_opinfo_dtype_coverage_floor(dtype):
    ran = RESULTS[dtype]
    expected = sum(d == dtype for d, _ in CASES)
    if len(ran) < expected:
        pytest.skip("coverage is judged on a full run of the dtype's samples")
    passing = sum(o.passes_one for o in ran.values())
    print(f"\n{dtype}:\n" + H.summary_table(list(ran.values())))
    assert passing >= MIN_OPS_PASSING[dtype], \
        f"only {passing} {dtype} ops pass their sample (floor {MIN_OPS_PASSING[dtype]})"
