"""embedding_bag: golden examples (seed-ops.md §1), every mode x input form x option
against PyTorch in tract, bag layouts with empty and padding-only bags, one archive at
several (num_bags, num_indices) sizes, unsupported extra outputs, constant op count."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
import torch
import torch.nn as nn

import t2n
from t2n.errors import UnsupportedOperatorsError
from t2n.testing import assert_exports
from t2n.check.tract_runner import run_in_tract

# every test through both front ends (torch.jit.trace, torch.export): see conftest.capture
pytestmark = pytest.mark.usefixtures("capture")

TABLE = torch.tensor([[-0.2, -0.6], [-0.1, -0.4], [-1.9, -1.8], [-1., 1.5], [0.8, -0.7]])
MODES = ["sum", "mean", "max"]
DYN = {"indices": {0: "N"}, "offsets": {0: "B"}}


class Bags(nn.Module):
    """nn.EmbeddingBag with runtime indices, offsets and (optional) per-sample weights."""

    def __init__(self, num=10, dim=3, weight=None, **kw):
        super().__init__()
        self.e = nn.EmbeddingBag(num, dim, **kw)
        # nn.EmbeddingBag zeroes the padding row; a non-zero one shows that it is skipped
        self.e.weight.data.copy_(weight if weight is not None else torch.randn(num, dim))

    def forward(self, indices, offsets=None, weights=None):
        return self.e(indices, offsets, per_sample_weights=weights)


class ConstOffsets(nn.Module):
    """Offsets fixed in the model (a buffer), indices at run time."""

    def __init__(self, offsets, **kw):
        super().__init__()
        self.e = nn.EmbeddingBag(10, 3, **kw)
        self.e.weight.data.normal_()  # a non-zero padding row
        self.register_buffer("offsets", offsets)

    def forward(self, indices, *weights):
        return self.e(indices, self.offsets, per_sample_weights=weights[0] if weights else None)


def _tract(path, inputs):
    return run_in_tract(path, [np.asarray(x) for x in inputs])


# ------------------------------------------------------------------ golden examples
def test_golden_embedding_bag_packed_sum():
    """EmbeddingBagPackedSum: 2-D indices, per-sample weights 0.5."""
    model = Bags(5, 2, weight=TABLE, mode="sum").eval()
    idx = torch.tensor([[0, 2], [1, 2], [3, 4]])
    w = torch.full((3, 2), 0.5)
    expected = np.array([[-1.05, -1.2], [-1., -1.1], [-0.1, 0.4]], dtype=np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.nnef")
        t2n.export(_Packed(model), (idx, w), path, check=True)
        got = _tract(path, [idx, w])[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


class _Packed(nn.Module):
    def __init__(self, bags):
        super().__init__()
        self.bags = bags

    def forward(self, indices, weights):
        return self.bags(indices, None, weights)


def test_golden_embedding_segments_sum_offsets():
    """EmbeddingSegmentsSum as embedding_bag with runtime offsets: segment_ids [0, 0, 2, 2]
    -> offsets [0, 2, 2]; the empty segment 1 gives zeros (embedding_bag has no
    default_index)."""
    model = Bags(5, 2, weight=TABLE, mode="sum").eval()
    args = (torch.tensor([0, 2, 3, 4]), torch.tensor([0, 2, 2]), torch.full((4,), 0.5))
    expected = np.array([[-1.05, -1.2], [0., 0.], [-0.1, 0.4]], dtype=np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.nnef")
        t2n.export(model, args, path, check=True)
        got = _tract(path, args)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


class _SegmentsWithDefault(nn.Module):
    """EmbeddingSegmentsSum with default_index: embedding_bag, then empty bags (zero length
    from the offsets) take the default row."""

    def __init__(self, default_index):
        super().__init__()
        self.e = nn.EmbeddingBag(5, 2, mode="sum", include_last_offset=True)
        self.e.weight.data.copy_(TABLE)
        self.default_index = default_index

    def forward(self, indices, offsets, weights):
        pooled = self.e(indices, offsets, per_sample_weights=weights)
        empty = (offsets[1:] - offsets[:-1]) == 0
        return torch.where(empty[:, None], self.e.weight[self.default_index], pooled)


def test_golden_embedding_segments_sum_default_index():
    args = (torch.tensor([0, 2, 3, 4]), torch.tensor([0, 2, 2, 4]), torch.full((4,), 0.5))
    expected = np.array([[-1.05, -1.2], [-0.2, -0.6], [-0.1, 0.4]], dtype=np.float32)
    model = _SegmentsWithDefault(0).eval()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.nnef")
        t2n.export(model, args, path, check=True)
        got = _tract(path, args)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


class _SegmentsIndexAdd(nn.Module):
    """EmbeddingSegmentsSum written out: index_add of weighted rows, where for the default."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(TABLE.clone())

    def forward(self, indices, segment_ids, weights, default_index):
        rows = self.table[indices] * weights[:, None]
        out = torch.zeros(3, 2).index_add(0, segment_ids, rows)
        count = torch.zeros(3).index_add(0, segment_ids, torch.ones(indices.shape[0]))
        return torch.where(count[:, None] == 0, self.table[default_index], out)


