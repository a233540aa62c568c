"""``as_strided`` / ``as_strided_scatter`` read and write the memory of their input. t2n
keeps no storage, so it accepts inputs whose elements tile one block of memory: contiguous
ones and permuted views of contiguous ones (a ``transpose``, a ``reshape`` that merged axes
without copying, size-1 axes with any stride), read in memory order. Longformer's and LED's
overlapping chunks are ``as_strided`` on such a permuted view. Torch eager vs tract."""

import pytest
import torch

from t2n.errors import UnsupportedOperatorsError
from t2n.testing import assert_exports
from t2n.testing import FunctionModule as Fn


def _chunks(x):
    """Longformer's ``_chunk``: [B*H, S, D] cut into overlapping windows of 2w (w = 2)."""
    x = x.view(x.size(0), x.size(1) // 4, 4, x.size(2))
    size = list(x.size())
    size[1] = size[1] * 2 - 1
    stride = list(x.stride())
    stride[1] //= 2
    return x.as_strided(size=size, stride=stride)


CASES = {
    "contiguous": lambda x: (x * 1).as_strided((3, 4), (2, 1)),
    "transposed": lambda x: x.transpose(0, 1).as_strided((2, 5), (3, 2)),
    "permuted_3d": lambda x: x.reshape(2, 3, 4).permute(2, 0, 1).as_strided((4, 3), (1, 4)),
    # seq-first projection viewed as batch*heads without a copy, then chunked
    "merged_heads_chunks": lambda x: _chunks(
        x.reshape(8, 2, 2, 3).transpose(0, 1).transpose(1, 2).reshape(4, 8, 3)),
    "size1_axis_odd_stride": lambda x: x.reshape(4, 6)[:1].t().as_strided((2, 3), (3, 1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_as_strided_on_dense_views(name):
    n = 96 if name == "merged_heads_chunks" else 24
    x = torch.randn(n).reshape(-1, 4 if n == 24 else 8)
    if name == "merged_heads_chunks":
        x = x.reshape(-1)
    assert_exports(Fn(CASES[name]), (x,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=["f32", "i64"])
def test_as_strided_scatter_keeps_the_permuted_layout(dtype):
    def f(x, src):
        return torch.as_strided_scatter(x.t() * 1 if dtype.is_floating_point else x.t(),
                                        src, (2, 3), (1, 4))
    x = torch.arange(24).reshape(6, 4).to(dtype)
    src = (torch.arange(6).reshape(2, 3) * -1).to(dtype)
    assert_exports(Fn(f), (x, src))


def test_as_strided_on_overlapping_input_is_refused(tmp_path):
    import t2n

    def f(x):  # expand: stride 0, the elements do not tile memory
        return x.expand(3, 4).as_strided((2, 2), (1, 1))
    with pytest.raises(UnsupportedOperatorsError, match="as_strided.*do not tile memory"):
        t2n.export(Fn(f), (torch.randn(1, 4),), tmp_path / "m.nnef")
