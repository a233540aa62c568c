"""``aten::col2im`` (``F.fold`` / ``nn.Fold``): one grouped transposed convolution, whatever
the sizes, for every kernel/dilation/padding/stride combination PyTorch accepts."""

import pytest
import torch
import torch.nn.functional as F

import t2n
from t2n.errors import UnsupportedOperatorsError
from t2n.testing import FunctionModule, assert_exports


def _blocks(size, kernel, dilation, padding, stride):
    return [(s + 2 * p - d * (k - 1) - 1) // st + 1
            for s, k, d, p, st in zip(size, kernel, dilation, padding, stride)]


CASES = [  # output_size, kernel, dilation, padding, stride
    ((6, 6), (3, 3), (1, 1), (1, 1), (2, 2)),  # VOLO's outlook attention
    ((5, 7), (2, 3), (1, 1), (0, 0), (1, 1)),  # overlapping, rectangular
    ((8, 8), (2, 2), (1, 1), (0, 0), (2, 2)),  # non-overlapping tiles (inverse of unfold)
    ((7, 9), (3, 2), (2, 1), (1, 2), (2, 3)),  # dilation, uneven padding and strides
    ((9, 8), (2, 2), (1, 1), (0, 0), (3, 3)),  # rows/cols no block reaches (zero-padded)
    ((10, 6), (3, 3), (2, 2), (0, 1), (3, 2)),  # gaps with dilation
    ((4, 4), (1, 1), (1, 1), (0, 0), (1, 1)),  # 1x1 blocks: a reshape
    ((6, 5), (3, 3), (1, 1), (2, 2), (1, 1)),  # padding wider than the stride
]


@pytest.mark.parametrize("size,kernel,dilation,padding,stride", CASES,
                         ids=[f"o{c[0][0]}x{c[0][1]}-k{c[1][0]}{c[1][1]}-d{c[2][0]}{c[2][1]}"
                              f"-p{c[3][0]}{c[3][1]}-s{c[4][0]}{c[4][1]}" for c in CASES])
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
def test_fold_matches_torch(size, kernel, dilation, padding, stride, batched):
    lh, lw = _blocks(size, kernel, dilation, padding, stride)
    c = 3
    shape = (2, c * kernel[0] * kernel[1], lh * lw) if batched else \
        (c * kernel[0] * kernel[1], lh * lw)
    fn = FunctionModule(lambda x: F.fold(x, size, kernel, dilation, padding, stride))
    result = assert_exports(fn, (torch.randn(*shape),))
    assert result.op_histogram.get("deconv") == 1


def test_unfold_then_fold_roundtrip_and_module_form():
    fold = torch.nn.Fold((8, 6), (3, 2), padding=1, stride=(2, 1))
    unfold = torch.nn.Unfold((3, 2), padding=1, stride=(2, 1))
    fn = FunctionModule(lambda x: fold(unfold(x) * 0.5) + x)
    assert_exports(fn, (torch.randn(2, 4, 8, 6),))


def test_op_count_does_not_grow_with_the_image():
    counts = []
    for side in (8, 32):
        fn = FunctionModule(lambda x, s=side: F.fold(x, (s, s), 3, padding=1, stride=2))
        lb = (side + 2 - 3) // 2 + 1
        counts.append(assert_exports(fn, (torch.randn(1, 2 * 9, lb * lb),)).op_count)
    assert counts[0] == counts[1]


def test_dynamic_batch():
    fn = FunctionModule(lambda x: F.fold(x, (6, 6), 3, padding=1, stride=2))
    assert_exports(fn, (torch.randn(2, 18, 9),), input_names=["x"],
                   dynamic_axes={"x": {0: "B"}},
                   more_args=[(torch.randn(1, 18, 9),), (torch.randn(5, 18, 9),)])


def test_half_precision():
    fn = FunctionModule(lambda x: F.fold(x.half(), (6, 6), 3, padding=1, stride=2).float())
    assert_exports(fn, (torch.randn(2, 18, 9),), rtol=1e-2, atol=1e-2)


FOLD_REFUSED = {  # output_size=(6, 6) fixes the block count L to 9: each capture's reason
    "trace": (UnsupportedOperatorsError, "col2im"),
    "export": (t2n.UsageError, r"frozen by the model.*\(x axis 2 = L\)"),
}


def test_dynamic_block_count_is_refused_naming_the_op(tmp_path, capture):
    fn = FunctionModule(lambda x: F.fold(x, (6, 6), 3, padding=1, stride=2))
    error, reason = FOLD_REFUSED[capture]
    with pytest.raises(error, match=reason):
        t2n.export(fn, (torch.randn(2, 18, 9),), str(tmp_path / "m.nnef"),
                   input_names=["x"], dynamic_axes={"x": {2: "L"}}, capture=capture)
    assert not (tmp_path / "m.nnef").exists()


