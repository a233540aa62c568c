"""Channel compaction of constant channels through zero-padded depthwise convs and pads
(t2n/passes/compact_values.py): such a channel becomes a per-position map; it is a
constant where the map is the same at every position (border taps zero, an activation
that clips it, a pad of its own value, a reflect/replicate pad) or is reduced (global
pooling); a conv reading a varying map gets it as a small position map (its distinct
slices, gathered back); anything else reading one keeps the channel. Each case: compacted
== uncompacted == torch in tract."""

import tarfile

import pytest
import torch
import torch.nn as nn
from compact_checks import differential, layers

from t2n.testing import tract_ops

_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}


class Inverted(nn.Module):
    """1x1 conv -> relu -> depthwise 3x3 conv (zero padding 1) -> relu -> head: a 1x1 conv,
    or global average pooling -> flatten -> linear."""

    def __init__(self, dims=2, head="conv", size=5):
        super().__init__()
        conv = _CONV[dims]
        self.pw = conv(3, 6, 1)
        self.dw = conv(6, 6, 3, padding=1, groups=6)
        self.head = head
        self.out = {"conv": conv(6, 2, 1), "pool": nn.Linear(6, 2),
                    "flatten": nn.Linear(6 * size ** dims, 2)}[head]

    def forward(self, x):
        y = torch.relu(self.dw(torch.relu(self.pw(x))))
        if self.head == "pool":
            y = y.flatten(2).mean(-1)
        elif self.head == "flatten":
            y = y.flatten(1)
        return self.out(y)


def _inverted(dims=2, head="conv"):
    """pw channels 0-3 are the constants 0.5, 0.5, 0.5, 0 (relu of the bias). Through the
    padded depthwise conv: channel 0's filter has only its centre tap, so its map is the
    same everywhere; channel 1's positive filter and bias -10 make relu of its map 0
    everywhere; channel 2's (positive) map is smaller at the borders; channel 3 gives dw's bias."""
    torch.manual_seed(8)
    model = Inverted(dims, head).eval()
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
def test_constant_channels_through_a_padded_depthwise_conv_go(tmp_path, dims):
    """Channels 0, 1, 3 are constants at `out` (its bias takes them); channel 2's map
    reaches `out` as a position map of first / interior / last slices per axis."""
    _, small = differential(tmp_path, _inverted(dims), torch.randn(1, 3, *[5] * dims))
    got = layers(small)
    assert got["pw"].channels_removed == 4
    assert got["dw"].channels_removed == 4
    assert got["out"].params_after == 2 * 2 + 2
    with tarfile.open(tmp_path / "small.nnef.tar") as tar:
        sizes = {m.name: m.size for m in tar.getmembers()}
        graph = tar.extractfile("graph.nnef").read().decode()
    assert graph.count("tract_core_gather(") == dims  # one index per spatial axis
    stored = [s for n, s in sizes.items() if "position_map" in n]
    # [1, 2, 3, ...] floats: a .dat (128-byte header) unless small enough to be inline
    assert stored == ([128 + 4 * 2 * 3 ** dims] if dims > 1 else []), stored
    if dims == 2:  # tract folds the gathers at load: one constant add is left to run
        ops = tract_ops(str(tmp_path / "small.nnef.tar"))
        assert not any("Gather" in k for k in ops), ops


@pytest.mark.parametrize("head,gone", [("pool", 4), ("flatten", 3)])
def test_a_varying_map_goes_into_a_pooled_head_and_stays_before_a_flatten(
        tmp_path, head, gone):
    """Channel 2's map reaches a mean over the positions: one constant the linear head
    folds into its bias. Flattened into the linear layer's features, it is not followed:
    it stays."""
    _, small = differential(tmp_path, _inverted(head=head), torch.randn(1, 3, 5, 5))
    got = layers(small)
    assert got["pw"].channels_removed == gone


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


@pytest.mark.parametrize("pad,maps", [
    (nn.ReflectionPad2d(1), 0), (nn.ReplicationPad2d(1), 0),
    # channel 0 (0.5) padded with its own value stays a constant; channel 1 (0) becomes a
    # map (and `out` gets its position map); with zeros, the other way round
    (nn.ConstantPad2d(1, 0.5), 1), (nn.ZeroPad2d(1), 1),
], ids=["reflect", "replicate", "own_value", "zeros"])
def test_pads_keep_a_constant_unless_they_fill_another_value(tmp_path, pad, maps):
    torch.manual_seed(9)
    model = PaddedThenConv(pad).eval()
    with torch.no_grad():
        model.pw.weight[:2] = 0
        model.pw.bias[:2] = torch.tensor([0.5, -1.0])
    full, small = differential(tmp_path, model, torch.randn(1, 3, 5, 5))
    got = layers(small)
    assert got["pw"].channels_removed == 2
    assert got["dw"].channels_removed == 2
    with tarfile.open(tmp_path / "small.nnef.tar") as tar:
        graph = tar.extractfile("graph.nnef").read().decode()
    assert graph.count("tract_core_gather(") == 2 * maps
