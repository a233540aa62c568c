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
