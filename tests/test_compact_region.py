"""Channel compaction through concatenations and depthwise convolutions
(t2n/passes/compact_region.py): per case, the uncompacted and the compacted archive both
match PyTorch in tract, match each other on a fresh input, and the compacted one is smaller."""

import os

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.utils.prune as prune
from batch_norms import random_batch_norms

import t2n
from t2n.check import tract_runner


def _layers(result):
    return {s.name: s for s in result.extras["layers"]}


def _params_ratio(result):
    """Layer parameters after / before (the weights a real model's archive is made of; a
    tiny model's archive is mostly graph text, .dat headers and tar padding)."""
    layers = result.extras["layers"]
    return sum(s.params_after for s in layers) / sum(s.params_before for s in layers)


def _zero_rows(layer, rows):
    with torch.no_grad():
        layer.weight[rows] = 0


def _prune(model, depthwise=False):
    """ln_structured(0.5, n=2, dim=0) on every conv (but depthwise ones unless asked)."""
    for m in model.modules():
        if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d)) and (
                depthwise or m.groups == 1):
            prune.ln_structured(m, "weight", amount=0.5, n=2, dim=0)
    return model.eval()


def _differential(tmp_path, model, x):
    """Both archives checked against torch eager at export, then run in tract on another
    input: compacted == uncompacted == torch."""
    paths = [str(tmp_path / "full.nnef.tar"), str(tmp_path / "small.nnef.tar")]
    full = t2n.export(model, (x,), paths[0], check=True, quiet=True)
    small = t2n.export(model, (x,), paths[1], check=True, quiet=True, compact=True)
    x2 = torch.randn_like(x)
    with torch.no_grad():
        expected = model(x2).numpy()
    a, b = (tract_runner.run_in_tract(p, [x2.numpy()])[0] for p in paths)
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b, expected, rtol=1e-4, atol=1e-4)
    assert os.path.getsize(paths[1]) == small.archive_bytes
    return full, small


# ---------------------------------------------------------------------------- concatenations
class DenseNetish(nn.Module):
    """A DenseNet block: each layer (bn-relu-conv1x1-bn-relu-conv3x3) is concatenated to
    its input; a transition (bn-relu-conv1x1-avgpool) and a pooled linear head."""

    def __init__(self, c0=8, growth=4, n=3):
        super().__init__()
        self.stem = nn.Conv2d(3, c0, 3, padding=1)
        self.dense = nn.ModuleList(nn.Sequential(
            nn.BatchNorm2d(c0 + i * growth), nn.ReLU(),
            nn.Conv2d(c0 + i * growth, 2 * growth, 1, bias=False), nn.BatchNorm2d(2 * growth),
            nn.ReLU(), nn.Conv2d(2 * growth, growth, 3, padding=1, bias=False))
            for i in range(n))
        c = c0 + n * growth
        self.trans = nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, 8, 1),
                                   nn.AvgPool2d(2))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))

    def forward(self, x):
        x = self.stem(x)
        for layer in self.dense:
            x = torch.cat([x, layer(x)], 1)
        return self.head(self.trans(x))


def test_densenet_block_compacts_every_concatenated_input(tmp_path):
    torch.manual_seed(0)
    model = _prune(random_batch_norms(DenseNetish(), seed=11))
    full, small = _differential(tmp_path, model, torch.randn(1, 3, 8, 8))
    layers = _layers(small)
    # every conv loses its pruned half: the concatenations pass each slice on
    assert all(s.channels_after == s.channels_before // 2 for n, s in layers.items()
               if s.kind == "conv"), [s.line() for s in layers.values()]
    assert layers["head.2"].params_after == 5 * 4 + 5
    assert _params_ratio(small) <= 0.32, _params_ratio(small)


