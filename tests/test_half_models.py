"""Half-precision models (``model.half()``) exported and run in tract match PyTorch's
float16 outputs within a few f16 ulps (t2n/walk/opmath.py computes what PyTorch's CPU kernels
compute in f32: convolutions, batch and layer norms, matrix products, softmax, GELU)."""

from __future__ import annotations

import torch

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


class GPT2Block(torch.nn.Module):
    """GPT-2's layer (pre-norm causal self-attention and a tanh-GELU MLP, residuals), hidden
    64: the same aten ops as transformers' block, without importing transformers (its
    modeling import costs more than the test)."""

    def __init__(self, hidden: int = 64, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(hidden), torch.nn.LayerNorm(hidden)
        self.c_attn = torch.nn.Linear(hidden, 3 * hidden)
        self.c_proj = torch.nn.Linear(hidden, hidden)
        self.c_fc = torch.nn.Linear(hidden, 4 * hidden)
        self.mlp_proj = torch.nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(a.transpose(1, 2).reshape(b, t, c))
        h = torch.nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.mlp_proj(h)


def test_half_transformer_block_matches_pytorch_f16():
    torch.manual_seed(0)
    model = GPT2Block().eval().half()
    x = torch.randn(2, 12, 64, generator=torch.Generator().manual_seed(2)).half()
    assert_exports(model, (x,), rtol=RTOL, atol=ATOL)
