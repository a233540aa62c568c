"""The ``broadcast_axes`` pass: products whose operand has a size-1 axis against a larger one
are written so that the operand lacks the axis (tract 0.23 cannot load the shared form when
a reshape merged axes into it: MaxViT's grid/window partitions)."""

import pytest
import torch

from t2n.testing import FunctionModule, assert_exports


class GridPartitionLinear(torch.nn.Module):
    """MaxViT's partition: [B, H, W, C] -> [B*nh*nw, p, p, C] (one merge into the leading
    axis), then a channels-last linear on the 4-d windows."""

    def __init__(self, p=2, c=8, grid=False):
        super().__init__()
        self.p, self.grid = p, grid
        self.qkv = torch.nn.Linear(c, 3 * c)

    def forward(self, x):
        b, h, w, c = x.shape
        p = self.p
        if self.grid:  # grid attention: the partition strides over the image
            x = x.view(b, p, h // p, p, w // p, c).permute(0, 2, 4, 1, 3, 5)
        else:
            x = x.view(b, h // p, p, w // p, p, c).permute(0, 1, 3, 2, 4, 5)
        windows = x.reshape(-1, p, p, c)
        return self.qkv(windows).relu()


@pytest.mark.parametrize("grid", [False, True], ids=["window", "grid"])
def test_partition_then_linear_loads_and_matches(grid):
    assert_exports(GridPartitionLinear(grid=grid), (torch.randn(1, 16, 16, 8),))


def test_partition_then_linear_dynamic_batch():
    assert_exports(GridPartitionLinear(), (torch.randn(2, 8, 8, 8),), input_names=["x"],
                   dynamic_axes={"x": {0: "B"}},
                   more_args=[(torch.randn(1, 8, 8, 8),), (torch.randn(3, 8, 8, 8),)])


def batched_broadcast(x, y):  # size 1 against size n in both directions
    windows = x.reshape(1, 4, 4, 3, 5).permute(0, 1, 2, 3, 4).reshape(16, 1, 3, 5)
    return torch.matmul(windows, y)  # [16, 1, 3, 5] @ [1, 2, 5, 6] -> [16, 2, 3, 6]


def test_batched_matmul_broadcast_both_ways():
    result = assert_exports(FunctionModule(batched_broadcast),
                            (torch.randn(4, 4, 3, 5), torch.randn(1, 2, 5, 6)))
    assert "matmul" not in result.op_histogram


def test_equal_batch_axes_keep_matmul():
    result = assert_exports(FunctionModule(torch.matmul),
                            (torch.randn(2, 3, 4, 5), torch.randn(2, 3, 5, 6)))
    assert result.op_histogram.get("matmul") == 1


def test_attention_with_broadcast_key():
    def attn(q, k, v):  # one key/value head shared by all query heads (multi-query)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    q = torch.randn(6, 4, 5, 8).reshape(2, 3, 4, 5, 8).reshape(6, 4, 5, 8)
    assert_exports(FunctionModule(attn), (q, torch.randn(6, 1, 5, 8), torch.randn(6, 1, 5, 8)))


class HalfPartition(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = GridPartitionLinear().half()

    def forward(self, x):
        return self.inner(x.half()).float()


def test_half_precision_linear():
    assert_exports(HalfPartition(), (torch.randn(1, 8, 8, 8),), rtol=1e-2, atol=1e-2)
