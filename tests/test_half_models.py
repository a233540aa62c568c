"""Half-precision models (``model.half()``) exported and run in tract match PyTorch's
float16 outputs within a few f16 ulps (t2n/opmath.py computes what PyTorch's CPU kernels
compute in f32: convolutions, batch and layer norms, softmax, GELU)."""

from __future__ import annotations

import torch
import transformers

from fixtures.models import BasicBlock, _seeded
from t2n.testing import assert_exports

RTOL, ATOL = 1e-2, 1e-3


class SmallResNet(torch.nn.Module):
    """ResNet's stem, an identity block, a strided projection block, pooled linear head."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, 1, 1, bias=False),
                                        torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                                        torch.nn.MaxPool2d(3, 2, 1))
        self.blocks = torch.nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 32, 2))
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        y = self.blocks(self.stem(x))
        return self.head(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))


def test_half_resnet_matches_pytorch_f16():
    model = _seeded(0, SmallResNet).half()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1)).half()
    result = assert_exports(model, (x,), rtol=RTOL, atol=ATOL)
    assert result.inputs[0].dtype == "f16" and result.outputs[0].dtype == "f16"


def test_half_transformer_layer_matches_pytorch_f16():
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=100,
                                  max_position_embeddings=32)
    torch.manual_seed(0)
    model = transformers.BertModel(cfg).eval().half()
    ids = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(2))
    assert_exports(model, (ids,), rtol=RTOL, atol=ATOL)
