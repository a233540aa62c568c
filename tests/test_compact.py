"""Channel compaction (``compact=True``): zeroed output channels leave the graph, outputs
stay equal to PyTorch's, and every layout the pass cannot prove right is left alone."""

import os
import shutil
import tempfile

import pytest
import torch
import torch.nn as nn
import torch.nn.utils.prune as prune

import t2n
from t2n.testing import assert_exports


def _zero_rows(layer, rows):
    with torch.no_grad():
        layer.weight[rows] = 0


def _layers(result):
    return {s.name: s for s in result.extras["layers"]}


def _removed(result, name):
    return _layers(result)[name].channels_removed


class TwoConvs(nn.Module):
    def __init__(self, pad2=1, c=6, dims=2):
        super().__init__()
        conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[dims]
        self.conv1 = conv(3, c, 3, padding=1)
        self.conv2 = conv(c, 4, 3, padding=pad2)

    def forward(self, x):
        return self.conv2(torch.relu(self.conv1(x)))


def _two_convs(pad2, dims=2):
    torch.manual_seed(0)
    m = TwoConvs(pad2, dims=dims).eval()
    _zero_rows(m.conv1, [0, 2, 3, 5])
    with torch.no_grad():
        m.conv1.bias[:] = torch.tensor([0.5, 1.0, -0.25, 0.0, 0.3, -2.0])
    return m


def test_padded_consumer_gets_the_border_map_of_removed_constant_channels():
    """relu(bias) > 0 through zero padding is not uniform (border outputs see fewer taps):
    its exact contribution is added as conv(ones, folded one-channel filter)."""
    m = _two_convs(pad2=1)
    r = assert_exports(m, (torch.randn(2, 3, 7, 7),), compact=True)
    assert _removed(r, "conv1") == 4
    assert _layers(r)["conv2"].params_after == 4 * 2 * 9 + 4


def test_padded_consumer_with_a_dynamic_size_keeps_nonzero_constant_channels():
    """Without static spatial sizes there is no border map: only channels whose constant
    is exactly 0 (relu of a non-positive bias) can go."""
    m = _two_convs(pad2=1)
    r = assert_exports(m, (torch.randn(2, 3, 7, 7),), more_args=[(torch.randn(1, 3, 5, 9),)],
                       compact=True, dynamic_axes={"input_0": {0: "N", 2: "H", 3: "W"}})
    assert _removed(r, "conv1") == 3  # channels 2, 3, 5: relu(-0.25) = relu(0) = relu(-2) = 0


@pytest.mark.parametrize("dims", [1, 2, 3], ids=["conv1d", "conv2d", "conv3d"])
def test_unpadded_consumer_folds_the_constant_into_its_bias(dims):
    m = _two_convs(pad2=0, dims=dims)
    shape = (2, 3) + (6,) * dims
    r = assert_exports(m, (torch.randn(*shape),), compact=True)
    assert _removed(r, "conv1") == 4
    assert _layers(r)["conv1"].params_after == 2 * 3 * 3 ** dims + 2


class Affine(nn.Module):
    """conv -> x * s + b (BN folded by hand) -> 1 - sigmoid -> conv: per-channel chain."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 5, 3, bias=False)
        self.s = nn.Parameter(torch.rand(1, 5, 1, 1) + 0.5)
        self.b = nn.Parameter(torch.randn(1, 5, 1, 1))
        self.conv2 = nn.Conv2d(5, 2, 1, padding=0)

    def forward(self, x):
        return self.conv2(1 - torch.sigmoid(self.conv1(x) * self.s + self.b))


def test_chain_of_per_channel_constants_and_reversed_operands():
    torch.manual_seed(1)
    m = Affine().eval()
    _zero_rows(m.conv1, [1, 4])
    r = assert_exports(m, (torch.randn(1, 3, 6, 6),), compact=True)
    assert _removed(r, "conv1") == 2


class DivByChannel(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 1, bias=False)
        self.conv2 = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        return self.conv2(torch.clamp(2.0 / (self.conv1(x) + 1.0), max=5.0))


def test_per_channel_clamp_and_division_by_the_channel():
    torch.manual_seed(2)
    m = DivByChannel().eval()
    _zero_rows(m.conv1, [0, 3])
    r = assert_exports(m, (torch.randn(1, 3, 5, 5),), compact=True)
    assert _removed(r, "conv1") == 2


class Depthwise(nn.Module):
    def __init__(self, groups):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 1, bias=False)
        self.conv2 = nn.Conv2d(4, 4, 1, groups=groups)

    def forward(self, x):
        return self.conv2(self.conv1(x))


class GroupedProducer(nn.Module):
    """Zero filters 1 and 2 of three groups: removing them would leave the groups uneven."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 3, 1, groups=3, bias=False)
        self.conv2 = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        return self.conv2(self.conv1(x))


