"""Fixture models export and match torch in tract; exports are byte-reproducible."""

import hashlib
import os

import pytest
import torch

import t2n
from fixtures import FIXTURES, example_inputs, make_mlp, make_mobilenet_block, make_resnet18
from t2n.testing import assert_exports

RTOL, ATOL = 1e-4, 1e-5


# every test through both front ends (torch.jit.trace, torch.export): see conftest.capture
pytestmark = pytest.mark.usefixtures("capture")

@pytest.mark.slow
def test_resnet18_shaped_at_224_matches_torch():
    model = make_resnet18()
    result = assert_exports(model, example_inputs("resnet18"), rtol=RTOL, atol=ATOL)
    hist = result.op_histogram
    assert hist["conv"] == 20 and hist["max_pool"] == 1 and hist["linear"] == 1
    assert result.outputs[0].shape == [1, 1000]


def test_mlp_matches_torch_on_two_batch_sizes():
    model = make_mlp()
    assert_exports(model, example_inputs("mlp"), rtol=RTOL, atol=ATOL,
                   more_args=[example_inputs("mlp", batch=7, seed=1)],
                   dynamic_axes={"input_0": {0: "B"}})


def test_mobilenet_block_matches_torch():
    assert_exports(make_mobilenet_block(), example_inputs("mobilenet_block"), rtol=RTOL,
                   atol=ATOL)


def test_fixtures_are_deterministic_eval_modules_and_leave_global_rng_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b = make_mlp(), make_mlp()
    assert torch.equal(torch.random.get_rng_state(), before)
    assert not a.training and not b.training
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)
    assert torch.equal(example_inputs("mlp")[0], example_inputs("mlp")[0])
    assert set(FIXTURES) == {"resnet18", "mlp", "mobilenet_block"}
    with pytest.raises(KeyError, match="unknown fixture"):
        example_inputs("vgg")


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_same_model_exported_twice_gives_byte_identical_tgz(tmp_path):
    model = make_mobilenet_block()
    args = example_inputs("mobilenet_block")
    first, second = tmp_path / "a.nnef.tgz", tmp_path / "sub" / "b.nnef.tgz"
    os.makedirs(second.parent)
    t2n.export(model, args, str(first))
    t2n.export(make_mobilenet_block(), args, str(second))
    assert _digest(first) == _digest(second)
    assert os.path.getsize(first) > 10_000  # the weights are in there
