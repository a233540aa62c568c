"""The pass pipeline (t2n/passes): every declared pass loads, the options they declare are the
ones export accepts, and export runs them in the declared order."""

import pytest
import torch

import t2n
from t2n import api, passes, session
from t2n.errors import UsageError


def test_every_declared_pass_loads_with_its_name():
    loaded = passes.pipeline()
    assert [p.name for p in loaded] == list(passes.PIPELINE)
    assert len(set(passes.PIPELINE)) == len(passes.PIPELINE)
    for p in loaded:
        assert callable(p.run)


def test_export_accepts_exactly_the_declared_options():
    assert session.known_options() == session.API_OPTIONS | passes.options()
    assert "compact" in passes.options()


def test_unknown_option_refused_before_the_trace(tmp_path):
    class Boom(torch.nn.Module):
        def forward(self, x):
            raise AssertionError("traced although the option was unknown")

    with pytest.raises(UsageError, match="unknown export option.*no_such_thing"):
        t2n.export(Boom(), torch.ones(2), str(tmp_path / "m.nnef"), no_such_thing=1)


def test_passes_run_in_declared_order_on_the_walked_graph(monkeypatch):
    seen = []

    def spy(name):
        def run(g, ctx):
            seen.append((name, g.op_histogram(), dict(ctx.options)))
        return passes.GraphPass(name, run)

    monkeypatch.setattr(passes, "pipeline", lambda: [spy("a"), spy("b")])
    g = api.export_graph(torch.nn.ReLU(), torch.randn(3))
    assert [s[0] for s in seen] == ["a", "b"]
    assert seen[0][1] == g.op_histogram() and seen[0][1].get("relu") == 1
