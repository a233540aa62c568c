"""Integer convolutions, exact as PyTorch computes them (tract convolves floats only: t2n
writes them as gathers and one integer product): conv1d/2d/3d with groups, stride,
dilation, padding (numbers, 'same', a reflect pad before), unbatched, int64 past 2**64
(wrap-around), int32 and uint8; conv_transpose1d/2d/3d (int64, PyTorch's only integer
transposed kernel) with groups, output_padding and dilation; integer average pooling
(PyTorch's truncating division by the window's divisor)."""

import torch
import torch.nn.functional as F

from opcases import assert_cases


def test_integer_convolutions_exact():
    g = torch.Generator().manual_seed(0)
    x1 = torch.randint(-50, 50, (2, 4, 9), generator=g)
    w1 = torch.randint(-50, 50, (6, 2, 3), generator=g)
    x2 = torch.randint(-9, 9, (1, 4, 6, 7), generator=g)
    w2 = torch.randint(-9, 9, (4, 2, 2, 3), generator=g)
    x3 = torch.randint(-5, 5, (1, 2, 4, 5, 3), generator=g)
    w3 = torch.randint(-5, 5, (2, 1, 2, 2, 2), generator=g)
    b = torch.randint(-100, 100, (6,), generator=g)
    big = torch.randint(2 ** 40, 2 ** 41, (1, 2, 5), generator=g)
    wt = torch.randint(-9, 9, (4, 3, 3), generator=g)  # transposed: [C_in, C_out/groups, k]
    w1b = w1[:, :, :2].repeat(1, 2, 1)
    assert_cases({
        "conv1d groups bias": lambda x1, w1, x2, w2, x3, w3, b, big, wt: F.conv1d(
            x1, w1, b, groups=2),
        "conv1d stride dilation padding": lambda x1, w1, x2, w2, x3, w3, b, big, wt: F.conv1d(
            x1, w1b, None, stride=2, padding=3, dilation=2),
        "conv1d same": lambda x1, w1, x2, w2, x3, w3, b, big, wt: F.conv1d(
            x1, w1, padding="same", groups=2),
        "conv1d unbatched": lambda x1, w1, x2, w2, x3, w3, b, big, wt: F.conv1d(
            x1[0], w1, groups=2),
        "conv1d wraps": lambda x1, w1, x2, w2, x3, w3, b, big, wt: F.conv1d(
            big, big[:, :, :3].repeat(3, 1, 1)),
        "conv2d": lambda x1, w1, x2, w2, x3, w3, b, big, wt: F.conv2d(
            x2, w2, b[:4], stride=(2, 1), padding=(1, 2), groups=2),
        "conv2d reflect pad": lambda x1, w1, x2, w2, x3, w3, b, big, wt: F.conv2d(
            F.pad(x2, (1, 1, 2, 0), mode="reflect"), w2, groups=2, dilation=(1, 2)),
        "conv3d": lambda x1, w1, x2, w2, x3, w3, b, big, wt: F.conv3d(
            x3, w3, None, padding=1, groups=2),
        "conv1d int32 wraps": lambda x1, w1, x2, w2, x3, w3, b, big, wt: F.conv1d(
            x1.int() * 1000000, w1.int() * 1000, groups=2),
        "conv1d uint8": lambda x1, w1, x2, w2, x3, w3, b, big, wt: F.conv1d(
            (x1 + 50).to(torch.uint8), (w1 + 50).to(torch.uint8), groups=2),
        "conv_transpose1d": lambda x1, w1, x2, w2, x3, w3, b, big, wt: F.conv_transpose1d(
            x1, wt, b, stride=2, padding=1, output_padding=1, groups=2),
        "conv_transpose1d dilation": lambda x1, w1, x2, w2, x3, w3, b, big, wt:
            F.conv_transpose1d(x1, wt, None, stride=3, padding=4, dilation=2,
                               output_padding=2),
        "conv_transpose2d": lambda x1, w1, x2, w2, x3, w3, b, big, wt: F.conv_transpose2d(
            x2, w2, None, stride=2, padding=(0, 1), groups=2),
        "conv_transpose3d": lambda x1, w1, x2, w2, x3, w3, b, big, wt: F.conv_transpose3d(
            x3, w3, stride=(1, 2, 1), groups=2),
    }, (x1, w1, x2, w2, x3, w3, b, big, wt))


def test_integer_average_pooling_exact():
    g = torch.Generator().manual_seed(0)
    x1 = torch.randint(-50, 50, (2, 3, 9), generator=g)
    x2 = torch.randint(-50, 50, (2, 3, 7, 6), generator=g)
    x3 = torch.randint(-50, 50, (1, 2, 5, 4, 6), generator=g)
    big = torch.randint(2 ** 61, 2 ** 62, (1, 2, 6), generator=g)
    assert_cases({
        "1d truncates": lambda a, b, c, d: F.avg_pool1d(a, 2),
        "1d padding ceil": lambda a, b, c, d: F.avg_pool1d(a, 3, 2, 1, ceil_mode=True),
        "1d padding not counted": lambda a, b, c, d: F.avg_pool1d(a, 3, 2, 1,
                                                                   count_include_pad=False),
        "1d unbatched": lambda a, b, c, d: F.avg_pool1d(a[0], 4, 3, 2, ceil_mode=True,
                                                        count_include_pad=False),
        "2d ceil": lambda a, b, c, d: F.avg_pool2d(b, (3, 2), (2, 1), (1, 1), ceil_mode=True),
        "2d divisor_override": lambda a, b, c, d: F.avg_pool2d(b, 3, 2, 1, divisor_override=4),
        "2d ceil padding not counted": lambda a, b, c, d: F.avg_pool2d(
            b, 2, 3, 1, ceil_mode=True, count_include_pad=False),
        "3d": lambda a, b, c, d: F.avg_pool3d(c, 2, (1, 2, 3), 1, ceil_mode=True),
        "3d padding not counted": lambda a, b, c, d: F.avg_pool3d(c, 3, 2, 1,
                                                                   count_include_pad=False),
        "sum wraps": lambda a, b, c, d: F.avg_pool1d(d, 3, 1),
        "local_response_norm": lambda a, b, c, d: F.local_response_norm(b, 3),
    }, (x1, x2, x3, big))
