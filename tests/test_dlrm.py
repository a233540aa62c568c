"""The DLRM-style recommender (fixtures/dlrm.py) end to end: one archive with a dynamic
batch and dynamic ragged id counts, run in tract at several batch sizes."""

from __future__ import annotations

import pytest
import torch

from fixtures import dlrm
from t2n.testing import assert_exports


# every test through both front ends (torch.jit.trace, torch.export): see conftest.capture
pytestmark = pytest.mark.usefixtures("capture")

def test_dlrm_dynamic_batch():
    model = dlrm.make_dlrm()
    empty = list(dlrm.example_inputs(3, seed=3))
    # cat_c: every bag empty (no ids at all); cat_d: padding ids only, last bag empty
    empty[3], empty[4], empty[5] = (torch.zeros(0, dtype=torch.int64),
                                    torch.zeros(3, dtype=torch.int64), torch.zeros(0))
    empty[6], empty[7] = torch.full((4,), dlrm.PAD_D), torch.tensor([0, 1, 4])
    result = assert_exports(model, dlrm.example_inputs(8), input_names=dlrm.INPUT_NAMES,
                            output_names=dlrm.OUTPUT_NAMES, dynamic_axes=dlrm.DYNAMIC_AXES,
                            more_args=[dlrm.example_inputs(1, seed=1),
                                       dlrm.example_inputs(37, seed=2), tuple(empty)])
    assert [str(i) for i in result.inputs][:2] == ["dense: Bx13 f32", "cat_a: Bx3 i64"]
    assert result.op_count < 120  # no per-bag or per-sample unrolling
