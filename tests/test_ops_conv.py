"""Convolutions and transposed convolutions: torch eager vs tract.

Module forms trace to ``aten::_convolution`` (``padding='same'``/``'valid'`` to
``aten::_convolution_mode``); weights given as runtime inputs go through the same mappings.
"""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
import torch.nn as nn
import torch.nn.functional as F

from opcases import Apply, Fn, assert_cases
from t2n.testing import assert_exports


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


def test_conv2d():
    x = torch.randn(2, 4, 9, 10)
    assert_cases({name: Apply(nn.Conv2d(**kw), (lambda c: lambda x: x[:, :c])(kw["in_channels"]))
                  for name, kw in CONV2D.items()}, (x,))


CONV1D = {
    "k3 stride2 pad1": dict(in_channels=3, out_channels=4, kernel_size=3, stride=2, padding=1),
    "dilation 2 groups 3 no bias": dict(in_channels=3, out_channels=6, kernel_size=3,
                                        dilation=2, groups=3, bias=False),
    "same k4": dict(in_channels=2, out_channels=3, kernel_size=4, padding="same"),
}


def test_conv1d_and_unbatched():
    x = torch.randn(2, 3, 11)
    cases = {name: Apply(nn.Conv1d(**kw), (lambda c: lambda x: x[:, :c])(kw["in_channels"]))
             for name, kw in CONV1D.items()}
    cases["conv1d unbatched"] = Apply(nn.Conv1d(3, 2, 3, padding=1), lambda x: x[0])
    cases["conv2d unbatched"] = Apply(nn.Conv2d(3, 4, 3, padding=1),
                                      lambda x: x.reshape(3, 2, 11))
    assert_cases(cases, (x,))


def test_conv_weights_as_runtime_inputs():
    m = Fn(lambda x, w, b: (F.conv2d(x, w, b, stride=2, padding=1),
                            F.conv1d(x[:, :, 0], w[:, :, 0], None, padding="same")))
    assert_exports(m, (torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4)))


def test_conv_padding_modes():
    assert_cases({f"padding_mode {mode}": nn.Conv2d(3, 4, 3, padding=(1, 2), padding_mode=mode)
                  for mode in ["zeros", "reflect", "replicate", "circular"]},
                 (torch.randn(1, 3, 6, 7),))


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


def test_conv_transpose2d():
    x = torch.randn(2, 4, 5, 6)
    assert_cases({name: Apply(nn.ConvTranspose2d(**kw),
                              (lambda c: lambda x: x[:, :c])(kw["in_channels"]))
                  for name, kw in CONVT2D.items()}, (x,))


def test_conv_transpose1d_output_padding_groups_dilation():
    m = nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2,
                           dilation=2).eval()
    assert_exports(m, (torch.randn(2, 4, 7),))


def test_conv_transpose_functional_runtime_weight():
    m = Fn(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1,
                                              groups=2))
    assert_exports(m, (torch.randn(1, 4, 5, 5), torch.randn(4, 3, 3, 3), torch.randn(6)))


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


def test_pad():
    assert_cases(PADS, (torch.randn(2, 3, 5, 6),))


def test_pad_int_tensor_constant():
    assert_cases({"pad int value 7": lambda x: F.pad(x, (1, 2), value=7),
                  "pad int default": lambda x: F.pad(x, (0, 1, 1, 0))},
                 (torch.arange(12).reshape(3, 4),))


@settings(max_examples=10, deadline=None, derandomize=True)
@given(data=st.data())
def test_conv_transpose_geometry_property(data):
    """Random stride/padding/output_padding/dilation/groups for conv_transpose1d (including
    output_padding > padding, where PyTorch's last positions hold only the bias)."""
    groups = data.draw(st.sampled_from([1, 2]), label="groups")
    k = data.draw(st.integers(1, 4), label="kernel")
    s = data.draw(st.integers(1, 3), label="stride")
    d = data.draw(st.integers(1, 2), label="dilation")
    p = data.draw(st.integers(0, d * (k - 1)), label="padding")
    op = data.draw(st.integers(0, max(s, d) - 1), label="output_padding")
    m = nn.ConvTranspose1d(2 * groups, 3 * groups, k, s, p, op, groups, dilation=d)
    length = data.draw(st.integers(1, 6), label="length")
    if (length - 1) * s - 2 * p + d * (k - 1) + op + 1 <= 0:
        return
    assert_cases({"conv_transpose1d": m}, (torch.randn(2, 2 * groups, length),))
