"""A user's library of ``torch.library`` custom ops and a model that calls them, for
tests/test_extensions.py (their mappings are in ``extension_mappings``, loaded as a user
would: ``t2n.mapping`` in-process, ``--extension``, a manifest's ``extensions``, an entry
point)."""

import torch


@torch.library.custom_op("t2n_test::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.tanh(x) * scale


@scaled_tanh.register_fake
def _(x, scale):
    return torch.empty_like(x)


@torch.library.custom_op("t2n_test::row_norm", mutates_args=())
def row_norm(x: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """sqrt(sum(x * x, last axis) + eps), the last axis kept (a shape-changing op)."""
    return torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


@row_norm.register_fake
def _(x, eps=0.0):
    return x.new_empty(list(x.shape[:-1]) + [1])


@torch.library.custom_op("t2n_test::add_into", mutates_args=("out",))
def add_into(out: torch.Tensor, x: torch.Tensor) -> None:
    out.add_(x)


class CustomOpNet(torch.nn.Module):
    """Linear, then both custom ops (the second one after the first: a chain)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 6)

    def forward(self, x):
        y = scaled_tanh(self.fc(x), 2.5)
        return y / row_norm(y, 1e-3)


class MutatingNet(torch.nn.Module):
    def forward(self, x):
        out = torch.zeros_like(x)
        add_into(out, x)
        return out * 2


def make_model():
    torch.manual_seed(0)
    return CustomOpNet(), (torch.randn(3, 8),)


class Pt2eStyleConv(torch.nn.Module):
    """What pt2e's convert step makes of a conv + relu: an int8 per-channel weight
    dequantized in the graph, the activations quantized to uint8 and back around it."""

    def __init__(self):
        super().__init__()
        import torch.ao.quantization.fx._decomposed  # noqa: F401  (declares the ops)

        torch.manual_seed(0)
        w = torch.randn(4, 3, 3, 3)
        self.register_buffer("scales", w.abs().amax((1, 2, 3)) / 127)
        self.register_buffer("zero_points", torch.zeros(4, dtype=torch.int64))
        self.register_buffer("w_int8", torch.round(w / self.scales[:, None, None, None])
                             .to(torch.int8))
        self.bias = torch.nn.Parameter(torch.randn(4))

    def forward(self, x):
        ops = torch.ops.quantized_decomposed
        w = ops.dequantize_per_channel(self.w_int8, self.scales, self.zero_points, 0, -128,
                                       127, torch.int8)
        q = ops.quantize_per_tensor(x, 0.03, 128, 0, 255, torch.uint8)
        x = ops.dequantize_per_tensor(q, 0.03, 128, 0, 255, torch.uint8)
        y = torch.relu(torch.nn.functional.conv2d(x, w, self.bias, padding=1))
        q = ops.quantize_per_tensor(y, 0.02, 0, 0, 255, torch.uint8)
        return ops.dequantize_per_tensor(q, 0.02, 0, 0, 255, torch.uint8)