class _OutlookBlock(torch.nn.Module):
    """VOLO's outlook attention (timm ``OutlookAttention``), with a dilation and a
    rectangular kernel too: unfold the values into ``k x k`` windows, weigh each window
    with a softmax over logits computed from a ceil-mode average pool of the input, fold
    the windows back (overlaps summing). The unfold grid, the pooled grid and the fold's
    output size must agree, as in VOLO."""

    def __init__(self, dim, heads, kernel, padding, stride, dilation, grid):
        super().__init__()
        self.heads, self.kernel, self.padding = heads, kernel, padding
        self.stride, self.dilation, self.grid = stride, dilation, grid
        self.taps = kernel[0] * kernel[1]
        self.v = torch.nn.Linear(dim, dim)
        self.attn = torch.nn.Linear(dim, heads * self.taps * self.taps)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):  # [B, H, W, C]
        b, h, w, c = x.shape
        n = self.grid[0] * self.grid[1]
        v = F.unfold(self.v(x).permute(0, 3, 1, 2), self.kernel, self.dilation, self.padding,
                     self.stride)
        v = v.reshape(b, self.heads, c // self.heads, self.taps, n).permute(0, 1, 4, 3, 2)
        a = F.avg_pool2d(x.permute(0, 3, 1, 2), self.stride, self.stride, ceil_mode=True)
        a = self.attn(a.permute(0, 2, 3, 1)).reshape(b, n, self.heads, self.taps, self.taps)
        a = (a.permute(0, 2, 1, 3, 4) * (c // self.heads) ** -0.5).softmax(dim=-1)
        y = (a @ v).permute(0, 1, 4, 3, 2).reshape(b, c * self.taps, n)
        y = F.fold(y, (h, w), self.kernel, self.dilation, self.padding, self.stride)
        return self.proj(y.permute(0, 2, 3, 1))


def _outlook_grid(size, kernel, padding, stride, dilation):
    grid = _blocks(size, kernel, dilation, padding, stride)
    pooled = [-(-s // st) for s, st in zip(size, stride)]  # ceil-mode pool, window = stride
    assert grid == pooled, (size, kernel, padding, stride, dilation, grid, pooled)
    return grid


OUTLOOK_CASES = [  # image (H, W), kernel, padding, stride, dilation
    ((8, 8), (3, 3), (1, 1), (2, 2), (1, 1)),  # VOLO-D1's first stage at 64x64
    ((7, 9), (3, 3), (1, 1), (2, 2), (1, 1)),  # odd sizes: the ceil-mode pool's last window
    ((9, 10), (3, 3), (1, 1), (3, 3), (1, 1)),  # stride 3, a partial last pool window
    ((5, 6), (3, 3), (1, 1), (1, 1), (1, 1)),  # stride 1: every position a window
    ((7, 8), (5, 5), (2, 2), (2, 2), (1, 1)),  # a wider window
    ((8, 7), (3, 3), (2, 2), (2, 2), (2, 2)),  # dilated windows
    ((8, 6), (3, 2), (1, 0), (2, 2), (1, 1)),  # rectangular kernel, padding on one axis
    ((8, 8), (1, 1), (0, 0), (2, 2), (1, 1)),  # rows no window reaches (fold zero-pads)
    ((8, 9), (2, 2), (0, 0), (3, 3), (1, 1)),  # non-overlapping windows with gaps
]


@pytest.mark.parametrize("draw", [0, 1, 2])
@pytest.mark.parametrize("size,kernel,padding,stride,dilation", OUTLOOK_CASES,
                         ids=[f"i{c[0][0]}x{c[0][1]}-k{c[1][0]}{c[1][1]}-p{c[2][0]}{c[2][1]}"
                              f"-s{c[3][0]}{c[3][1]}-d{c[4][0]}{c[4][1]}"
                              for c in OUTLOOK_CASES])
def test_outlook_attention_unfold_softmax_fold(size, kernel, padding, stride, dilation, draw):
    """Issue #29: VOLO's outlook attention (unfold -> per-window softmax attention ->
    fold, logits from a ceil-mode pool) under several weight draws, the weights drawn as
    the zoo draws them (matrices N(0, 1/fan_in), biases N(0, 0.1)) and with logits large
    enough that the softmax is far from uniform."""
    grid = _outlook_grid(size, kernel, padding, stride, dilation)
    gen = torch.Generator().manual_seed(100 + draw)
    block = _OutlookBlock(12, 3, kernel, padding, stride, dilation, grid).eval()
    with torch.no_grad():
        for lin in (block.v, block.attn, block.proj):
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=gen)
                             * lin.in_features ** -0.5)
            lin.bias.copy_(torch.randn(lin.bias.shape, generator=gen) * 0.1)
        block.attn.weight.mul_(4.0)  # sharp, draw-dependent window weights
    x = torch.randn(2, *size, 12, generator=gen)
    with torch.no_grad():
        y = block(x)
    assert y.abs().max() > 0.1  # every block contributes: the check cannot pass on zeros
    assert_exports(block, (x,))
