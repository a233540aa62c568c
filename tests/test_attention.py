"""Differential tests for the transformer ops of t2n/mappings/attention.py, each exported
once with a static shape and once with dynamic axes run at two other sizes."""

import pytest
import torch
import torch.nn.functional as F

from t2n.errors import UnsupportedOperatorsError
from t2n.testing import assert_exports
from t2n.testing import FunctionModule as Fn


# every test through both front ends (torch.jit.trace, torch.export): see conftest.capture
pytestmark = pytest.mark.usefixtures("capture")

def _names(n):
    return [f"x{i}" for i in range(n)]


def check(fn, args, dyn=None, more=(), **kw):
    """Export ``fn`` on ``args``; with ``dyn`` ({input index: {axis: symbol}}) also run the
    same archive on every input tuple of ``more``."""
    names = _names(len(args))
    dynamic_axes = {names[i]: axes for i, axes in (dyn or {}).items()}
    return assert_exports(Fn(fn), tuple(args), input_names=names,
                          dynamic_axes=dynamic_axes or None, more_args=list(more), **kw)


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


# ------------------------------------------------------------------ scaled_dot_product_attention
SDPA_CASES = {
    "plain": dict(),
    "causal": dict(is_causal=True),
    "scale": dict(scale=0.3),
    "causal_scale": dict(is_causal=True, scale=2.0),
}


@pytest.mark.parametrize("kw", SDPA_CASES.values(), ids=SDPA_CASES.keys())
def test_sdpa_static(kw):
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw),
          [r(2, 3, 5, 4), r(2, 3, 5, 4), r(2, 3, 5, 6)])


def test_sdpa_cross_lengths_causal():
    # L != S: torch's causal mask is top-left aligned (tril of ones(L, S))
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
          [r(1, 2, 3, 4), r(1, 2, 6, 4), r(1, 2, 6, 4)])


@pytest.mark.parametrize("kw", SDPA_CASES.values(), ids=SDPA_CASES.keys())
def test_sdpa_dynamic(kw):
    dyn = {i: {0: "B", 2: "S"} for i in range(3)}
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw),
          [r(2, 3, 8, 4), r(2, 3, 8, 4), r(2, 3, 8, 4)], dyn,
          more=[(r(1, 3, 13, 4), r(1, 3, 13, 4), r(1, 3, 13, 4)),
                (r(3, 3, 2, 4), r(3, 3, 2, 4), r(3, 3, 2, 4))])


def test_sdpa_bool_mask_dynamic():
    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    def mask(b, s):
        m = torch.rand(b, 1, s, s) > 0.4
        m[..., 0] = True  # no fully masked row
        return m

    check(f, [r(2, 2, 8, 4), r(2, 2, 8, 4), r(2, 2, 8, 4), mask(2, 8)],
          {0: {0: "B", 2: "S"}, 1: {0: "B", 2: "S"}, 2: {0: "B", 2: "S"},
           3: {0: "B", 2: "S", 3: "S"}},
          more=[(r(3, 2, 13, 4), r(3, 2, 13, 4), r(3, 2, 13, 4), mask(3, 13))])


def test_sdpa_float_mask_dynamic():
    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    check(f, [r(2, 2, 8, 4), r(2, 2, 8, 4), r(2, 2, 8, 4), r(2, 1, 8, 8)],
          {0: {0: "B", 2: "S"}, 1: {0: "B", 2: "S"}, 2: {0: "B", 2: "S"},
           3: {0: "B", 2: "S", 3: "S"}},
          more=[(r(1, 2, 5, 4), r(1, 2, 5, 4), r(1, 2, 5, 4), r(1, 1, 5, 5))])


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_fully_masked_row_is_zero(kind):
    m = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    m[0, 0, 1] = False
    if kind == "float":
        m = torch.zeros(m.shape).masked_fill(~m, float("-inf"))
    check(lambda q, m: F.scaled_dot_product_attention(q, q, q, attn_mask=m), [r(2, 3, 4, 5), m])


def test_sdpa_gqa_dynamic():
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    dyn = {i: {2: "S"} for i in range(3)}
    check(f, [r(1, 4, 6, 8), r(1, 2, 6, 8), r(1, 2, 6, 8)], dyn,
          more=[(r(1, 4, 11, 8), r(1, 2, 11, 8), r(1, 2, 11, 8))])


def test_sdpa_3d_inputs_and_2d_masks():
    bool_mask = torch.rand(5, 6) > 0.3
    bool_mask[:, 0] = True
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
          [r(2, 5, 4), r(2, 6, 4), r(2, 6, 3), bool_mask])
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
          [r(2, 2, 5, 4), r(2, 2, 6, 4), r(2, 2, 6, 4), r(5, 6)])


def test_sdpa_f64():
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
          [r(2, 5, 4, dtype=torch.float64)] * 3)


def test_sdpa_dropout_refused():
    class Drop(torch.nn.Module):
        def forward(self, q):
            return F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)

    with pytest.raises(UnsupportedOperatorsError, match="dropout_p"):
        assert_exports(Drop(), (r(1, 2, 3, 4),))


