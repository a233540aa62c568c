"""In-place ops and writes into views: the exported graph computes PyTorch's final values."""

import pytest
import torch

from t2n.testing import assert_exports


# every test through both front ends (torch.jit.trace, torch.export): see conftest.capture
pytestmark = pytest.mark.usefixtures("capture")

class WritesIntoViews(torch.nn.Module):
    def forward(self, x, z):
        y = x.clone()
        y[:, 1:3] = z
        y[0] = 7.0
        y.narrow(1, 0, 1).copy_(x[:, 3:4] * 10)
        v = y[:, 2:]  # a view taken before the next write sees that write
        y += 1
        return y, v, y.view(-1, 2)


def test_slice_select_narrow_writes_and_stale_views():
    assert_exports(WritesIntoViews(), (torch.randn(3, 4), torch.randn(3, 2)))


class TransposedViewWrite(torch.nn.Module):
    def forward(self, x):
        y = x.clone()
        y.t()[1] = -1.0  # writes column 1 of y
        y.unsqueeze(0)[0, 2, :2] = 5.0
        return y


def test_write_through_transpose_and_unsqueeze():
    assert_exports(TransposedViewWrite(), (torch.randn(4, 3),))


class InplaceChain(torch.nn.Module):
    def forward(self, x):
        y = x * 1
        y.mul_(2).add_(3)
        y.clamp_(min=0.5)
        return y


def test_inplace_chain_rebinds_the_tensor():
    assert_exports(InplaceChain(), (torch.randn(2, 5),))
