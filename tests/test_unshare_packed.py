"""The unshare_packed pass: a product with a large shared weight reads slices of it, so tract
packs the weight once at load (its constant folder skips shared constants over 4 MiB, and
would re-pack them at every run).

Each case exports a model whose weight is shared (tied embedding and head, a weight as the
left operand of a product and read by another op), in float32 and with f16 weights: tract's
optimised model must pack only the activation at run time, and the outputs must match
PyTorch. (Without the pass, tract also packs the shared weight at every run.)"""

from __future__ import annotations

import pytest
import torch

import t2n
from t2n.testing import tract_ops

VOCAB, DIM = 11000, 96  # 4.2 MB of float32: just over tract's 4 MiB fold budget


class TiedLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, DIM)
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.emb(ids)))


class SharedLinear(torch.nn.Module):
    """One linear applied twice (shared layers, ALBERT-style)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(1024, 1100)
        self.mix = torch.nn.Linear(1100, 1024)

    def forward(self, x):
        return self.a(torch.relu(self.mix(self.a(x))))


class LeftWeight(torch.nn.Module):
    """``W @ x`` with ``W`` also read by another op: the weight as the left operand."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(1100, 1000) / 32)

    def forward(self, x):  # x: [1000, 3]
        return self.w @ x, self.w * x[0, 0]


CASES = {
    "tied_embedding_head": (TiedLM, lambda: (torch.randint(0, VOCAB, (1, 7)),)),
    "weight_as_left_operand": (LeftWeight, lambda: (torch.randn(1000, 3),)),
}


@pytest.mark.parametrize("case,weights", [("tied_embedding_head", "f32"),
                                          ("tied_embedding_head", "f16"),
                                          ("weight_as_left_operand", "f32")])
def test_shared_weight_is_packed_once_at_load(case, weights, tmp_path):
    """Each model has one product whose other operand is an activation: with every weight
    packed at load, tract runs exactly one packing (the activation's, which the two halves
    share); an f16 table is cast back at load, not at every run."""
    make, args = CASES[case]
    torch.manual_seed(0)
    path = tmp_path / "shared.nnef.tar"
    result = t2n.export(make().eval(), args(), str(path), weights=weights, check=True,
                        quiet=True)
    assert result.op_histogram.get("slice", 0) >= 2, f"{case}: no product reads slices"
    ops = tract_ops(path)
    assert ops.get("OptMatMulPack", 0) == 1, (
        f"{case} ({weights}): tract packs a weight at every run: {ops}")
    assert "Cast" not in ops, f"{case} ({weights}): tract casts a weight at every run: {ops}"


def test_weight_of_two_products_is_left_alone(tmp_path):
    """Shared layers: tract merges identical slices back into one shared constant, and a
    packed copy per product is the memory its fold rule saves; the graph is not split."""
    result = t2n.export(SharedLinear().eval(), (torch.randn(2, 1024),),
                        str(tmp_path / "twice.nnef.tar"), check=True, quiet=True)
    assert "slice" not in result.op_histogram and "concat" not in result.op_histogram


def test_small_shared_weight_is_left_alone(tmp_path):
    """Under the 4 MiB budget tract folds the packing itself: the graph is not split."""
    class Small(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(1000, 64)

        def forward(self, ids):
            return self.emb(ids) @ self.emb.weight.T

    result = t2n.export(Small().eval(), (torch.randint(0, 1000, (1, 5)),),
                        str(tmp_path / "small.nnef.tar"), check=True, quiet=True)
    assert "slice" not in result.op_histogram and "concat" not in result.op_histogram
