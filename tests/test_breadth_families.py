"""Hand-picked cases for the breadth families (math, rearrange, statistics, products,
losses, interpolation, cumulative, order statistics, selection) beyond their OpInfo samples:
edge values, f64, and dynamic axes. Each case is torch eager vs tract."""

import math

import pytest
import torch

from t2n.testing import assert_exports
from t2n.testing import FunctionModule as Fn


EDGE = torch.tensor([0.0, -0.0, 1e-8, -1e-8, 0.5, -0.5, 3.0, -3.0, 1e4, float("inf"),
                     float("-inf"), float("nan")])

UNARY = {
    "log1p": torch.log1p, "expm1": torch.expm1, "exp2": torch.exp2, "log2": torch.log2,
    "log10": torch.log10, "sinc": torch.sinc, "frac": torch.frac, "signbit": torch.signbit,
    "nan_to_num": torch.nan_to_num, "isfinite": torch.isfinite, "isposinf": torch.isposinf,
    "erfc": torch.erfc, "logit": lambda x: torch.logit(x, eps=1e-6),
    "angle": torch.angle, "sgn": torch.sgn, "deg2rad": torch.deg2rad,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_edge_values(name, dtype):
    assert_exports(Fn(UNARY[name]), (EDGE.to(dtype),))


def test_special_unary_in_range():
    x = torch.tensor([-4.5, -1.5, 0.1, 0.5, 1.0, 2.0, 3.7, 10.0, 30.0])
    p = torch.tensor([-0.999, -0.9, -0.3, 0.0, 0.25, 0.75, 0.999])
    assert_exports(Fn(lambda x, p: (torch.lgamma(x), torch.digamma(x), torch.erfinv(p),
                                    torch.special.i0(x), torch.mvlgamma(x.abs() + 2, 3))),
                   (x, p), atol=1e-4)


BINARY = {
    "remainder": torch.remainder, "fmod": torch.fmod, "atan2": torch.atan2,
    "hypot": torch.hypot, "logaddexp": torch.logaddexp, "logaddexp2": torch.logaddexp2,
    "xlogy": torch.xlogy, "copysign": torch.copysign, "heaviside": torch.heaviside,
    "float_power": torch.float_power, "isclose": torch.isclose,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_signed_zeros_and_infinities(name):
    a = torch.tensor([0.0, -0.0, 2.5, -2.5, 7.0, -7.0, float("inf"), 1.0, -3.0])
    b = torch.tensor([-0.0, 1.0, -2.0, 2.0, 3.0, -3.0, 2.0, float("-inf"), 0.5])
    assert_exports(Fn(BINARY[name]), (a, b))


def test_integer_remainder_and_fmod_sign_rules():
    a = torch.tensor([7, -7, 7, -7, 0, 5])
    b = torch.tensor([3, 3, -3, -3, 2, 5])
    assert_exports(Fn(lambda a, b: (torch.remainder(a, b), torch.fmod(a, b))), (a, b))


DYNAMIC = {
    "flip": lambda x: x.flip(1),
    "roll_pos": lambda x: torch.roll(x, 3, 1),
    "roll_neg": lambda x: torch.roll(x, -7, 1),
    "diff": lambda x: torch.diff(x, dim=1),
    "diff_n2": lambda x: torch.diff(x, n=2, dim=1),
    "logsumexp": lambda x: torch.logsumexp(x, 0),
    "cumulative_trapezoid": lambda x: torch.cumulative_trapezoid(x, dim=0),
    "log1p": torch.log1p,
}


@pytest.mark.parametrize("name", sorted(DYNAMIC))
def test_dynamic_axis(name):
    """Exported at size 6, run at 9, 2 and 1: a frozen axis would fail."""
    assert_exports(Fn(DYNAMIC[name]), (torch.randn(2, 6),), input_names=["x"],
                   dynamic_axes={"x": {1: "S"}},
                   more_args=[(torch.randn(2, 9),), (torch.randn(2, 2),), (torch.randn(2, 1),)])


def test_chunk_of_a_dynamic_axis_is_refused_clearly():
    import t2n

    with pytest.raises(t2n.UnsupportedOperatorsError, match="chunking a dynamic axis"):
        t2n.export(Fn(lambda x: x.chunk(2, 1)[0]), (torch.randn(2, 6),), "/tmp/never.nnef",
                   input_names=["x"], dynamic_axes={"x": {1: "S"}})


def test_statistics_and_norms():
    x = torch.randn(3, 5, 4)
    assert_exports(Fn(lambda x: (torch.var(x, 1), torch.std(x, (0, 2), correction=0),
                                 torch.var_mean(x, -1, keepdim=True), torch.aminmax(x, dim=1),
                                 torch.linalg.vector_norm(x, 3.5, (1, 2)),
                                 torch.linalg.matrix_norm(x, "fro"),
                                 torch.nanmean(x.masked_fill(x > 1, math.nan), 1),
                                 torch.cdist(x, x), torch.histc(x, 7, -1, 1),
                                 # norms over the broadcast shape
                                 torch.cosine_similarity(x[:1], x[:, :1], dim=1),
                                 torch.diff(x, n=0, dim=1, prepend=x[:, :2]),
                                 torch.linalg.matrix_norm(x[:, :0], float("inf")),
                                 torch.linalg.vector_norm(x.masked_fill(x > 1, math.nan),
                                                          float("inf"), 1))), (x,),
                   constant_outputs=["output_13"])  # the norm of an empty matrix: zeros


def test_products():
    a, b = torch.randn(2, 3, 4), torch.randn(4, 3, 5)
    assert_exports(Fn(lambda a, b: (torch.tensordot(a, b, ([1, 2], [1, 0])),
                                    torch.kron(a[0], b[0, :2]),
                                    torch.linalg.cross(a[0, :, :3], a[1, :, :3]),
                                    torch.outer(a[0, 0], b[0, 0]))), (a, b))


def test_interpolation_modes():
    """Also PyTorch's special sizes: its channels-last kernel (2-D outputs of height + width
    <= 128, channels-last inputs of > 3 channels) reads nearest indices as a copy or a shift
    for 1x and 2x sizes whatever the scale_factor, and linear modes copy an axis whose size
    stays the same."""
    F = torch.nn.functional
    x = torch.randn(1, 2, 5, 7)
    v = torch.randn(1, 4, 3, 5, 7).contiguous(memory_format=torch.channels_last_3d)
    assert_exports(Fn(lambda x, v: (
        F.interpolate(x, scale_factor=2, mode="nearest"),
        F.interpolate(x, size=(3, 11), mode="bilinear", align_corners=True),
        F.interpolate(x, size=(9, 4), mode="bicubic", align_corners=False),
        F.interpolate(x, scale_factor=1.7, mode="nearest-exact"),
        F.interpolate(x, scale_factor=2.1, mode="nearest", recompute_scale_factor=False),
        F.interpolate(x, scale_factor=1.1, mode="bilinear", recompute_scale_factor=False),
        F.interpolate(v, scale_factor=(1.2, 2.1, 1.1), mode="nearest",
                      recompute_scale_factor=False),
        F.interpolate(v, scale_factor=1.1, mode="trilinear", recompute_scale_factor=False))),
        (x, v))


def test_losses_with_reductions():
    x, t = torch.randn(4, 5), torch.randint(0, 5, (4,))
    p = torch.rand(4, 5)
    assert_exports(Fn(lambda x, t, p: (
        torch.nn.functional.cross_entropy(x, t, label_smoothing=0.1),
        torch.nn.functional.cross_entropy(x, p.softmax(1), reduction="sum"),
        torch.nn.functional.nll_loss(x.log_softmax(1), t, ignore_index=2, reduction="none"),
        torch.nn.functional.binary_cross_entropy_with_logits(x, p, pos_weight=torch.ones(5) * 2),
        torch.nn.functional.huber_loss(x, p, delta=0.5),
        torch.nn.functional.kl_div(x.log_softmax(1), p, reduction="batchmean"))), (x, t, p))


def test_scans_and_order_statistics():
    x = torch.tensor([[3.0, 1.0, 4.0, 1.0, 5.0, 9.0], [2.0, 6.0, 5.0, 3.0, 5.0, 8.0]])
    assert_exports(Fn(lambda x: (torch.cumprod(x, 1), torch.cummax(x, 1), torch.cummin(x, 0),
                                 torch.logcumsumexp(x, 1), torch.median(x, 1),
                                 torch.kthvalue(x, 2, 1), torch.quantile(x, 0.3, 1),
                                 torch.mode(x, 1), torch.nanmedian(x))), (x,))


def test_data_dependent_selections():
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    assert_exports(Fn(lambda x: (torch.nonzero(x), torch.masked_select(x, x > 0),
                                 torch.nonzero_static(x, size=5))), (x,))