class GroupedConsumer(nn.Module):
    """Zero channels 1 and 2 read by groups 0 and 1 of three: the groups would be uneven."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 6, 1, bias=False)
        self.conv2 = nn.Conv2d(6, 3, 1, groups=3)

    def forward(self, x):
        return self.conv2(self.conv1(x))


class AlsoAnOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 1, bias=False)
        self.conv2 = nn.Conv2d(4, 3, 1)

    def forward(self, x):
        y = torch.relu(self.conv1(x))
        return self.conv2(y), y


class ConcatOtherAxis(nn.Module):
    """A concat along the height: the pass follows concatenations along channels only."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 1, bias=False)
        self.conv2 = nn.Conv2d(4, 3, 1)

    def forward(self, x):
        return self.conv2(torch.cat([self.conv1(x), x], 2))


class ReshapedAway(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 1, bias=False)
        self.conv2 = nn.Conv2d(2, 3, 1)

    def forward(self, x):
        y = self.conv1(x)
        return self.conv2(y.reshape(y.shape[0], 2, 2 * y.shape[2], y.shape[3]))


class ResidualGroup(nn.Module):
    """stem conv -> relu -> max pool = s; y = relu(conv_b(relu(conv_a(s))) * k + s);
    a second block adds conv_c's channels; the head is a padded conv. Beside it, conv_d
    adds into the graph input, which no plan can shrink: conv_d keeps its channels."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 6, 3, padding=1)
        self.conv_a = nn.Conv2d(6, 4, 1)
        self.conv_b = nn.Conv2d(4, 6, 3, padding=1)
        self.conv_c = nn.Conv2d(6, 6, 1)
        self.head = nn.Conv2d(6, 2, 3, padding=1)
        self.k = nn.Parameter(torch.rand(1, 6, 1, 1) + 0.5)
        self.conv_d = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x):
        s = torch.nn.functional.max_pool2d(torch.relu(self.stem(x)), 2)
        y = torch.relu(self.conv_b(torch.relu(self.conv_a(s))) * self.k + s)
        z = torch.relu(self.conv_c(y) - y)
        return self.head(z), torch.relu(self.conv_d(x) + x)


def test_residual_adds_remove_the_channels_zero_in_every_branch():
    """Channels zero in the stem, conv_b and conv_c (0 and 4; 2 is live in conv_c, 3 in
    conv_b) leave all three and the convs reading them; nonzero constants fold into the
    head's border map and conv_a/conv_c's biases."""
    torch.manual_seed(7)
    m = ResidualGroup().eval()
    _zero_rows(m.stem, [0, 2, 3, 4])
    _zero_rows(m.conv_b, [0, 2, 4])
    _zero_rows(m.conv_c, [0, 3, 4])
    _zero_rows(m.conv_d, [1])
    r = assert_exports(m, (torch.randn(1, 3, 8, 8),), compact=True)
    assert [_removed(r, n) for n in ("stem", "conv_b", "conv_c", "conv_d")] == [2, 2, 2, 0]
    assert _layers(r)["conv_a"].params_after == 4 * 4 + 4


LEFT_ALONE = {
    "depthwise_into_graph_output": lambda: Depthwise(4),
    "grouped_consumer_uneven": GroupedConsumer,
    "grouped_producer_uneven": GroupedProducer,
    "graph_output": AlsoAnOutput,
    "reshape": ReshapedAway,
    "concat_other_axis": ConcatOtherAxis,
}


@pytest.mark.parametrize("case", list(LEFT_ALONE))
def test_layouts_the_pass_cannot_prove_are_left_uncompacted(case):
    torch.manual_seed(3)
    m = LEFT_ALONE[case]().eval()
    _zero_rows(m.conv1, [1, 2])
    x = torch.randn(1, m.conv1.in_channels, 4, 4)
    r = assert_exports(m, (x,), compact=True)
    assert _removed(r, "conv1") == 0


class TwoConsumers(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 1)
        self.a = nn.Conv2d(6, 2, 3, padding=0)
        self.b = nn.Conv2d(6, 2, 3, padding=1, bias=False)

    def forward(self, x):
        y = torch.relu(self.conv1(x))
        return self.a(y)[:, :, 1:-1, 1:-1] + self.b(y)[:, :, 2:-2, 2:-2]


def test_branching_chain_slices_every_consumer():
    torch.manual_seed(4)
    m = TwoConsumers().eval()
    _zero_rows(m.conv1, [0, 1, 4])
    with torch.no_grad():
        m.conv1.bias[:] = torch.tensor([-1.0, 0.7, 0.2, 0.1, -0.3, 0.5])
    r = assert_exports(m, (torch.randn(1, 3, 8, 8),), compact=True)
    assert _removed(r, "conv1") == 3  # folded into a's bias and into b's border map


class Mlp(nn.Module):
    def __init__(self, bias3):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 5)
        self.fc3 = nn.Linear(5, 3, bias=bias3)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.nn.functional.gelu(self.fc1(x)) + 0.5)))


@pytest.mark.parametrize("bias3", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("shape", [(4, 6), (2, 3, 6)], ids=["rank2", "rank3"])
def test_linear_chain_folds_into_bias_or_adds_one(bias3, shape):
    """tanh(bias) of fc2's removed rows reaches fc3: added to its bias, or to a new one."""
    torch.manual_seed(5)
    m = Mlp(bias3).eval()
    prune.ln_structured(m.fc1, "weight", amount=0.5, n=1, dim=0)
    prune.ln_structured(m.fc2, "weight", amount=2, n=2, dim=0)
    r = assert_exports(m, (torch.randn(*shape),), compact=True)
    # gelu = x * 0.5 * (1 + erf(x / sqrt 2)): element-wise ops combining chain tensors
    assert _removed(r, "fc1") == 4
    assert _removed(r, "fc2") == 2
    assert _layers(r)["fc3"].params_after == 3 * 3 + 3


