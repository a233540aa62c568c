"""A tensor the model creates from Python data (``torch.tensor(0)``) and then writes in
place keeps, in the archive, the value the model read before the write: the trace holds
such a tensor as a constant that aliases the written tensor (transformers 5.25 counts the
tokens of its linear-attention cache this way; positions then started at ``S``)."""

import pytest
import torch

import t2n.capture.trace as trace
from t2n.testing import assert_exports



class TokenCounter(torch.nn.Module):
    """Positions from a counter created at 0, then the counter advanced by ``S``."""

    def forward(self, x):
        count = torch.tensor(0, dtype=torch.long)
        seen = count.detach()  # an alias, as caches hand it out
        pos = torch.arange(x.shape[1]) + seen
        count.add_(x.shape[1])
        return x + pos[None, :, None].float(), seen * 1


class WrittenTable(torch.nn.Module):
    """A constant table read, written through an index and a view, and read again."""

    def forward(self, x):
        table = torch.tensor([1.0, 2.0, 3.0, 4.0])
        before = x * table
        table[0] = 5.0
        table[1:3].mul_(10.0)
        table += 1.0
        low, high = table.split(2)
        high.sub_(0.5)  # through one piece of a split
        return before, x * table


class RuntimeWriteIntoTable(torch.nn.Module):
    """A value computed from the input written into a constant table through a view."""

    def forward(self, x):
        table = torch.tensor([1.0, 2.0, 3.0, 4.0])
        before = x * table
        table[1:3] = x[0, :2] * 3
        table.mul_(2.0)
        return before, x * table


@pytest.mark.usefixtures("capture")  # through both front ends (conftest.capture)
def test_a_counter_written_after_its_read_starts_at_zero():
    assert_exports(TokenCounter(), (torch.randn(2, 5, 3),), input_names=["x"],
                   dynamic_axes={"x": {1: "S"}}, more_args=[(torch.randn(2, 9, 3),)])


@pytest.mark.usefixtures("capture")
def test_writes_into_a_constant_table_apply_once():
    assert_exports(WrittenTable(), (torch.randn(3, 4),))


@pytest.mark.usefixtures("capture")
def test_a_run_time_write_into_a_constant_table_reaches_later_reads():
    assert_exports(RuntimeWriteIntoTable(), (torch.randn(3, 4),))


def test_a_model_without_such_writes_is_traced_once(monkeypatch):
    calls = []
    real = torch.jit.trace
    monkeypatch.setattr(trace.torch.jit, "trace", lambda *a, **k: calls.append(1) or real(*a, **k))

    class Plain(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            y.add_(1)  # a write into a computed tensor: no constant involved
            return y

    assert_exports(Plain(), (torch.randn(2, 3),), capture="trace")  # the trace's cost
    assert len(calls) == 1
