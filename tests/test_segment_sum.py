"""EmbeddingSegmentsSum (OpenVINO opset 3, seed-ops.md section 1) written in PyTorch with
index_add + where: the golden example reproduced by tract."""

import os
import tempfile

import numpy as np
import torch

import t2n
from t2n.testing import assert_exports
from t2n.check.tract_runner import run_in_tract

TABLE = [[-0.2, -0.6], [-0.1, -0.4], [-1.9, -1.8], [-1., 1.5], [0.8, -0.7]]
GOLDEN = [[-1.05, -1.2], [-0.2, -0.6], [-0.1, 0.4]]


class EmbeddingSegmentsSum(torch.nn.Module):
    """Row s = sum of weights[k] * table[indices[k]] over k with segment_ids[k] == s; an
    empty segment holds table[default_index]."""

    def __init__(self, table, num_segments):
        super().__init__()
        self.table = torch.nn.Parameter(torch.as_tensor(table, dtype=torch.float32))
        self.num_segments = num_segments

    def forward(self, indices, segment_ids, weights, default_index):
        rows = self.table.index_select(0, indices) * weights.unsqueeze(1)
        d = self.table.shape[1]
        sums = torch.zeros(self.num_segments, d).index_add(0, segment_ids, rows)
        hit = torch.zeros(self.num_segments).index_fill(0, segment_ids, 1.0) > 0
        default = self.table.index_select(0, default_index.reshape(1))
        return torch.where(hit.unsqueeze(1), sums, default)


def _golden_inputs():
    return (torch.tensor([0, 2, 3, 4]), torch.tensor([0, 0, 2, 2]), torch.full((4,), 0.5),
            torch.tensor(0))


def test_golden_example_in_tract():
    model = EmbeddingSegmentsSum(TABLE, 3).eval()
    args = _golden_inputs()
    expected = np.array(GOLDEN, dtype=np.float32)
    np.testing.assert_allclose(model(*args).detach().numpy(), expected, rtol=0, atol=1e-7)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "segsum.nnef.tgz")
        t2n.export(model, args, path, check=True)
        (out,) = run_in_tract(path, [a.numpy() for a in args])
    assert out.shape == (3, 2)
    # -0.2*0.5 + -1.9*0.5 etc. in f32: equal to the golden numbers to the last f32 ulp
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-7)


def test_other_inputs_and_dynamic_number_of_indices():
    model = EmbeddingSegmentsSum(torch.randn(6, 3), 4).eval()
    args = (torch.tensor([5, 0, 0, 2]), torch.tensor([1, 1, 3, 3]), torch.rand(4), torch.tensor(2))
    assert_exports(model, args,
                   dynamic_axes={"input_0": {0: "N"}, "input_1": {0: "N"}, "input_2": {0: "N"}},
                   more_args=[(torch.tensor([1, 2, 3, 4, 5, 5, 0]),
                               torch.tensor([0, 0, 0, 1, 1, 2, 3]), torch.rand(7),
                               torch.tensor(4)),
                              (torch.tensor([3]), torch.tensor([2]), torch.rand(1),
                               torch.tensor(0))])
