"""The ``product_broadcasts`` pass: a product never reads a ``tract_core_broadcast``.

tract 0.23's einsum declutter rewires a broadcast operand to the broadcast's input; when no
other operand carries the broadcast axis the product's shape shrinks and tract refuses the
archive at load ("Trying to substitute a 1,16,N by 1,1,N"), or aborts at run time for a
contracted axis. DPT's readout (``linear(cat([tokens, cls.expand_as(tokens)], -1))``) is the
model case; each test below is one way the broadcast reaches a product in tract."""

import pytest
import torch

import t2n.passes as passes
from t2n.api import export_graph
from t2n.testing import assert_exports

F = torch.nn.functional


class Readout(torch.nn.Module):
    """DPT's readout projection on one row of tokens, and the other ways tract hands an
    expanded tensor to a product."""

    def __init__(self, case):
        super().__init__()
        self.case = case
        self.lin = torch.nn.Linear(128 if case.startswith("cat") else 64, 32)

    def forward(self, h):
        cls, x = h[:, :1], h[:, 1:]
        e = cls.expand_as(x)
        if self.case == "cat_linear":  # DPT: tract splits the product over the concat
            return self.lin(torch.cat([x, e], -1))
        if self.case == "cat_first_linear":
            return self.lin(torch.cat([e, x], -1))
        if self.case == "cat_nested_linear":  # Autoformer: tract splits each concat in turn
            inner = torch.cat([e, x[..., :32]], -1)  # (the full slice keeps TorchScript
            return self.lin(torch.cat([x[..., 32:], inner[:, :16]], -1))  # from merging)
        if self.case == "cat_nested3_linear":  # three levels
            inner = torch.cat([e, x[..., :16]], -1)
            inner = torch.cat([x[..., 16:32], inner[:, :16]], -1)
            return self.lin(torch.cat([x[..., 32:], inner[:, :16]], -1))
        if self.case == "linear":
            return self.lin(e) + x[..., :32]
        if self.case == "gelu_linear":  # tract swaps element-wise ops and the broadcast
            return self.lin(F.gelu(e)) + x[..., :32]
        if self.case == "matmul_rows":  # a broadcast row axis
            return e @ x.transpose(1, 2)
        if self.case == "matmul_contracted":  # a broadcast contracted axis (tract aborts)
            return x.transpose(1, 2) @ e
        if self.case == "cat_matmul_transposed":  # a transpose between concat and product
            return torch.cat([x, x], -1) @ torch.cat([x, e], -1).transpose(1, 2)
        raise AssertionError(self.case)


CASES = ["cat_linear", "cat_first_linear", "cat_nested_linear", "cat_nested3_linear",
         "linear", "gelu_linear", "matmul_rows",
         "matmul_contracted", "cat_matmul_transposed"]


@pytest.mark.parametrize("case", CASES)
def test_product_of_a_broadcast_loads_and_matches(case):
    assert_exports(Readout(case).eval(), (torch.randn(1, 17, 64),))


@pytest.mark.parametrize("case", ["cat_linear", "matmul_contracted"])
def test_product_of_a_broadcast_dynamic_batch(case):
    assert_exports(Readout(case).eval(), (torch.randn(2, 17, 64),), input_names=["h"],
                   dynamic_axes={"h": {0: "B"}},
                   more_args=[(torch.randn(1, 17, 64),), (torch.randn(3, 17, 64),)])


@pytest.mark.parametrize("case", CASES)
def test_no_product_reads_a_broadcast(case):
    g = export_graph(Readout(case).eval(), (torch.randn(1, 17, 64),))
    made_by = {id(o): op.kind for op in g.ops for o in op.outputs}
    for op in g.live_ops():
        if op.kind in ("matmul", "linear", "tract_core_einsum") or op.kind.startswith(
                "t2n_linear"):
            operands = op.args[0] if op.kind == "tract_core_einsum" else op.args[:2]
            kinds = [made_by.get(id(t)) for t in operands]
            assert "tract_core_broadcast" not in kinds, f"{case}: {op.kind} reads {kinds}"


def test_without_the_pass_tract_refuses_the_readout(monkeypatch, tmp_path):
    """Pins the tract behaviour the pass exists for: without it, the export is refused at
    load (t2n.check.load), naming the linear layer and its line; nothing is written."""
    import t2n
    from t2n.check.load import LoadRefusedError

    monkeypatch.setattr(passes, "PIPELINE",
                        tuple(p for p in passes.PIPELINE if p != "product_broadcasts"))
    out = tmp_path / "readout.nnef"
    with pytest.raises(LoadRefusedError) as e:
        t2n.export(Readout("cat_linear").eval(), (torch.randn(1, 17, 64),), out)
    assert e.value.op == "aten::linear" and "test_product_broadcasts.py" in e.value.where
    assert "Trying to substitute" in str(e.value) and e.value.exit_code == 2
    assert not out.exists() and list(tmp_path.iterdir()) == []
