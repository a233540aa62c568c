"""``aten::_grouped_mm`` (the grouped product of mixture-of-experts layers) with run-time
group offsets, every layout PyTorch accepts, through both captures (torch.export keeps it
one op, t2n::_grouped_mm: torch's meta kernel takes only CUDA's bfloat16, where the CPU
kernel takes float32); and transformers' MoE blocks built on it."""

import warnings

import pytest
import torch

from opcases import assert_cases
from t2n.testing import assert_exports

G = torch._grouped_mm


def test_rows_grouped_by_runtime_offsets(capture):
    x, w = torch.randn(12, 8), torch.randn(3, 8, 4)
    cases = {
        "rows": lambda x, w, o: G(x, w, offs=o),
        "rows of a transposed weight": lambda x, w, o: G(x, w.transpose(-2, -1).contiguous()
                                                         .transpose(-2, -1), offs=o),
        "rows out_dtype": lambda x, w, o: G(x, w, offs=o, out_dtype=torch.float32) * 2,
        "F.grouped_mm": lambda x, w, o: torch.nn.functional.grouped_mm(x, w, offs=o) - 1,
    }
    for offs in ([4, 9, 12], [0, 12, 12], [5, 5, 12]):  # empty groups too
        assert_cases(cases, (x, w, torch.tensor(offs, dtype=torch.int32)))


def test_rows_past_the_last_offset_are_not_compared(capture):
    # PyTorch leaves them uninitialised; the lowering makes them 0
    assert_cases({"head": lambda x, w, o: G(x, w, offs=o)[:7]},
                 (torch.randn(12, 8), torch.randn(2, 8, 4),
                  torch.tensor([3, 7], dtype=torch.int32)))


def test_reduced_axis_and_columns_grouped(capture):
    a, b = torch.randn(4, 16), torch.randn(16, 8)
    assert_cases({"k groups": lambda a, b, o: G(a, b, offs=o)},
                 (a, b, torch.tensor([4, 12, 16], dtype=torch.int32)))
    a3 = torch.randn(3, 4, 8)
    assert_cases({"n groups": lambda a, b, o: G(a, b, offs=o)},
                 (a3, torch.randn(8, 12), torch.tensor([4, 4, 12], dtype=torch.int32)))
    assert_cases({"batched": lambda a, b: G(a, b)}, (a3, torch.randn(3, 8, 4)))


import transformers
import transformers.integrations.moe  # noqa: F401  (registers transformers::grouped_mm_fallback)


class Fallback(torch.nn.Module):
    """transformers' own grouped product, as torch.export records its experts on a CPU."""

    def forward(self, x, w, offs):
        return torch.ops.transformers.grouped_mm_fallback(x, w, offs)


@pytest.mark.parametrize("capture", ["export", "trace"])
def test_transformers_grouped_mm_fallback(capture):
    """Rows sorted by expert, an empty group, rows past the last offset (zeros there, as
    its loop leaves them), through either capture; offsets are run-time values (checked
    on other ones)."""
    x, w = torch.randn(10, 6), torch.randn(4, 6, 5)
    offs = torch.tensor([3, 3, 7, 9], dtype=torch.int32)
    assert_exports(Fallback(), (x, w, offs),
                   more_args=[(x, w, torch.tensor([0, 5, 5, 10], dtype=torch.int32))],
                   capture=capture)


def _mixtral():
    torch.manual_seed(0)
    cfg = transformers.MixtralConfig(vocab_size=128, hidden_size=32, intermediate_size=48,
                                     num_hidden_layers=1, num_attention_heads=4,
                                     num_key_value_heads=2, num_local_experts=4,
                                     num_experts_per_tok=2, max_position_embeddings=64)
    model = transformers.MixtralModel(cfg).eval()
    with torch.no_grad():  # experts and router far from the 0.02 init: every expert matters
        for name, p in model.named_parameters():
            if "experts" in name or "gate" in name:
                p.normal_(0, p.shape[-1] ** -0.5)
    return model


@pytest.mark.slow
def test_mixtral_moe_dynamic_sequence_op_count_independent_of_tokens(tmp_path):
    import t2n

    model = _mixtral()

    def ids(b, s):
        return {"input_ids": torch.randint(0, 128, (b, s))}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = assert_exports(model, ids(2, 8), dynamic_axes={"input_ids": {0: "B", 1: "S"}},
                           more_args=[ids(1, 1), ids(1, 3), ids(3, 17), ids(2, 40)],
                           rtol=1e-3, atol=1e-4)
        counts = {s: t2n.export(model, ids(1, s), tmp_path / f"m{s}.nnef").op_count
                  for s in (2, 32)}
    assert counts[2] == counts[32], counts  # no per-token unrolling
    assert "matmul" in r.op_histogram
