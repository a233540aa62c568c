"""The unshare_packed pass: a product with a large shared weight reads slices of it, so tract
packs the weight once at load (its constant folder skips shared constants over 4 MiB, and
would re-pack them at every run).

Each case exports a model whose weight is shared (tied embedding and head, a weight as the
left operand of a product and read by another op) and its twin with distinct weights: tract's optimised
model must run no more packing nodes (``OptMatMulPack``) than the twin's, whose weights are
all packed at load (the halves of a split product share their activation's packing), and
the outputs must match PyTorch."""

from __future__ import annotations

import pytest
import torch

import t2n
from t2n.testing import tract_ops

VOCAB, DIM = 11000, 96  # 4.2 MB of float32: just over tract's 4 MiB fold budget


class TiedLM(torch.nn.Module):
    def __init__(self, tied: bool = True):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, DIM)
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)
        if tied:
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

    def __init__(self, shared: bool = True):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(1100, 1000) / 32)
        self.v = None if shared else torch.nn.Parameter(torch.randn(1100, 1000) / 32)

    def forward(self, x):  # x: [1000, 3]
        return self.w @ x, (self.w if self.v is None else self.v) * x[0, 0]


CASES = {
    "tied_embedding_head": (TiedLM, lambda: (torch.randint(0, VOCAB, (1, 7)),)),
    "weight_as_left_operand": (LeftWeight, lambda: (torch.randn(1000, 3),)),
}


@pytest.mark.parametrize("case", CASES)
def test_shared_weight_is_packed_once_at_load(case, tmp_path):
    make, args = CASES[case]
    torch.manual_seed(0)
    model, x = make(True).eval(), args()
    result = t2n.export(model, x, str(tmp_path / "shared.nnef.tar"), check=True, quiet=True)
    assert result.op_histogram.get("slice", 0) >= 2, f"{case}: no product reads slices"
    twin = make(False).eval()
    t2n.export(twin, x, str(tmp_path / "twin.nnef.tar"), quiet=True)
    shared, untied = tract_ops(tmp_path / "shared.nnef.tar"), tract_ops(tmp_path / "twin.nnef.tar")
    packs, twin_packs = shared.get("OptMatMulPack", 0), untied.get("OptMatMulPack", 0)
    assert packs <= twin_packs, (
        f"{case}: tract packs {packs - twin_packs} more operand(s) at every run than for the "
        f"untied twin (shared: {shared}; twin: {untied})")


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


def test_tied_head_with_f16_weights_is_cast_and_packed_at_load(tmp_path):
    """weights="f16": the table is stored once in f16, cast back in foldable pieces, and
    the head's halves are packed at load as in float32."""
    torch.manual_seed(0)
    x = (torch.randint(0, VOCAB, (1, 7)),)
    t2n.export(TiedLM(True).eval(), x, str(tmp_path / "tied.nnef.tar"), weights="f16",
               check=True, quiet=True)
    t2n.export(TiedLM(False).eval(), x, str(tmp_path / "twin.nnef.tar"), weights="f16",
               quiet=True)
    tied, twin = tract_ops(tmp_path / "tied.nnef.tar"), tract_ops(tmp_path / "twin.nnef.tar")
    assert "Cast" not in tied, f"tract casts a weight at every run: {tied}"
    assert tied.get("OptMatMulPack", 0) <= twin.get("OptMatMulPack", 0), (tied, twin)
