"""PyTorch's OpInfo samples, exported and run in tract: never silently wrong.

Every in-scope OpInfo entry (float32, not random) runs up to ``T2N_OPINFO_SAMPLES`` samples
(default 4). A sample may pass or be refused with a clear error; a numeric mismatch, a tract
crash or an unexpected error fails the op's test, even for ops t2n does not aim to support.
The last test guards the coverage already reached (it fails when a change loses ops).
"""

from __future__ import annotations

import os

import pytest

import opinfo_harness as H

MAX_SAMPLES = int(os.environ.get("T2N_OPINFO_SAMPLES", "4"))
# Coverage reached so far (ops with at least one / all samples passing): raise, never lower.
MIN_OPS_ONE_SAMPLE = 571
MIN_OPS_ALL_SAMPLES = 555

OPS = H.in_scope_ops()
RESULTS: dict[str, H.OpOutcome] = {}


@pytest.mark.parametrize("op", OPS, ids=[H.op_key(o) for o in OPS])
def test_opinfo_sample(op, tract_worker):
    H.assert_sound(H.run_op(op, tract_worker, MAX_SAMPLES), RESULTS)


def test_opinfo_coverage_floor():
    if len(RESULTS) < len(OPS) or MAX_SAMPLES < 4:
        pytest.skip("coverage is judged on a full run with 4 samples per op")
    outcomes = list(RESULTS.values())
    scoped = [o for o in outcomes if o.in_scope]
    one = sum(o.passes_one for o in scoped)
    all_ = sum(o.passes_all for o in scoped)
    print("\n" + H.summary_table(outcomes))
    assert one >= MIN_OPS_ONE_SAMPLE, f"only {one} ops pass a sample (floor {MIN_OPS_ONE_SAMPLE})"
    assert all_ >= MIN_OPS_ALL_SAMPLES, f"only {all_} ops pass all samples (floor " \
                                        f"{MIN_OPS_ALL_SAMPLES})"