def test_golden_embedding_segments_sum_index_add():
    args = (torch.tensor([0, 2, 3, 4]), torch.tensor([0, 0, 2, 2]), torch.full((4,), 0.5),
            torch.tensor([0]))
    expected = np.array([[-1.05, -1.2], [-0.2, -0.6], [-0.1, 0.4]], dtype=np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.nnef")
        t2n.export(_SegmentsIndexAdd(), args, path, check=True)
        got = _tract(path, args)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ runtime offsets
@pytest.fixture(scope="module")
def worker():
    from t2n.check.tract_runner import TractWorker

    w = TractWorker()
    yield w
    w.close()


def _layouts(include_last_offset: bool, pad: int = 2):
    """(name, indices, offsets): empty bags at the start, middle, end; all empty; a bag of
    padding entries only; more bags and indices than at export."""
    cases = [
        ("base", [1, 2, 3, 4, 5, 6, 7], [0, 2, 5]),
        ("empty_start", [1, 3, 4, 5, 6], [0, 0, 3]),
        ("empty_middle", [1, 3, 4, 5, 6], [0, 2, 2, 2, 4]),
        ("empty_end", [1, 3, 4, 5, 6], [0, 3, 5, 5]),
        ("all_empty", [], [0, 0, 0]),
        ("padding_only_bag", [1, pad, pad, pad, 8], [0, 1, 4]),
        ("one_bag", [9, 0, 9], [0]),
        ("large", list(np.random.RandomState(0).randint(0, 10, 60)),
         [0, 0, 5, 11, 11, 30, 31, 59, 60]),
    ]
    out = []
    for name, idx, off in cases:
        n = len(idx)
        off = off + [n] if include_last_offset else off
        out.append((name, torch.tensor(idx, dtype=torch.int64),
                    torch.tensor(off, dtype=torch.int64)))
    return out


def _check_many(worker, model, cases, path, with_weights):
    for name, idx, off, *w in cases:
        inputs = (idx, off) + tuple(w)
        with torch.no_grad():
            expected = model(*inputs).numpy()
        got = worker.run(path, [x.numpy() for x in inputs])[0]
        assert got.shape == expected.shape, f"{name}: shape {got.shape} vs {expected.shape}"
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, err_msg=name)


RUNTIME_OPTIONS = [
    ("sum", {}), ("sum", {"padding_idx": 2}), ("sum", {"include_last_offset": True}),
    ("sum", {"psw": True}), ("sum", {"psw": True, "padding_idx": 2}),
    ("sum", {"int32": True, "padding_idx": 2}),
    ("sum", {"include_last_offset": True, "padding_idx": 2, "psw": True}),
    ("mean", {}), ("mean", {"padding_idx": 2}), ("mean", {"include_last_offset": True}),
    ("mean", {"int32": True}), ("mean", {"include_last_offset": True, "padding_idx": 2}),
    ("max", {}), ("max", {"padding_idx": 2}), ("max", {"include_last_offset": True}),
    ("max", {"int32": True, "padding_idx": 2}),
    ("max", {"include_last_offset": True, "padding_idx": 2}),
    ("sum", {"padding_idx": -8}),  # negative padding_idx counts from the end (row 2)
]


@pytest.mark.parametrize("mode,opts", RUNTIME_OPTIONS,
                         ids=[m + "-" + ("-".join(f"{k}={v}" for k, v in o.items()) or "plain")
                              for m, o in RUNTIME_OPTIONS])
