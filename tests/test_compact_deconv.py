"""Channel compaction through transposed convolutions (``conv_transpose1d/2d/3d``, groups,
dilation, output_padding): a transposed conv drops its zero output channels (its filter
rows in the graph; PyTorch's weight axis 1 per group) and the input channels it reads as
constants (their contribution, position-dependent between strided taps and at the
borders, goes in as a border map, or into its bias when every output sees every tap).
Each case: compacted == uncompacted == torch in tract."""

import pytest
import torch
import torch.nn as nn
import torch.nn.utils.prune as prune
from batch_norms import random_batch_norms
from compact_checks import differential, layers

_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
_DECONV = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}


class Decoder(nn.Module):
    """conv -> relu -> transposed conv -> relu -> 1x1 conv."""

    def __init__(self, dims, groups, **up):
        super().__init__()
        self.a = _CONV[dims](3, 8, 3, padding=1)
        self.up = _DECONV[dims](8, 8, 3, groups=groups, **up)
        self.out = _CONV[dims](8, 2, 1)

    def forward(self, x):
        return self.out(torch.relu(self.up(torch.relu(self.a(x)))))


CASES = {  # dims, groups, transposed-conv options
    "stride2": (2, 1, dict(stride=2, padding=1, output_padding=1)),
    "groups2": (2, 2, dict(stride=2, padding=1)),
    "dilation2_output_padding_past_padding": (2, 1, dict(stride=2, padding=0,
                                                         output_padding=1, dilation=2)),
    "stride1_every_tap": (2, 1, dict(stride=1, padding=2)),  # the constants fold into bias
    "conv_transpose1d": (1, 1, dict(stride=3, padding=1)),
    "conv_transpose3d_groups4": (3, 4, dict(stride=2, padding=1, output_padding=1)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_transposed_conv_drops_zero_outputs_and_constant_inputs(tmp_path, case):
    dims, groups, up = CASES[case]
    torch.manual_seed(3)
    model = Decoder(dims, groups, **up).eval()
    with torch.no_grad():
        model.a.weight[[0, 2, 5, 7]] = 0  # constants relu(bias) into the transposed conv
        model.a.bias[:] = torch.linspace(-0.5, 1.0, 8)
        model.up.weight[:, [1]] = 0  # output channel 1 of every group (weight axis 1)
    full, small = differential(tmp_path, model, torch.randn(1, 3, *[5] * dims))
    got = layers(small)
    # a's zero channels 0 2 5 7 go: as many from every group of `up` (two of each half,
    # one of each quarter)
    gone_a = 4
    assert got["a"].channels_removed == gone_a
    assert got["up"].kind == "deconv"
    assert got["up"].channels_removed == groups
    # (output_padding past padding: the bias is added after the zero pad, not counted)
    bias = 0 if up.get("output_padding", 0) > up["padding"] else 8 - groups
    assert got["up"].params_after == (8 - groups) * ((8 - gone_a) // groups) * 3 ** dims \
        + bias
    assert got["out"].params_after == 2 * (8 - groups) + 2
    if case == "stride1_every_tap":  # no border map: the same ops as before
        assert small.op_count == full.op_count


class DepthwiseUp(nn.Module):
    """1x1 conv -> relu -> depthwise transposed conv (stride 2) -> relu -> 1x1 conv."""

    def __init__(self):
        super().__init__()
        self.pw = nn.Conv2d(3, 4, 1)
        self.up = nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, groups=4)
        self.out = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        return self.out(torch.relu(self.up(torch.relu(self.pw(x)))))


def test_depthwise_transposed_conv_is_followed_channel_by_channel(tmp_path):
    """pw channel 0 is relu(-1) = 0: its map through `up` is up's bias, gone; channel 1
    is relu(0.5), a map between the strided taps, and up's bias -10 makes relu of it 0
    everywhere: gone; channel 2's map varies: kept; up's zero filter 3 makes pw's channel
    3 dead: gone with it."""
    torch.manual_seed(4)
    model = DepthwiseUp().eval()
    with torch.no_grad():
        model.pw.weight[[0, 1]] = 0
        model.pw.bias[:2] = torch.tensor([-1.0, 0.5])
        model.pw.weight[2] = 0
        model.pw.bias[2] = 0.7
        model.up.weight[1] = model.up.weight[1].abs()
        model.up.bias[1] = -10.0
        model.up.weight[3] = 0
    _, small = differential(tmp_path, model, torch.randn(1, 3, 4, 4))
    got = layers(small)
    assert got["pw"].channels_removed == 3
    assert got["up"].channels_removed == 3
    assert got["out"].params_after == 2 * 1 + 2


class UNetish(nn.Module):
    """Two-level U-Net: encoder convs, max pool, bottleneck, transposed-conv upsampling,
    concatenation with the skip, decoder conv, 1x1 head (batch norms with trained-like
    statistics)."""

    def __init__(self):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False),
                                 nn.BatchNorm2d(o), nn.ReLU())

        self.enc = block(3, 8)
        self.down = nn.MaxPool2d(2)
        self.mid = block(8, 16)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.dec = block(16, 8)
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        s = self.enc(x)
        y = self.up(self.mid(self.down(s)))
        return self.head(self.dec(torch.cat([s, y], 1)))


def test_pruned_unet_compacts_through_the_upsampling(tmp_path):
    torch.manual_seed(5)
    model = random_batch_norms(UNetish(), seed=6)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            prune.ln_structured(m, "weight", amount=0.5, n=2, dim=0)
        if isinstance(m, nn.ConvTranspose2d):  # output channels: weight axis 1
            prune.ln_structured(m, "weight", amount=0.5, n=2, dim=1)
    model.eval()
    _, small = differential(tmp_path, model, torch.randn(1, 3, 8, 8))
    got = layers(small)
    assert got["up"].channels_removed == 4
    assert got["mid.0"].channels_removed == 8  # the transposed conv reads their constants
    assert got["dec.0"].channels_removed == 4
    before = sum(s.params_before for s in got.values())
    assert sum(s.params_after for s in got.values()) <= 0.45 * before


class MapIntoUp(nn.Module):
    """1x1 conv -> relu -> zero-padded depthwise conv -> relu -> transposed conv."""

    def __init__(self):
        super().__init__()
        self.pw = nn.Conv2d(3, 4, 1)
        self.dw = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.up = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        return self.up(torch.relu(self.dw(torch.relu(self.pw(x)))))


def test_a_transposed_conv_adds_the_position_map_of_removed_map_channels(tmp_path):
    """pw channel 0 (relu(0.5)) is a positive map after the padded depthwise conv: `up`
    reads it, and gets what it adds as a position map."""
    torch.manual_seed(10)
    model = MapIntoUp().eval()
    with torch.no_grad():
        model.pw.weight[0] = 0
        model.pw.bias[0] = 0.5
        model.dw.weight[0] = model.dw.weight[0].abs() + 0.1
        model.dw.bias[0] = 0.0
    _, small = differential(tmp_path, model, torch.randn(1, 3, 5, 5))
    got = layers(small)
    assert got["pw"].channels_removed == 1
    assert got["up"].params_after == 3 * 2 * 9 + 2