# ------------------------------------------------------------------ einsum
EINSUM_CASES = {
    "matmul": ("ij,jk->ik", [(3, 4), (4, 5)]),
    "batched": ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    "implicit_out": ("ij,jk", [(3, 4), (4, 5)]),
    "ellipsis_left": ("...ij,...jk->...ik", [(2, 3, 3, 4), (2, 3, 4, 5)]),
    "ellipsis_broadcast": ("...ij,...jk->...ik", [(2, 3, 3, 4), (4, 5)]),
    "ellipsis_implicit": ("...ij,jk", [(2, 3, 4), (4, 5)]),
    "ellipsis_mid": ("i...j->j...i", [(2, 3, 4, 5)]),
    "trace": ("ii->i", [(4, 4)]),
    "sum_all": ("ij->", [(3, 4)]),
    "outer": ("i,j->ij", [(3,), (4,)]),
    "three": ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)]),
    "attention": ("bhqd,bhkd->bhqk", [(2, 3, 5, 4), (2, 3, 6, 4)]),
    "upper": ("Ab,bC->AC", [(3, 4), (4, 2)]),
    "spaces": (" ij , jk -> ik ", [(3, 4), (4, 5)]),
}


@pytest.mark.parametrize("eq,shapes", EINSUM_CASES.values(), ids=EINSUM_CASES.keys())
def test_einsum(eq, shapes):
    check(lambda *xs: torch.einsum(eq, *xs), [r(*s) for s in shapes])


def test_einsum_dynamic():
    def f(a, b):
        return torch.einsum("...sd,de->...se", a, b)

    check(f, [r(2, 8, 4), r(4, 3)], {0: {0: "B", 1: "S"}}, more=[(r(3, 13, 4), r(4, 3))])


def test_einsum_f64_and_i32():
    check(lambda a, b: torch.einsum("ij,jk->ik", a, b), [r(3, 4, dtype=torch.float64),
                                                         r(4, 2, dtype=torch.float64)])
    a = torch.randint(-5, 5, (3, 4), dtype=torch.int32)
    b = torch.randint(-5, 5, (4, 2), dtype=torch.int32)
    check(lambda a, b: torch.einsum("ij,jk->ik", a, b), [a, b])


def test_einsum_i64_is_exact():
    """Integer einsum: an element-wise product and one sum, exact with int64 wrap-around."""
    a = torch.randint(-5, 5, (3, 4))
    big = torch.full((2, 3), 2**40, dtype=torch.int64)
    check(lambda a, big: (torch.einsum("ij,jk->ik", a, a.t().contiguous()),
                          torch.einsum("ij,kj->ik", big, big)), [a, big])


# ------------------------------------------------------------------ baddbmm
BADDBMM_CASES = {
    "default": dict(),
    "alpha_beta": dict(alpha=0.5, beta=2.0),
    "beta0": dict(beta=0.0),
}


@pytest.mark.parametrize("kw", BADDBMM_CASES.values(), ids=BADDBMM_CASES.keys())
def test_baddbmm(kw):
    nan_self = kw.get("beta") == 0.0

    def f(s, a, b):
        if nan_self:
            s = s * float("nan")
        return torch.baddbmm(s, a, b, **kw)

    check(f, [r(2, 3, 5), r(2, 3, 4), r(2, 4, 5)])


def test_baddbmm_broadcast_self_dynamic():
    check(lambda s, a, b: torch.baddbmm(s, a, b), [r(5), r(2, 3, 4), r(2, 4, 5)],
          {1: {0: "B", 1: "S"}, 2: {0: "B"}},
          more=[(r(5), r(4, 7, 4), r(4, 4, 5))])


def test_sdpa_masks_cost_the_masks_size_not_the_scores():
    """A bool mask is added as a 0 / -inf bias made on the mask's own shape (as PyTorch
    converts it), and the rows a mask closes are found on the mask and zeroed on the output
    (not a select and a test over every head's scores); a causal one closes no row."""
    from t2n.api import export_graph

    q = r(1, 8, 6, 4)
    m = torch.rand(1, 1, 6, 6) > 0.5
    g = export_graph(Fn(lambda q, m: F.scaled_dot_product_attention(q, q, q, attn_mask=m)),
                     (q, m))
    hist = g.op_histogram()
    assert "ne" not in hist and hist.get("any_reduce") == 1, hist
    any_in = [op.args[0] for op in g.ops if op.kind == "any_reduce"][0]
    assert any_in.shape[1] == 1, "the open rows are read on the mask, not per head"
    causal = export_graph(Fn(lambda q: F.scaled_dot_product_attention(q, q, q,
                                                                      is_causal=True)), (q,))
    assert "any_reduce" not in causal.op_histogram()


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_closed_rows_with_broadcast_masks(kind):
    """Closed rows in masks that broadcast over batch, heads or queries."""
    m = torch.rand(2, 1, 1, 7) > 0.5
    m[1] = False  # every query of batch 1 closed
    m[0, ..., 0] = True
    if kind == "float":
        m = torch.zeros(m.shape).masked_fill(~m, float("-inf"))
    check(lambda q, k, m: F.scaled_dot_product_attention(q, k, k, attn_mask=m),
          [r(2, 3, 5, 4), r(2, 3, 7, 4), m])