def test_runtime_offsets(worker, tmp_path, mode, opts):
    """One archive with dynamic (num_indices, num_bags) serves every layout."""
    opts = dict(opts)
    psw, int32 = opts.pop("psw", False), opts.pop("int32", False)
    model = Bags(mode=mode, **opts).eval()
    ilo = opts.get("include_last_offset", False)
    cases = []
    for name, idx, off in _layouts(ilo):
        if int32:
            idx, off = idx.int(), off.int()
        cases.append((name, idx, off) + ((torch.rand(len(idx)) * 2 - 0.5,) if psw else ()))
    names = ["indices", "offsets"] + (["weights"] if psw else [])
    dyn = dict(DYN, **({"weights": {0: "N"}} if psw else {}))
    path = str(tmp_path / "m.nnef")
    t2n.export(model, cases[0][1:], path, input_names=names, dynamic_axes=dyn, check=True)
    _check_many(worker, model, cases, path, psw)


# ------------------------------------------------------------------ 2-D indices (equal bags)
PACKED_OPTIONS = [("sum", {}), ("sum", {"padding_idx": 2}), ("sum", {"psw": True}),
                  ("sum", {"int32": True}), ("mean", {}), ("mean", {"padding_idx": 2}),
                  ("max", {}), ("max", {"padding_idx": 2}), ("max", {"int32": True})]


class _Packed2D(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.e = nn.EmbeddingBag(10, 3, **kw)
        self.e.weight.data.normal_()  # a non-zero padding row

    def forward(self, indices, *weights):
        return self.e(indices, per_sample_weights=weights[0] if weights else None)


@pytest.mark.parametrize("mode,opts", PACKED_OPTIONS,
                         ids=[m + "-" + ("-".join(f"{k}={v}" for k, v in o.items()) or "plain")
                              for m, o in PACKED_OPTIONS])
def test_packed_2d(mode, opts):
    opts = dict(opts)
    psw, int32 = opts.pop("psw", False), opts.pop("int32", False)
    model = _Packed2D(mode=mode, **opts).eval()
    idx = torch.tensor([[1, 2, 3], [2, 2, 2], [9, 0, 2], [4, 4, 5]])
    idx = idx.int() if int32 else idx
    args = (idx,) + ((torch.rand(4, 3),) if psw else ())
    other = (torch.randint(0, 10, (9, 3), dtype=idx.dtype),) + \
        ((torch.rand(9, 3),) if psw else ())
    names = ["indices"] + (["weights"] if psw else [])
    result = assert_exports(model, args, more_args=[other], input_names=names,
                            dynamic_axes={n: {0: "B"} for n in names})
    # equal bags lower to a reshape and a reduction, no scatter, also with a dynamic batch
    assert "tract_core_scatter_elements" not in result.op_histogram


# ------------------------------------------------------------------ constant offsets
CONST_LAYOUT = ([1, 3, 2, 2, 5, 7], [0, 0, 2, 2, 4, 6])  # empty start/middle/end, padding-only


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ilo", [False, True], ids=["offsets", "include_last_offset"])
def test_constant_offsets(mode, ilo):
    idx, off = CONST_LAYOUT
    off = off + [len(idx)] if ilo else off
    model = ConstOffsets(torch.tensor(off), mode=mode, padding_idx=2,
                         include_last_offset=ilo).eval()
    args = (torch.tensor(idx),) + ((torch.rand(len(idx)),) if mode == "sum" else ())
    result = assert_exports(model, args)
    assert "tract_core_cumsum" not in result.op_histogram  # bag ids are a constant


def test_constant_offsets_invalid():
    model = ConstOffsets(torch.tensor([0, 3, 1])).eval()
    with pytest.raises(Exception):
        model(torch.tensor([1, 2, 3, 4]))  # PyTorch refuses these offsets too


# ------------------------------------------------------------------ table dtypes
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16], ids=["f64", "f16"])
@pytest.mark.parametrize("mode", MODES)
def test_table_dtypes(mode, dtype):
    model = Bags(mode=mode, padding_idx=2).to(dtype).eval()
    args = (torch.tensor([1, 2, 3, 4, 5, 2]), torch.tensor([0, 0, 2, 4]))
    tol = dict(rtol=1e-2, atol=1e-2) if dtype == torch.float16 else {}
    assert_exports(model, args, **tol)


