"""A graph whose structure depends on a dynamic size is refused, not exported wrong.

Python that reads a size as a number (a loop over ``range(S // 4)``, a branch on ``S > 8``,
``torch.chunk`` into ``S // 2`` pieces) is run once by the capture, at the example's size.
With that axis dynamic the archive would compute the example's loop count at every size:
t2n traces again at other sizes and compares the graphs (capture="trace"), and reads
torch.export's guards (capture="export"). Each refusal names the symbol; the trace's names
the model's source line. Models that read sizes through ``aten::size`` export as before.
"""

import pytest
import torch

import t2n
from t2n.capture import size_probe
from t2n.errors import ConversionError, UsageError
from t2n.testing import assert_exports


class Loop(torch.nn.Module):
    def forward(self, x):
        out = []
        for i in range(x.shape[1] // 4):
            out.append(x[:, i * 4:(i + 1) * 4].sum(1))  # LOOP LINE
        return torch.stack(out, 1)


class Branch(torch.nn.Module):
    def forward(self, x):
        if x.shape[1] > 8:
            return x * 2  # BRANCH LINE
        return x + 1  # EXAMPLE LINE


class Chunk(torch.nn.Module):
    def forward(self, x):
        return torch.stack([c.sum(1) for c in torch.chunk(x, x.shape[1] // 2, dim=1)], 1)


class Chunked(torch.nn.Module):
    """Chunks of 64 over a padded length, as Qwen3-Next's gated delta rule: one chunk for
    every length up to 64, so only a probe longer than 64 sees the loop."""

    def forward(self, x):
        n = x.shape[1]
        pad = (64 - n % 64) % 64
        x = torch.nn.functional.pad(x, (0, 0, 0, pad))
        out = [x[:, i * 64:(i + 1) * 64].cumsum(1) for i in range(x.shape[1] // 64)]
        return torch.cat(out, 1)[:, :n]


def _line(cls, marker: str) -> str:
    import inspect

    lines, first = inspect.getsourcelines(cls)
    k = next(i for i, text in enumerate(lines) if marker in text)
    return f"{__file__}:{first + k}"


@pytest.mark.parametrize("model", [Loop(), Branch(), Chunked()],
                         ids=lambda m: type(m).__name__)
def test_the_trace_refuses_a_graph_that_changes_with_the_size(model, tmp_path):
    with pytest.raises(ConversionError, match="changes with the size of dynamic axis S") as e:
        t2n.export(model, (torch.randn(2, 8, 3),), tmp_path / "m.nnef.tar",
                   input_names=["x"], dynamic_axes={"x": {0: "B", 1: "S"}}, capture="trace")
    assert "dynamic axis S " in str(e.value)  # B alone does not change the graph
    if isinstance(model, Loop):
        assert _line(Loop, "LOOP LINE") in str(e.value)
    if isinstance(model, Branch):
        assert _line(Branch, "EXAMPLE LINE") in str(e.value)
        assert _line(Branch, "BRANCH LINE") + " at S=137" in str(e.value)


def test_a_chunk_count_from_the_size_is_refused_by_the_walk_first(tmp_path):
    """The walk's own refusal of the trace names the op and the condition (it runs before
    the size probe)."""
    with pytest.raises(t2n.errors.UnsupportedOperatorsError, match=r"floor\(S/2\) == 4"):
        t2n.export(Chunk(), (torch.randn(2, 8, 3),), tmp_path / "m.nnef.tar",
                   input_names=["x"], dynamic_axes={"x": {1: "S"}}, capture="trace")


@pytest.mark.parametrize("model", [Loop(), Branch(), Chunk(), Chunked()],
                         ids=lambda m: type(m).__name__)
def test_torch_export_refuses_them_too(model, tmp_path):
    with pytest.raises((UsageError, t2n.errors.UnsupportedOperatorsError),
                       match="dynamic axis S|chunking a dynamic axis"):
        t2n.export(model, (torch.randn(2, 8, 3),), tmp_path / "m.nnef.tar",
                   input_names=["x"], dynamic_axes={"x": {1: "S"}}, capture="export")


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_a_branch_within_the_declared_range_exports_and_runs(capture):
    """S in [1, 8]: the branch never flips, the archive is right for every declared size."""
    assert_exports(Branch(), (torch.randn(2, 6, 3),), input_names=["x"], capture=capture,
                   dynamic_axes={"x": {1: ("S", 1, 8)}},
                   more_args=[(torch.randn(2, 8, 3),), (torch.randn(2, 1, 3),)])


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_a_static_axis_keeps_the_loop(capture):
    assert_exports(Loop(), (torch.randn(2, 12, 3),), input_names=["x"], capture=capture,
                   dynamic_axes={"x": {0: "B"}}, more_args=[(torch.randn(5, 12, 3),)])


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_the_qwen3_next_gated_delta_net_is_refused_with_a_dynamic_length(capture, tmp_path):
    """Qwen3-Next loops over chunks of 64 in Python (``range(num_chunks)``): the trace
    at S=8 holds one chunk. The trace's refusal names S and the loop's line in
    transformers; torch.export's names S and the sizes it fixed the model to."""
    import sys
    import os

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "zoo"))
    from transformers_models import MODELS

    spec = next(m for m in MODELS if m.name == "qwen3_next")
    dyn = {"input_ids": {0: "B", 1: "S"}, "attention_mask": {0: "B", 1: "S"}}
    if capture == "export":
        with pytest.raises(UsageError, match="dynamic axis S: torch.export fixed the model"):
            t2n.export(spec.build(), spec.inputs(2, 8), tmp_path / "q.nnef.tar",
                       dynamic_axes=dyn, capture=capture)
        return
    with pytest.raises(ConversionError, match="dynamic axis S ") as e:
        t2n.export(spec.build(), spec.inputs(2, 8), tmp_path / "q.nnef.tar", dynamic_axes=dyn,
                   capture=capture)
    assert "modeling_qwen3_next.py:" in str(e.value)


def test_probe_sizes_reach_past_a_chunk_of_129_within_the_bounds():
    assert size_probe.probe_sizes(8, 1, None) == [137, 25, 16, 9]
    assert size_probe.probe_sizes(512, 1, None) == [641, 1537, 1024, 513]
    assert size_probe.probe_sizes(2, 1, None) == [7, 4, 3]  # a batch: 3n + 1
    assert size_probe.probe_sizes(8, 1, 20) == [20, 16, 9]
    assert size_probe.probe_sizes(0, 0, 512) == [1]


def test_the_check_compares_a_size_far_from_the_example(tmp_path):
    r = t2n.export(torch.nn.Linear(3, 3), (torch.randn(2, 8, 3),), tmp_path / "l.nnef.tar",
                   input_names=["x"], dynamic_axes={"x": {1: ("S", 1, 20)}}, check=True)
    names = [s["name"] for s in r.extras["input_sets"]]
    assert names == ["example", "fresh", "fresh S=9", "fresh S=20"]
