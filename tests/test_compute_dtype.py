"""bfloat16 models export with an explicit compute dtype (``dtype="f32"`` / ``"f16"``,
t2n/walk/compute_dtype.py): tract matches PyTorch run in that dtype, weights are converted while
written, the user's model stays bf16, and a bf16 model without the choice is refused."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import t2n
from t2n.errors import UsageError


def _bf16_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32),
                               torch.nn.GELU(), torch.nn.Linear(32, 4)).to(torch.bfloat16).eval()


@pytest.mark.parametrize("dtype,tol", [("f32", (1e-4, 1e-5)), ("f16", (1e-2, 1e-3))])
def test_bf16_model_exports_in_the_chosen_dtype(tmp_path, dtype, tol):
    import nnef

    model = _bf16_model()
    x = torch.randn(3, 16).to(torch.bfloat16)
    path = str(tmp_path / "m.nnef")
    r = t2n.export(model, (x,), path, dtype=dtype, check=True, rtol=tol[0], atol=tol[1])
    assert r.passed and r.inputs[0].dtype == dtype and r.outputs[0].dtype == dtype
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())  # model untouched
    with open(os.path.join(path, "0.weight.dat"), "rb") as f:
        w = nnef.read_tensor(f)
    want = model[0].weight.detach().to(torch.float32 if dtype == "f32" else torch.float16)
    np.testing.assert_array_equal(w, want.numpy())


def test_bf16_model_without_a_dtype_is_refused(tmp_path):
    with pytest.raises(UsageError, match="dtype='f32'.*dtype='f16'"):
        t2n.export(_bf16_model(), (torch.randn(3, 16).to(torch.bfloat16),),
                   str(tmp_path / "m.nnef"))
    assert not os.listdir(tmp_path)


def test_dtype_for_a_model_without_bf16_is_refused(tmp_path):
    with pytest.raises(UsageError, match="no bfloat16"):
        t2n.export(torch.nn.Linear(4, 2), (torch.randn(1, 4),), str(tmp_path / "m.nnef"),
                   dtype="f16")
