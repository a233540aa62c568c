"""Small models the CLI, manifest and bad-input tests load as ``cli_models:NAME``.

Kept tiny so that each export + tract check takes well under a second.
"""

import os

import torch


class SmallMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def make_mlp():
    torch.manual_seed(0)
    return SmallMLP()


def make_mlp_with_args():
    torch.manual_seed(0)
    return SmallMLP(), (torch.randn(3, 8),)


def mlp_inputs():
    return {"x": torch.randn(5, 8)}


class Embed(torch.nn.Module):
    """Integer input: exercises --int-range."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(10, 4))

    def forward(self, ids):
        return self.w[ids] * 2


def make_embed():
    return Embed()


class TwoUnsupported(torch.nn.Module):
    def forward(self, x):
        a = torch.unique(x, sorted=True)[:1]  # data-dependent size: not exportable
        b = torch.fft.rfft(x).sigmoid().abs()[:, :1]  # no complex sigmoid: not exportable
        return a + b


def make_two_unsupported():
    return TwoUnsupported()


class RaisesInForward(torch.nn.Module):
    def forward(self, x):
        raise ValueError("boom in forward")


def make_raises():
    return RaisesInForward()


class FloatOutput(torch.nn.Module):
    def forward(self, x):
        return x * 2, 3.5


def make_float_output():
    return FloatOutput()


class StringInDict(torch.nn.Module):
    def forward(self, x):
        return {"y": x * 2, "label": "cat"}


def make_string_in_dict():
    return StringInDict()


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


def make_data_dependent():
    return DataDependent()


class NanInf(torch.nn.Module):
    def forward(self, x):
        return torch.log(x), 1.0 / (x - x)


def make_nan_inf():
    return NanInf()


def make_abort():
    """Kills its process, as a segfaulting extension would."""
    os.abort()


def not_a_module():
    return 42


def make_qwen3_causal_lm():
    """transformers' Qwen3ForCausalLM as it is (ModelOutput with logits and a DynamicCache)."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(vocab_size=1000, hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=64, head_dim=8, max_position_embeddings=64)
    return transformers.Qwen3ForCausalLM(cfg).eval()


class MaskedEmbed(torch.nn.Module):
    """Token ids and a 0/1 attention mask: exercises dict example inputs and per-input
    --int-range (a mask range applied to the ids would make every id 0 or 1)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(50, 4)

    def forward(self, input_ids, attention_mask):
        return self.emb(input_ids) * attention_mask.unsqueeze(-1).to(torch.float32)


def make_masked_embed():
    return MaskedEmbed()


def make_masked_embed_with_dict():
    torch.manual_seed(1)
    ids = torch.randint(0, 50, (2, 6))
    # keys in another order than forward's parameters: bound by name, as the API does
    return MaskedEmbed(), {"attention_mask": torch.tensor([[1, 1, 1, 1, 0, 0]] * 2),
                           "input_ids": ids}
class NumpyTanh(torch.nn.Module):
    """A result computed outside torch: the trace records it as a constant."""

    def forward(self, x):
        import numpy as np

        return torch.from_numpy(np.tanh(x.numpy()))


def make_numpy_tanh():
    return NumpyTanh()


class WithTable(torch.nn.Module):
    """One output from the input, one constant on purpose (a fixed table)."""

    def forward(self, x):
        return x * 2, torch.arange(12, dtype=torch.float32).reshape(3, 4)


def make_with_table():
    return WithTable()
