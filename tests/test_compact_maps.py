"""Channel compaction of constant channels through zero-padded depthwise convs and pads
(t2n/passes/compact_values.py): such a channel becomes a per-position map; it goes where
the map is the same at every position (border taps zero, an activation that clips it, a
pad of its own value, a reflect/replicate pad) or is reduced to a constant (global
pooling), and stays where a consumer would see it vary. Each case: compacted ==
uncompacted == torch in tract."""

import pytest
import torch
import torch.nn as nn
from compact_checks import differential, layers

_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}


class Inverted(nn.Module):
    """1x1 conv -> relu -> depthwise 3x3 conv (zero padding 1) -> relu -> head: a 1x1 conv,
    or global average pooling -> flatten -> linear."""

    def __init__(self, dims=2, pooled=False):
        super().__init__()
        conv = _CONV[dims]
        self.pw = conv(3, 6, 1)
        self.dw = conv(6, 6, 3, padding=1, groups=6)
        self.pooled = pooled
        self.out = nn.Linear(6, 2) if pooled else conv(6, 2, 1)

    def forward(self, x):
        y = torch.relu(self.dw(torch.relu(self.pw(x))))
        if self.pooled:
            y = y.flatten(2).mean(-1)
        return self.out(y)


def _inverted(dims=2, pooled=False):
    """pw channels 0-3 are the constants 0.5, 0.5, 0.5, 0 (relu of the bias). Through the
    padded depthwise conv: channel 0's filter has only its centre tap, so its map is the
    same everywhere; channel 1's positive filter and bias -10 make relu of its map 0
    everywhere; channel 2's (positive) map is smaller at the borders; channel 3 gives dw's bias."""
    torch.manual_seed(8)
    model = Inverted(dims, pooled).eval()
    with torch.no_grad():
        model.pw.weight[:4] = 0
        model.pw.bias[:4] = torch.tensor([0.5, 0.5, 0.5, -0.3])
        centre = (0, 0) + (1,) * dims
        keep = model.dw.weight[centre].clone()
        model.dw.weight[0] = 0
        model.dw.weight[centre] = keep
        model.dw.weight[1] = model.dw.weight[1].abs()
        model.dw.bias[1] = -10.0
        model.dw.weight[2] = model.dw.weight[2].abs() + 0.1
        model.dw.bias[2] = 0.0
    return model


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_uniform_maps_go_and_varying_maps_stay(tmp_path, dims):
    _, small = differential(tmp_path, _inverted(dims), torch.randn(1, 3, *[5] * dims))
    got = layers(small)
    assert got["pw"].channels_removed == 3  # 0, 1, 3; channel 2's map reaches `out`
    assert got["dw"].channels_removed == 3
    assert got["out"].params_after == 2 * 3 + 2


def test_a_varying_map_reduced_by_global_pooling_goes(tmp_path):
    """Channel 2's map reaches a mean over the positions: one constant the linear head
    folds into its bias."""
    _, small = differential(tmp_path, _inverted(pooled=True), torch.randn(1, 3, 6, 6))
    got = layers(small)
    assert got["pw"].channels_removed == 4
    assert got["out"].params_after == 2 * 2 + 2


class PaddedThenConv(nn.Module):
    """1x1 conv -> relu -> pad (module) -> unpadded depthwise 3x3 conv -> 1x1 conv."""

    def __init__(self, pad):
        super().__init__()
        self.pw = nn.Conv2d(3, 4, 1)
        self.pad = pad
        self.dw = nn.Conv2d(4, 4, 3, groups=4)
        self.out = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        return self.out(self.dw(self.pad(torch.relu(self.pw(x)))))


@pytest.mark.parametrize("pad,gone", [
    (nn.ReflectionPad2d(1), 2), (nn.ReplicationPad2d(1), 2),
    # channel 0 (0.5) padded with its own value stays a constant; channel 1 (0) becomes
    # a map: only channel 0 goes; with zeros, the other way round
    (nn.ConstantPad2d(1, 0.5), 1), (nn.ZeroPad2d(1), 1),
], ids=["reflect", "replicate", "own_value", "zeros"])
def test_pads_keep_a_constant_unless_they_fill_another_value(tmp_path, pad, gone):
    torch.manual_seed(9)
    model = PaddedThenConv(pad).eval()
    with torch.no_grad():
        model.pw.weight[:2] = 0
        model.pw.bias[:2] = torch.tensor([0.5, -1.0])
    _, small = differential(tmp_path, model, torch.randn(1, 3, 5, 5))
    got = layers(small)
    assert got["pw"].channels_removed == gone
    assert got["dw"].channels_removed == gone
