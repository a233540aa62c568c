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


def test_dynamic_block_count_is_refused_naming_the_op(tmp_path):
    fn = FunctionModule(lambda x: F.fold(x, (6, 6), 3, padding=1, stride=2))
    with pytest.raises(UnsupportedOperatorsError, match="col2im"):
        t2n.export(fn, (torch.randn(2, 18, 9),), str(tmp_path / "m.nnef"),
                   input_names=["x"], dynamic_axes={"x": {2: "L"}})
    assert not (tmp_path / "m.nnef").exists()
