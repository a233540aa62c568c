"""Shape and layout ops and casts: torch eager vs tract (negative dims, -1 sizes, no-op
squeezes, uneven split/chunk, mixed-dtype cat, every cast direction)."""

import pytest
import torch

from opcases import assert_cases

X = torch.randn(2, 3, 4)
I = torch.arange(-12, 12).reshape(2, 3, 4)

GROUPS = {
    "reshape view flatten": {
        "reshape -1": lambda x, i: x.reshape(-1, 4),
        "reshape to rank 1": lambda x, i: x.reshape(-1),
        "view 4-d": lambda x, i: x.view(2, 1, 12, 1),
        "view -1 middle": lambda x, i: i.view(2, -1, 2),
        "view_as / reshape_as": lambda x, i: (x.view_as(i), i.reshape_as(x.reshape(6, 4))),
        "flatten all": lambda x, i: x.flatten(),
        "flatten start 1": lambda x, i: torch.flatten(x, 1),
        "flatten negative range": lambda x, i: i.flatten(-2, -1),
        "flatten single dim": lambda x, i: x.flatten(1, 1),
        "unflatten": lambda x, i: x.unflatten(-1, (2, -1)),
    },
    "permute transpose": {
        "permute": lambda x, i: x.permute(2, 0, 1),
        "permute negative": lambda x, i: i.permute(-1, -3, -2),
        "transpose": lambda x, i: x.transpose(0, 2),
        "transpose negative": lambda x, i: i.transpose(-1, -2),
        "t": lambda x, i: x[0].t(),
        "mT-like transpose then contiguous": lambda x, i: x.transpose(1, 2).contiguous() + 1,
        "movedim": lambda x, i: torch.movedim(x, 0, -1),
    },
    "squeeze unsqueeze expand": {
        "squeeze all": lambda x, i: x.reshape(2, 1, 3, 1, 4).squeeze(),
        "squeeze dim": lambda x, i: x.reshape(2, 1, 12).squeeze(1),
        "squeeze negative dim": lambda x, i: x.reshape(2, 12, 1).squeeze(-1),
        "squeeze non-1 dim is a no-op": lambda x, i: x.squeeze(0),
        "squeeze dims tuple": lambda x, i: x.reshape(1, 2, 1, 12).squeeze((0, 2)),
        "unsqueeze 0": lambda x, i: x.unsqueeze(0),
        "unsqueeze -1": lambda x, i: i.unsqueeze(-1),
        "unsqueeze middle negative": lambda x, i: x.unsqueeze(-3),
        "expand -1 and new dims": lambda x, i: x[:, :1].expand(5, 2, -1, 4),
        "expand int": lambda x, i: i[:1].expand(3, 3, 4),
        "expand_as": lambda x, i: x[:, :, :1].expand_as(x),
    },
    "cat stack": {
        "cat dim 0": lambda x, i: torch.cat([x, x * 2]),
        "cat negative dim": lambda x, i: torch.cat((x, x[:, :, :2]), -1),
        "cat mixed int and float": lambda x, i: torch.cat([x, i], 1),
        "cat with empty 1-d": lambda x, i: torch.cat([x.flatten(), torch.zeros(0)]),
        "cat bool": lambda x, i: torch.cat([x > 0, i > 0], 0),
        "stack dim 0": lambda x, i: torch.stack([x, x + 1]),
        "stack negative dim": lambda x, i: torch.stack([i, i * 2, i * 3], -1),
        "stack middle": lambda x, i: torch.stack([x, x], dim=1),
    },
    "split chunk unbind": {
        "split even": lambda x, i: x.split(2, -1),
        "split uneven": lambda x, i: torch.split(x, 2, dim=1),
        "split sizes": lambda x, i: i.split([1, 3], 2),
        "chunk uneven": lambda x, i: x.chunk(2, 1),
        "chunk more chunks than size": lambda x, i: x.chunk(6, 1),
        "chunk negative dim": lambda x, i: i.chunk(4, -1),
        "unbind": lambda x, i: x.unbind(1),
    },
    "casts": {
        "float to int64 truncates": lambda x, i: (x * 10).to(torch.int64),
        "float to int32": lambda x, i: (x * 10).int(),
        "float to bool": lambda x, i: x.round().bool(),
        "float to float64": lambda x, i: x.double(),
        "int to float": lambda x, i: i.float(),
        "int to bool": lambda x, i: i.to(torch.bool),
        "bool to float and int": lambda x, i: ((x > 0).float(), (x > 0).long()),
        "to(other tensor)": lambda x, i: x.to(i),
        "type_as": lambda x, i: i.type_as(x),
        "int64 to int8 small values": lambda x, i: i.to(torch.int8),
        "to same dtype is identity": lambda x, i: x.to(torch.float32) + 0,
        "contiguous / clone / detach": lambda x, i: (x.contiguous(), x.clone(), i.detach()),
    },
}


@pytest.mark.parametrize("group", list(GROUPS))
def test_shape_ops(group):
    assert_cases(GROUPS[group], (X, I))


def test_dropout_is_identity_in_eval():
    assert_cases({
        "F.dropout eval": lambda x: torch.nn.functional.dropout(x, 0.5, training=False),
        "nn.Dropout eval": torch.nn.Dropout(0.3).eval(),
        "nn.Dropout2d eval": torch.nn.Dropout2d(0.3).eval(),
        "nn.AlphaDropout eval": torch.nn.AlphaDropout(0.3).eval(),
    }, (torch.randn(2, 3, 4, 5),))


def test_rank0_and_empty_tensors():
    assert_cases({
        "rank 0 reshape/flatten/unsqueeze/squeeze": lambda s, e: (
            s.reshape(1), s.flatten(), s.unsqueeze(0), s.squeeze(), s.unsqueeze(-1).expand(3)),
        "empty axis cat/transpose/flatten": lambda s, e: (
            torch.cat([e, e], 0), e.transpose(0, 1), e.flatten(), e.unsqueeze(1)),
    }, (torch.tensor(1.5), torch.randn(0, 3)))


def test_loop_over_data_dependent_rows_is_refused():
    """``for e in mask.nonzero()`` (DBRX's loop over the experts hit): the trace unrolls it
    for the example's count; the export refuses it, naming the loop, instead of a graph
    that is wrong for another count."""
    from opcases import Fn
    from t2n.errors import UnsupportedOperatorsError
    from t2n.testing import assert_exports

    def per_hit_row(x):
        out = torch.zeros_like(x)
        for e in (x.sum(1) > 0).nonzero():
            out = out + x[e[0]]
        return out

    from t2n.errors import TraceError

    with pytest.raises(UnsupportedOperatorsError, match="number of rows depends on the data"):
        assert_exports(Fn(per_hit_row), (torch.randn(5, 3),), capture="trace")
    with pytest.raises(TraceError, match=r"depends on tensor values.*"
                                         r"test_ops_shape.py:\d+"):
        assert_exports(Fn(per_hit_row), (torch.randn(5, 3),), capture="export")
