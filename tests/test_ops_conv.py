"""Convolutions and transposed convolutions: torch eager vs tract.

Module forms trace to ``aten::_convolution`` (``padding='same'``/``'valid'`` to
``aten::_convolution_mode``); weights given as runtime inputs go through the same mappings.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from t2n.testing import assert_exports


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


CONV2D = {
    "k3 default": dict(in_channels=3, out_channels=4, kernel_size=3),
    "k3 pad1 stride2": dict(in_channels=3, out_channels=4, kernel_size=3, padding=1, stride=2),
    "rect kernel asym stride/pad": dict(in_channels=3, out_channels=5, kernel_size=(3, 2),
                                        stride=(2, 1), padding=(1, 2)),
    "dilation 2": dict(in_channels=3, out_channels=4, kernel_size=3, dilation=2, padding=2),
    "dilation (1,3) stride 2": dict(in_channels=3, out_channels=4, kernel_size=3,
                                    dilation=(1, 3), stride=2),
    "groups 2 no bias": dict(in_channels=4, out_channels=6, kernel_size=3, groups=2,
                             bias=False),
    "depthwise": dict(in_channels=4, out_channels=4, kernel_size=3, groups=4, padding=1),
    "depthwise multiplier 2": dict(in_channels=3, out_channels=6, kernel_size=3, groups=3),
    "pointwise 1x1": dict(in_channels=3, out_channels=8, kernel_size=1),
    "padding same even kernel": dict(in_channels=3, out_channels=4, kernel_size=4,
                                     padding="same"),
    "padding same dilation": dict(in_channels=3, out_channels=4, kernel_size=3,
                                  padding="same", dilation=2),
    "padding valid": dict(in_channels=3, out_channels=4, kernel_size=3, padding="valid"),
}


@pytest.mark.parametrize("name", list(CONV2D))
def test_conv2d(name):
    kw = CONV2D[name]
    m = nn.Conv2d(**kw).eval()
    assert_exports(m, (torch.randn(2, kw["in_channels"], 9, 10),))


CONV1D = {
    "k3 stride2 pad1": dict(in_channels=3, out_channels=4, kernel_size=3, stride=2, padding=1),
    "dilation 2 groups 3 no bias": dict(in_channels=3, out_channels=6, kernel_size=3,
                                        dilation=2, groups=3, bias=False),
    "same k4": dict(in_channels=2, out_channels=3, kernel_size=4, padding="same"),
}


@pytest.mark.parametrize("name", list(CONV1D))
def test_conv1d(name):
    kw = CONV1D[name]
    assert_exports(nn.Conv1d(**kw).eval(), (torch.randn(2, kw["in_channels"], 11),))


def test_conv_unbatched_input():
    assert_exports(nn.Conv2d(3, 4, 3, padding=1).eval(), (torch.randn(3, 6, 7),))


def test_conv_weights_as_runtime_inputs():
    m = Fn(lambda x, w, b: (F.conv2d(x, w, b, stride=2, padding=1),
                            F.conv1d(x[:, :, 0], w[:, :, 0], None, padding="same")))
    assert_exports(m, (torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4)))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_conv_padding_modes(mode):
    m = nn.Conv2d(3, 4, 3, padding=(1, 2), padding_mode=mode).eval()
    assert_exports(m, (torch.randn(1, 3, 6, 7),))


CONVT2D = {
    "k3 stride2": dict(in_channels=3, out_channels=4, kernel_size=3, stride=2),
    "k3 stride2 pad1 output_padding1": dict(in_channels=3, out_channels=4, kernel_size=3,
                                            stride=2, padding=1, output_padding=1),
    "output_padding > padding": dict(in_channels=3, out_channels=2, kernel_size=3, stride=3,
                                     padding=0, output_padding=2),
    "groups 2": dict(in_channels=4, out_channels=6, kernel_size=3, stride=2, groups=2),
    "depthwise no bias": dict(in_channels=4, out_channels=4, kernel_size=4, stride=2,
                              padding=1, groups=4, bias=False),
    "dilation 2": dict(in_channels=3, out_channels=4, kernel_size=3, dilation=2, padding=1),
    "rect asym": dict(in_channels=2, out_channels=3, kernel_size=(2, 3), stride=(1, 2),
                      padding=(0, 1), output_padding=(0, 1)),
}


@pytest.mark.parametrize("name", list(CONVT2D))
def test_conv_transpose2d(name):
    kw = CONVT2D[name]
    m = nn.ConvTranspose2d(**kw).eval()
    assert_exports(m, (torch.randn(2, kw["in_channels"], 5, 6),))


def test_conv_transpose1d_output_padding_groups_dilation():
    m = nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2,
                           dilation=2).eval()
    assert_exports(m, (torch.randn(2, 4, 7),))


def test_conv_transpose_functional_runtime_weight():
    m = Fn(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1,
                                              groups=2))
    assert_exports(m, (torch.randn(1, 4, 5, 5), torch.randn(4, 3, 3, 3), torch.randn(6)))


def test_conv_integer_input_is_refused():
    from t2n.errors import UnsupportedOperatorsError

    m = Fn(lambda x: F.conv1d(x, torch.ones(1, 1, 2, dtype=torch.int64)))
    with pytest.raises(UnsupportedOperatorsError, match="torch.int64 tensors is not supported"):
        assert_exports(m, (torch.ones(1, 1, 4, dtype=torch.int64),))


PADS = {
    "constant 2d value": lambda x: F.pad(x, (1, 2, 0, 3), value=1.5),
    "constant negative crops": lambda x: F.pad(x, (-1, 2, 1, -2)),
    "constant all axes": lambda x: F.pad(x, (1, 1, 1, 1, 1, 0, 0, 1)),
    "reflect 2d": lambda x: F.pad(x, (2, 1, 1, 3), mode="reflect"),
    "replicate 1d": lambda x: F.pad(x[0], (3, 1), mode="replicate"),
    "circular 2d": lambda x: F.pad(x, (2, 3, 1, 0), mode="circular"),
    "ConstantPad2d module": nn.ConstantPad2d((1, 0, 2, 1), -2.0),
    "ReflectionPad1d module": lambda x: nn.ReflectionPad1d(2)(x[0]),
    "ReplicationPad2d module": nn.ReplicationPad2d((0, 2, 1, 1)),
}


@pytest.mark.parametrize("name", list(PADS))
def test_pad(name):
    fn = PADS[name]
    m = fn if isinstance(fn, nn.Module) else Fn(fn)
    assert_exports(m.eval(), (torch.randn(2, 3, 5, 6),))


def test_pad_int_tensor_constant():
    m = Fn(lambda x: (F.pad(x, (1, 2), value=7), F.pad(x, (0, 1, 1, 0))))
    assert_exports(m, (torch.arange(12).reshape(3, 4),))