class Inceptionish(nn.Module):
    """Four branches (1x1; 1x1-3x3; maxpool-1x1; the stem itself) concatenated along
    dim -3, then a 1x1 conv and a pooled linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = nn.Conv2d(8, 6, 1)
        self.b2 = nn.Sequential(nn.Conv2d(8, 4, 1), nn.ReLU(), nn.Conv2d(4, 6, 3, padding=1))
        self.b3 = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(8, 4, 1))
        self.mix = nn.Conv2d(24, 8, 1)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))

    def forward(self, x):
        s = torch.relu(self.stem(x))
        y = torch.cat([torch.relu(self.b1(s)), torch.relu(self.b2(s)), torch.relu(self.b3(s)),
                       s], dim=-3)
        return self.head(torch.relu(self.mix(y)))


def test_inception_branches_compact_per_slice(tmp_path):
    torch.manual_seed(1)
    model = _prune(Inceptionish())
    full, small = _differential(tmp_path, model, torch.randn(2, 3, 8, 8))
    layers = _layers(small)
    assert all(s.channels_after == s.channels_before // 2 for s in layers.values()
               if s.kind == "conv"), [s.line() for s in layers.values()]
    assert layers["mix"].params_after == 4 * 12 + 4  # 12 of 24 input channels stay
    assert _params_ratio(small) <= 0.36, _params_ratio(small)


class CatWithInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 1)
        self.conv2 = nn.Conv2d(9, 2, 1)
        self.register_buffer("const", torch.randn(1, 2, 4, 4))

    def forward(self, x):
        return self.conv2(torch.cat([torch.relu(self.conv1(x)), x, self.const], 1))


def test_graph_input_and_constant_slices_of_a_concat_keep_their_channels(tmp_path):
    torch.manual_seed(3)
    model = CatWithInput().eval()
    _zero_rows(model.conv1, [1, 2])
    _, small = _differential(tmp_path, model, torch.randn(1, 3, 4, 4))
    layers = _layers(small)
    assert layers["conv1"].channels_removed == 2
    assert layers["conv2"].params_after == 2 * (2 + 3 + 2) + 2


class NestedCatResidual(nn.Module):
    """cat(cat(a, b), c) along dim -3 added to a residual conv, into a padded head."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Conv2d(4, 3, 1), nn.Conv2d(4, 2, 1), nn.Conv2d(4, 3, 1)
        self.r = nn.Conv2d(4, 8, 3, padding=1)
        self.head = nn.Conv2d(8, 2, 3, padding=1)

    def forward(self, x):
        y = torch.cat([torch.cat([self.a(x), self.b(x)], 1), self.c(x)], -3) + self.r(x)
        return self.head(torch.relu(y))


def test_nested_concat_into_a_residual_add_removes_the_common_zero_channels(tmp_path):
    """Cat channels 0, 2 (a), 4 (b), 5 (c) are zero; r zeroes 0, 2, 4, 6: 0, 2, 4 go."""
    torch.manual_seed(4)
    model = NestedCatResidual().eval()
    for layer, rows in ((model.a, [0, 2]), (model.b, [1]), (model.c, [0]),
                        (model.r, [0, 2, 4, 6])):
        _zero_rows(layer, rows)
    _, small = _differential(tmp_path, model, torch.randn(1, 4, 6, 6))
    layers = _layers(small)
    assert [layers[n].channels_removed for n in "abcr"] == [2, 1, 0, 3]


# ---------------------------------------------------------------------------- depthwise
class MobileNetish(nn.Module):
    """Stem, two MobileNetV2 inverted residuals (1x1 expand -> 3x3 depthwise -> 1x1
    project, + x), a 1x1 conv and a pooled linear head; batch norm as in torchvision."""

    def __init__(self, c=8, t=4):
        super().__init__()

        def cbr(i, o, k, groups=1, act=True):
            mods = [nn.Conv2d(i, o, k, padding=k // 2, groups=groups, bias=False),
                    nn.BatchNorm2d(o)]
            return nn.Sequential(*mods, *([nn.ReLU6()] if act else []))

        self.stem = cbr(3, c, 3)
        self.blocks = nn.ModuleList(nn.Sequential(
            cbr(c, c * t, 1), cbr(c * t, c * t, 3, groups=c * t), cbr(c * t, c, 1, act=False))
            for _ in range(2))
        self.last = cbr(c, 32, 1)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 4))

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = x + b(x)
        return self.head(self.last(x))


