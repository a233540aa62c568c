"""embedding_bag: golden examples (seed-ops.md §1), every mode x input form x option
against PyTorch in tract, bag layouts with empty and padding-only bags, one archive at
several (num_bags, num_indices) sizes, unsupported extra outputs, constant op count."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
import torch
import torch.nn as nn

import t2n
from t2n.errors import UnsupportedOperatorsError
from t2n.testing import assert_exports
from t2n.tract_runner import run_in_tract

TABLE = torch.tensor([[-0.2, -0.6], [-0.1, -0.4], [-1.9, -1.8], [-1., 1.5], [0.8, -0.7]])
MODES = ["sum", "mean", "max"]
DYN = {"indices": {0: "N"}, "offsets": {0: "B"}}


class Bags(nn.Module):
    """nn.EmbeddingBag with runtime indices, offsets and (optional) per-sample weights."""

    def __init__(self, num=10, dim=3, weight=None, **kw):
        super().__init__()
        self.e = nn.EmbeddingBag(num, dim, **kw)
        if weight is not None:
            self.e.weight.data.copy_(weight)

    def forward(self, indices, offsets=None, weights=None):
        return self.e(indices, offsets, per_sample_weights=weights)


class ConstOffsets(nn.Module):
    """Offsets fixed in the model (a buffer), indices at run time."""

    def __init__(self, offsets, **kw):
        super().__init__()
        self.e = nn.EmbeddingBag(10, 3, **kw)
        self.register_buffer("offsets", offsets)

    def forward(self, indices, *weights):
        return self.e(indices, self.offsets, per_sample_weights=weights[0] if weights else None)


def _tract(path, inputs):
    return run_in_tract(path, [np.asarray(x) for x in inputs])


# ------------------------------------------------------------------ golden examples
def test_golden_embedding_bag_packed_sum():
    """EmbeddingBagPackedSum: 2-D indices, per-sample weights 0.5."""
    model = Bags(5, 2, weight=TABLE, mode="sum").eval()
    idx = torch.tensor([[0, 2], [1, 2], [3, 4]])
    w = torch.full((3, 2), 0.5)
    expected = np.array([[-1.05, -1.2], [-1., -1.1], [-0.1, 0.4]], dtype=np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.nnef")
        t2n.export(_Packed(model), (idx, w), path, check=True)
        got = _tract(path, [idx, w])[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


class _Packed(nn.Module):
    def __init__(self, bags):
        super().__init__()
        self.bags = bags

    def forward(self, indices, weights):
        return self.bags(indices, None, weights)


def test_golden_embedding_segments_sum_offsets():
    """EmbeddingSegmentsSum as embedding_bag with runtime offsets: segment_ids [0, 0, 2, 2]
    -> offsets [0, 2, 2]; the empty segment 1 gives zeros (embedding_bag has no
    default_index)."""
    model = Bags(5, 2, weight=TABLE, mode="sum").eval()
    args = (torch.tensor([0, 2, 3, 4]), torch.tensor([0, 2, 2]), torch.full((4,), 0.5))
    expected = np.array([[-1.05, -1.2], [0., 0.], [-0.1, 0.4]], dtype=np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.nnef")
        t2n.export(model, args, path, check=True)
        got = _tract(path, args)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


class _SegmentsWithDefault(nn.Module):
    """EmbeddingSegmentsSum with default_index: embedding_bag, then empty bags (zero length
    from the offsets) take the default row."""

    def __init__(self, default_index):
        super().__init__()
        self.e = nn.EmbeddingBag(5, 2, mode="sum", include_last_offset=True)
        self.e.weight.data.copy_(TABLE)
        self.default_index = default_index

    def forward(self, indices, offsets, weights):
        pooled = self.e(indices, offsets, per_sample_weights=weights)
        empty = (offsets[1:] - offsets[:-1]) == 0
        return torch.where(empty[:, None], self.e.weight[self.default_index], pooled)


def test_golden_embedding_segments_sum_default_index():
    args = (torch.tensor([0, 2, 3, 4]), torch.tensor([0, 2, 2, 4]), torch.full((4,), 0.5))
    expected = np.array([[-1.05, -1.2], [-0.2, -0.6], [-0.1, 0.4]], dtype=np.float32)
    model = _SegmentsWithDefault(0).eval()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.nnef")
        t2n.export(model, args, path, check=True)
        got = _tract(path, args)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


class _SegmentsIndexAdd(nn.Module):
    """EmbeddingSegmentsSum written out: index_add of weighted rows, where for the default."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(TABLE.clone())

    def forward(self, indices, segment_ids, weights, default_index):
        rows = self.table[indices] * weights[:, None]
        out = torch.zeros(3, 2).index_add(0, segment_ids, rows)
        count = torch.zeros(3).index_add(0, segment_ids, torch.ones(indices.shape[0]))
        return torch.where(count[:, None] == 0, self.table[default_index], out)


def test_golden_embedding_segments_sum_index_add():
    args = (torch.tensor([0, 2, 3, 4]), torch.tensor([0, 0, 2, 2]), torch.full((4,), 0.5),
            torch.tensor([0]))
    expected = np.array([[-1.05, -1.2], [-0.2, -0.6], [-0.1, 0.4]], dtype=np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.nnef")
        t2n.export(_SegmentsIndexAdd(), args, path, check=True)
        got = _tract(path, args)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
