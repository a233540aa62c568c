"""Models pruned with torch.nn.utils.prune export and match PyTorch, with and without
``compact``; the archive stores one tensor per pruned weight, under its state_dict name,
and the user's model keeps its pruning state."""

import math
import os
import tempfile

import pytest
import torch
import torch.nn as nn
import torch.nn.utils.prune as prune

import t2n
from t2n.testing import assert_exports


# every test through both front ends (torch.jit.trace, torch.export): see conftest.capture
pytestmark = pytest.mark.usefixtures("capture")

class ConvNet(nn.Module):
    """conv -> per-channel affine -> relu -> conv -> relu -> linear: every compaction step."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.scale = nn.Parameter(torch.rand(8, 1, 1) + 0.5)
        self.shift = nn.Parameter(torch.randn(8, 1, 1))
        self.conv2 = nn.Conv2d(8, 6, 3)
        self.fc = nn.Linear(6 * 4 * 4, 5)

    def forward(self, x):
        y = torch.relu(self.conv1(x) * self.scale + self.shift)
        y = torch.relu(self.conv2(y))
        return self.fc(y.flatten(1))


def mlp():
    return nn.Sequential(nn.Linear(10, 12), nn.ReLU(), nn.Linear(12, 9), nn.Tanh(),
                         nn.Linear(9, 4))


X_CONV = (torch.randn(2, 3, 6, 6),)
X_MLP = (torch.randn(3, 10),)


def _ln(n, dim):
    def apply(m):
        for mod in m.modules():
            if isinstance(mod, (nn.Conv2d, nn.Linear)):
                prune.ln_structured(mod, "weight", amount=0.5, n=n, dim=dim)
    return apply


def _random_structured(dim):
    def apply(m):
        for mod in m.modules():
            if isinstance(mod, (nn.Conv2d, nn.Linear)):
                prune.random_structured(mod, "weight", amount=0.4, dim=dim)
    return apply


def _unstructured(m):
    for mod in m.modules():
        if isinstance(mod, (nn.Conv2d, nn.Linear)):
            prune.l1_unstructured(mod, "weight", amount=0.6)
            prune.random_unstructured(mod, "bias", amount=0.3)


def _global(m):
    params = [(mod, "weight") for mod in m.modules() if isinstance(mod, (nn.Conv2d, nn.Linear))]
    prune.global_unstructured(params, pruning_method=prune.L1Unstructured, amount=0.5)


def _container(m):
    """Several rounds on one weight: the masks combine in a PruningContainer."""
    for mod in m.modules():
        if isinstance(mod, (nn.Conv2d, nn.Linear)):
            prune.ln_structured(mod, "weight", amount=0.25, n=1, dim=0)
            prune.l1_unstructured(mod, "weight", amount=0.3)
            prune.ln_structured(mod, "weight", amount=1, n=math.inf, dim=0)


def _custom(m):
    for mod in m.modules():
        if isinstance(mod, (nn.Conv2d, nn.Linear)):
            mask = torch.ones_like(mod.weight)
            mask[1::3] = 0
            mask.view(-1)[::5] = 0
            prune.custom_from_mask(mod, "weight", mask)


def _removed(apply):
    def both(m):
        apply(m)
        for mod in m.modules():
            for name in ("weight", "bias"):
                if prune.is_pruned(mod) and hasattr(mod, name + "_orig"):
                    prune.remove(mod, name)
    return both


METHODS = {
    "ln_n2_dim0": _ln(2, 0),
    "ln_n1_dim0": _ln(1, 0),
    "ln_inf_dim0": _ln(math.inf, 0),
    "ln_neginf_dim0": _ln(-math.inf, 0),
    "ln_n3_dim0": _ln(3, 0),
    "ln_fro_dim0": _ln("fro", 0),  # 2-D weights only: torch.norm('fro') takes <= 2 dims
    "ln_n2_dim1": _ln(2, 1),
    "ln_n1_dim-1": _ln(1, -1),
    "random_structured_dim0": _random_structured(0),
    "random_structured_dim1": _random_structured(1),
    "l1_unstructured_and_bias": _unstructured,
    "global_unstructured": _global,
    "container_three_rounds": _container,
    "custom_mask": _custom,
    "ln_n2_dim0_removed": _removed(_ln(2, 0)),
    "container_removed": _removed(_container),
}


@pytest.mark.parametrize("compact", [False, True], ids=["plain", "compact"])
@pytest.mark.parametrize("method", [m for m in METHODS if m != "ln_fro_dim0"])
def test_pruned_convnet_matches_torch(method, compact):
    torch.manual_seed(1)
    model = ConvNet().eval()
    METHODS[method](model)
    zero = int((model.conv1.weight.reshape(8, -1) == 0).all(dim=1).sum())
    result = assert_exports(model, X_CONV, compact=compact)
    if method.endswith("_removed") and not compact:
        assert "layers" not in result.extras  # no pruning attached, no compaction asked
        return
    layers = {s.name: s for s in result.extras["layers"]}
    # conv2 has no padding: every zero channel of conv1 goes, its constant folded
    assert layers["conv1"].channels_removed == (min(zero, 7) if compact else 0)
    assert layers["conv1"].sparsity == pytest.approx(float((model.conv1.weight == 0).sum()) / 216)


@pytest.mark.parametrize("compact", [False, True], ids=["plain", "compact"])
@pytest.mark.parametrize("method", ["ln_n2_dim0", "ln_fro_dim0", "ln_n1_dim-1", "random_structured_dim0",
                                    "global_unstructured", "container_three_rounds",
                                    "ln_n2_dim0_removed"])
def test_pruned_mlp_matches_torch(method, compact):
    torch.manual_seed(2)
    model = mlp().eval()
    METHODS[method](model)
    assert_exports(model, X_MLP, compact=compact)


def _archive(model, args, **kw):
    d = tempfile.mkdtemp(prefix="t2n-prune-")
    path = os.path.join(d, "m.nnef")
    result = t2n.export(model, args, path, **kw)
    files = sorted(os.listdir(path))
    with open(os.path.join(path, "graph.nnef")) as f:
        text = f.read()
    return result, files, text


def test_archive_stores_the_product_under_the_state_dict_name():
    torch.manual_seed(3)
    model = ConvNet().eval()
    _container(model)
    prune.random_unstructured(model.fc, "bias", amount=0.5)
    # optimize=False: the model's own scale/shift would otherwise fold into conv1
    _, files, text = _archive(model, X_CONV, optimize=False)
    assert files == sorted(["graph.nnef", "conv1.weight.dat", "conv1.bias.dat", "scale.dat",
                            "shift.dat", "conv2.weight.dat", "conv2.bias.dat", "fc.weight.dat",
                            "fc.bias.dat"])
    assert "_orig" not in text and "_mask" not in text
    # the only multiplications left are the model's own (x * scale): none for the masks
    assert text.count(" mul(") == 1


def test_export_keeps_the_pruning_state_of_the_model():
    torch.manual_seed(4)
    model = ConvNet().eval()
    _container(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    hooks = {n: list(m._forward_pre_hooks.values()) for n, m in model.named_modules()}
    expected = model(*X_CONV)
    t2n.export(model, X_CONV, os.path.join(tempfile.mkdtemp(), "m.nnef"), compact=True)
    after = model.state_dict()
    assert sorted(after) == sorted(before)
    assert "conv1.weight_orig" in after and "conv1.weight_mask" in after
    for k in before:
        assert torch.equal(before[k], after[k]), k
    for n, m in model.named_modules():
        assert list(m._forward_pre_hooks.values()) == hooks[n]
    assert prune.is_pruned(model)
    assert isinstance(model.conv1._forward_pre_hooks[next(iter(
        model.conv1._forward_pre_hooks))], prune.PruningContainer)
    torch.testing.assert_close(model(*X_CONV), expected)


def test_report_tells_sparsity_per_layer_for_a_pruned_model():
    torch.manual_seed(5)
    model = mlp().eval()
    prune.l1_unstructured(model[0], "weight", amount=0.25)
    result, _, _ = _archive(model, X_MLP)
    layers = {s.name: s for s in result.extras["layers"]}
    assert set(layers) == {"0", "2", "4"}
    assert layers["0"].sparsity == pytest.approx(0.25, abs=1 / 120)
    assert layers["2"].sparsity == 0
    assert layers["0"].channels_removed == 0
    assert layers["0"].params_before == layers["0"].params_after == 10 * 12 + 12
    assert "0 (linear): 25.0% zero" in result.report()


def test_unpruned_model_without_compact_has_no_layer_report():
    result, _, _ = _archive(mlp().eval(), X_MLP)
    assert "layers" not in result.extras