def test_mobilenet_v2_inverted_residuals_compact_through_the_depthwise_convs(tmp_path):
    torch.manual_seed(5)
    model = _prune(MobileNetish())
    full, small = _differential(tmp_path, model, torch.randn(1, 3, 8, 8))
    layers = _layers(small)
    for i in range(2):  # the expansion's pruned channels leave the depthwise conv too
        assert layers[f"blocks.{i}.0.0"].channels_removed == 16
        assert layers[f"blocks.{i}.1.0"].channels_after == 16
    assert layers["last.0"].channels_removed == 16
    assert _params_ratio(small) <= 0.52, _params_ratio(small)


class DepthwiseMultiplier(nn.Module):
    """1x1 conv -> depthwise conv with 2 filters per channel -> 1x1 conv."""

    def __init__(self, dims, padding):
        super().__init__()
        conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[dims]
        self.pw = conv(3, 4, 1)
        self.dw = conv(4, 8, 3, padding=padding, groups=4)
        self.out = conv(8, 3, 1)

    def forward(self, x):
        return self.out(torch.relu(self.dw(torch.relu(self.pw(x)))))


@pytest.mark.parametrize("dims,padding", [(1, 0), (3, 0), (2, 1)],
                         ids=["conv1d", "conv3d", "conv2d_padded"])
def test_depthwise_multiplier_two_removes_whole_filter_groups(tmp_path, dims, padding):
    """pw channel 1 is the constant relu(0.5): through an unpadded depthwise conv its two
    outputs are constants (c * sum(W) + b) and the group goes; zero padding makes them
    maps, which `out` adds as a position map: the group goes too. Both filters of group 2 are zero: its input channel is
    dead, so pw's (nonzero) channel 2 goes too. Group 3 has one zero filter: it stays."""
    torch.manual_seed(6)
    model = DepthwiseMultiplier(dims, padding).eval()
    _zero_rows(model.pw, [1])
    _zero_rows(model.dw, [4, 5, 6])
    with torch.no_grad():
        model.pw.bias[1] = 0.5
    _, small = _differential(tmp_path, model, torch.randn(1, 3, *[6] * dims))
    layers = _layers(small)
    groups_gone = 2
    assert layers["pw"].channels_removed == groups_gone
    assert layers["dw"].channels_removed == 2 * groups_gone
    assert layers["out"].params_after == 3 * (8 - 2 * groups_gone) + 3


# ---------------------------------------------------------------------------- grouped
class Grouped(nn.Module):
    """1x1 conv -> padded 3x3 conv in 3 groups -> 1x1 conv in 3 groups."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 6, 1)
        self.g1 = nn.Conv2d(6, 6, 3, padding=1, groups=3)
        self.out = nn.Conv2d(6, 3, 1, groups=3)

    def forward(self, x):
        return self.out(torch.relu(self.g1(torch.relu(self.conv1(x)))))


def test_grouped_convs_lose_as_many_channels_in_every_group(tmp_path):
    """conv1's zero channels 0 | 2, 3 | 4 meet g1's groups of two: one goes from each
    (its constant through g1's padding as a border map); g1's zero filters 1 | 2 | 5 are
    one per group of g1 and of out: all three go."""
    torch.manual_seed(7)
    model = Grouped().eval()
    _zero_rows(model.conv1, [0, 2, 3, 4])
    _zero_rows(model.g1, [1, 2, 5])
    with torch.no_grad():
        model.conv1.bias[:] = torch.tensor([0.5, 0.1, -1.0, 0.7, 0.3, 0.2])
    _, small = _differential(tmp_path, model, torch.randn(1, 4, 6, 6))
    layers = _layers(small)
    assert [layers[n].channels_removed for n in ("conv1", "g1")] == [3, 3]
    assert layers["g1"].params_after == 3 * 1 * 9 + 3
    assert layers["out"].params_after == 3 * 1 + 3