def test_every_channel_zero_keeps_one():
    torch.manual_seed(6)
    m = _two_convs(pad2=0)
    _zero_rows(m.conv1, list(range(6)))
    r = assert_exports(m, (torch.randn(1, 3, 5, 5),), compact=True)
    assert _removed(r, "conv1") == 5


# ---------------------------------------------------------------------------- ResNet-18
def pruned_resnet18(num_classes=10):
    """The ResNet-18 fixture with ln_structured(amount=0.5, n=2, dim=0) on every conv."""
    from fixtures.models import make_resnet18

    m = make_resnet18(num_classes=num_classes)
    for mod in m.modules():
        if isinstance(mod, nn.Conv2d):
            prune.ln_structured(mod, "weight", amount=0.5, n=2, dim=0)
    return m.eval()


def test_resnet18_compacts_to_at_most_50_percent_and_matches_torch():
    m = pruned_resnet18()
    x = torch.randn(1, 3, 64, 64)
    d = tempfile.mkdtemp(prefix="t2n-compact-")
    full = t2n.export(m, (x,), os.path.join(d, "full.nnef.tar"), check=True)
    small = assert_exports(m, (x,), compact=True, filename="small.nnef.tar")
    assert small.archive_bytes <= 0.5 * full.archive_bytes, (small.archive_bytes,
                                                            full.archive_bytes)
    layers = _layers(small)
    inner = [s for n, s in layers.items() if n.startswith("layer") and n.endswith(".conv1")]
    assert len(inner) == 8 and all(s.channels_removed == s.channels_before // 2 for s in inner)
    # the residual streams lose the channels zero in every conv adding into them
    assert layers["layer4.0.downsample.0"].channels_removed > 0
    assert all(layers[n].channels_after == layers["layer4.0.downsample.0"].channels_after
               for n in ("layer4.0.conv2", "layer4.1.conv2"))
    assert "compaction: layer parameters" in small.report()
    shutil.rmtree(d)


CLI_MODEL = '''
import torch, torch.nn as nn, torch.nn.utils.prune as prune
def build():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 1))
    prune.ln_structured(m[0], "weight", amount=0.5, n=2, dim=0)
    return m
'''


def test_cli_export_compact(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from t2n.cli import cli

    (tmp_path / "prunedmodel_cli.py").write_text(CLI_MODEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = str(tmp_path / "m.nnef.tgz")
    r = CliRunner().invoke(cli, ["export", "prunedmodel_cli:build", "-o", out, "--input",
                                 "x:1x3x8x8:f32", "--check", "--compact"])
    assert r.exit_code == 0, r.output
    assert "0 (conv): 50.0% zero, channels 8 -> 4 (-4), params 224 -> 112" in r.output
    assert "check in tract: PASSED" in r.output