# ------------------------------------------------------------------ other outputs
class _UsesOutput(nn.Module):
    def __init__(self, k, fn="embedding_bag"):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(10, 3))
        self.k, self.fn = k, fn

    def forward(self, indices, offsets):
        if self.fn == "embedding_bag":
            outs = torch.embedding_bag(self.weight, indices, offsets, False, 2, False, None,
                                       False, None)
        else:
            outs = getattr(torch.ops.aten, self.fn)(self.weight, indices, offsets, False, 1,
                                                   False, None, False, -1)
        return outs[0] * 2, outs[self.k] + 1


@pytest.mark.parametrize("k,name", [(1, "offset2bag"), (2, "bag_size"), (3, "max_indices")])
@pytest.mark.parametrize("fn", ["embedding_bag", "_embedding_bag", "_embedding_bag_forward_only"])
def test_other_outputs_refused_when_used(tmp_path, fn, k, name):
    args = (torch.tensor([1, 2, 3]), torch.tensor([0, 1]))
    with pytest.raises(UnsupportedOperatorsError) as e:
        t2n.export(_UsesOutput(k, fn), args, str(tmp_path / "m.nnef"))
    msg = str(e.value)
    assert f"aten::{fn}" in msg and name in msg and "output 0" in msg


class _ReturnsAll(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(10, 3))

    def forward(self, indices, offsets):
        return torch.embedding_bag(self.weight, indices, offsets, False, 0, False, None, False,
                                   None)


def test_other_outputs_refused_as_model_outputs(tmp_path):
    with pytest.raises(UnsupportedOperatorsError, match="offset2bag"):
        t2n.export(_ReturnsAll(), (torch.tensor([1, 2, 3]), torch.tensor([0, 1])),
                   str(tmp_path / "m.nnef"))


@pytest.mark.parametrize("fn", ["_embedding_bag", "_embedding_bag_forward_only"])
def test_internal_ops_first_output(fn):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(10, 3))

        def forward(self, indices, offsets):
            # padding_idx 4 (internal schema: -1 = none), mode mean
            return getattr(torch.ops.aten, fn)(self.weight, indices, offsets, False, 1, False,
                                               None, False, 4)[0]

    assert_exports(M(), (torch.tensor([1, 4, 4, 2, 3]), torch.tensor([0, 1, 3, 3])))


# ------------------------------------------------------------------ graph size
def _graph_of(model, args, path, **kw):
    """The builder graph ``t2n.export`` would write (after the passes)."""
    from t2n import api

    return api.export_graph(model, args, **kw)


@pytest.mark.parametrize("mode", MODES)
def test_constant_op_count_and_linear_memory(tmp_path, mode):
    """The op count does not depend on the number of bags or indices, and no intermediate
    is num_indices x num_bags."""
    import sympy

    model = Bags(mode=mode, padding_idx=2).eval()
    counts = []
    for n_idx, n_bags in [(6, 3), (300, 120)]:
        idx = torch.randint(0, 10, (n_idx,))
        off = torch.sort(torch.randint(0, n_idx + 1, (n_bags,))).values
        off[0] = 0
        g = _graph_of(model, (idx, off), str(tmp_path / f"m{n_idx}.nnef"))
        counts.append(len(g.live_ops()))
        for op in g.live_ops():
            for o in op.outputs:
                size = int(np.prod([int(d) for d in o.shape])) if o.shape else 1
                assert size <= (n_idx + 1) * 3 + (n_bags + 1) * 3, (op.kind, o.shape)
    assert counts[0] == counts[1]
    g = _graph_of(model, (idx, off), str(tmp_path / "dyn.nnef"),
                  input_names=["indices", "offsets"], dynamic_axes=DYN)
    for op in g.live_ops():
        for o in op.outputs:
            syms = set()
            for d in o.shape:
                if isinstance(d, sympy.Basic):
                    syms |= {s.name for s in d.free_symbols}
            assert syms != {"N", "B"}, (op.kind, o.shape)


def test_aten_2d_indices_refused(tmp_path):
    """Calling the aten op with 2-D indices: PyTorch checks offsets against size(0) but bags
    the flattened indices; t2n refuses it clearly (nn.EmbeddingBag flattens before the op)."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(10, 3))

        def forward(self, indices, offsets):
            return torch.embedding_bag(self.weight, indices, offsets, False, 1, False, None,
                                       False, None)[0]

    with pytest.raises(UnsupportedOperatorsError, match="indices: must be 1-D"):
        t2n.export(M(), (torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([0, 1])),
                   str(tmp_path / "m.nnef"))
