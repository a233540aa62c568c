"""Differential tests (torch eager vs tract) for the long-tail ops: real-output FFTs of real
inputs, histogram/histogramdd, segment_reduce, antialiased upsampling, grid_sampler_3d,
_unsafe_masked_index(_put_accumulate) and _chunk_cat. Cases go beyond the OpInfo samples:
f64, long transforms, dynamic batch axes, empty segments, edge values."""

import pytest
import torch

import t2n
from t2n.testing import assert_exports
from t2n.testing import FunctionModule as Fn


# ---------------------------------------------------------------------------- FFT
FFT = {
    "irfft_default": lambda x: torch.fft.irfft(x),
    "irfft_odd_n_dim0": lambda x: torch.fft.irfft(x, n=7, dim=0, norm="forward"),
    "irfft_pad": lambda x: torch.fft.irfft(x, n=20, norm="ortho"),
    "irfft2_trim": lambda x: torch.fft.irfft2(x, s=(3, 4)),
    "irfftn_all_axes": lambda x: torch.fft.irfftn(x, norm="ortho"),
    "irfftn_s_minus1": lambda x: torch.fft.irfftn(x, s=(-1, 9), dim=(0, 2)),
    "hfft_default": lambda x: torch.fft.hfft(x),
    "hfft_neg_dim": lambda x: torch.fft.hfft(x, n=5, dim=-2, norm="forward"),
    "hfft2_ortho": lambda x: torch.fft.hfft2(x, s=(8, 6), norm="ortho"),
    "hfftn_3axes": lambda x: torch.fft.hfftn(x, dim=(2, 0, 1)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(FFT))
def test_fft_real_output(name, dtype):
    torch.manual_seed(0)
    assert_exports(Fn(FFT[name]), (torch.randn(4, 5, 6, dtype=dtype),))


def test_fft_long_transform_accumulates_in_f64():
    torch.manual_seed(0)
    assert_exports(Fn(lambda x: torch.fft.irfft(x, n=300) * 300), (torch.randn(3, 151),),
                   atol=1e-4)


def test_fft_dynamic_batch_axis():
    torch.manual_seed(0)
    assert_exports(Fn(lambda x: torch.fft.hfft(x, n=10)), (torch.randn(3, 6),),
                   input_names=["x"], dynamic_axes={"x": {0: "B"}},
                   more_args=[(torch.randn(1, 6),), (torch.randn(7, 6),)])


FFT_REFUSED = {  # each capture's reason: trimming or padding S to n // 2 + 1 needs S
    "trace": (t2n.UnsupportedOperatorsError, "dynamic size"),
    # torch's kernel of irfft compares S with 6 to pick a trim or a pad
    "export": (t2n.UsageError, r"frozen by the model.*\(x axis 1 = S\)"),
}


def test_fft_dynamic_transform_axis_is_refused(capture):
    error, reason = FFT_REFUSED[capture]
    with pytest.raises(error, match=reason):
        t2n.export(Fn(lambda x: torch.fft.irfft(x, n=10)), (torch.randn(3, 6),),
                   "/tmp/never.nnef", input_names=["x"], dynamic_axes={"x": {1: "S"}},
                   capture=capture)


# ---------------------------------------------------------------------------- segment_reduce
SEG_DATA = torch.tensor([1.0, 5.0, 2.0, -3.0, 4.0, 7.0, float("nan"), 0.5])


@pytest.mark.parametrize("initial", [None, 10.0], ids=["no_initial", "initial"])
@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
def test_segment_reduce_lengths_with_empty_segments(reduce, initial):
    lengths = torch.tensor([0, 2, 0, 3, 1, 2, 0])  # empty first, middle and last; NaN in one
    assert_exports(Fn(lambda d, l: torch.segment_reduce(d, reduce, lengths=l, initial=initial)),
                   (SEG_DATA, lengths),
                   more_args=[(SEG_DATA.flip(0), torch.tensor([8, 0, 0, 0, 0, 0, 0]))])


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
def test_segment_reduce_offsets_2d_rows(reduce):
    torch.manual_seed(0)
    offsets = torch.tensor([0, 3, 3, 5, 6])
    assert_exports(Fn(lambda d, o: torch.segment_reduce(d, reduce, offsets=o, axis=0)),
                   (torch.randn(6, 3), offsets))


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_segment_reduce_batched_lengths_axis1(reduce):
    torch.manual_seed(0)
    lengths = torch.tensor([[2, 0, 3, 1], [1, 1, 1, 3]])
    assert_exports(Fn(lambda d, l: torch.segment_reduce(d, reduce, lengths=l, axis=1,
                                                        initial=-1.0)),
                   (torch.randn(2, 6, 3, dtype=torch.float64), lengths))


def test_segment_reduce_dynamic_rows():
    assert_exports(Fn(lambda d, l: torch.segment_reduce(d, "sum", lengths=l)),
                   (torch.randn(6, 2), torch.tensor([2, 4])),
                   input_names=["d", "l"], dynamic_axes={"d": {0: "N"}, "l": {0: "S"}},
                   more_args=[(torch.randn(9, 2), torch.tensor([1, 0, 5, 3])),
                              (torch.randn(1, 2), torch.tensor([1]))])


# ---------------------------------------------------------------------------- masked index
def _mi_inputs():
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    rows = torch.tensor([[-1], [0], [3], [9]])          # 9: out of range, masked off
    cols = torch.tensor([[0, 4, -5, -7, 2, 12]])        # -7, 12: out of range, masked off
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[3, :] = False
    mask[:, 3] = False
    mask[:, 5] = False
    mask[1, 1] = False
    return x, mask, rows, cols


@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32], ids=["i64", "i32"])
def test_unsafe_masked_index(idx_dtype):
    x, mask, rows, cols = _mi_inputs()
    f = Fn(lambda x, m, r, c: torch.ops.aten._unsafe_masked_index(x, m, [r, c], -2.5))
    assert_exports(f, (x, mask, rows.to(idx_dtype), cols.to(idx_dtype)))


def test_unsafe_masked_index_one_axis_and_none():
    x = torch.arange(12.0).reshape(3, 4)
    idx = torch.tensor([3, -4, 7, 0])
    mask = torch.tensor([True, True, False, True])
    f = Fn(lambda x, m, i: torch.ops.aten._unsafe_masked_index(x, m, [None, i], 0.5))
    assert_exports(f, (x, mask, idx))


def test_unsafe_masked_index_put_accumulate_duplicates():
    x, mask, rows, cols = _mi_inputs()
    rows = torch.tensor([[0], [0], [-1], [9]])  # duplicate rows accumulate
    values = torch.randn(4, 6)
    f = Fn(lambda x, m, r, c, v:
           torch.ops.aten._unsafe_masked_index_put_accumulate(x, m, [r, c], v))
    assert_exports(f, (x, mask, rows, cols, values))


# ---------------------------------------------------------------------------- _chunk_cat
@pytest.mark.parametrize("dim,chunks", [(0, 3), (1, 2), (-1, 4), (2, 1)])
def test_chunk_cat(dim, chunks):
    torch.manual_seed(0)
    a, b = torch.randn(2, 5, 3), torch.randn(2, 5, 7)
    if dim in (0,):
        b = torch.randn(7, 5, 3)
    elif dim == 1:
        b = torch.randn(2, 3, 7)
    assert_exports(Fn(lambda a, b: torch.ops.aten._chunk_cat([a, b], dim, chunks)), (a, b))


def test_chunk_cat_int_and_dynamic_lead():
    a = torch.arange(30).reshape(3, 10)
    b = torch.arange(9).reshape(3, 3)
    assert_exports(Fn(lambda a, b: torch.ops.aten._chunk_cat([a, b], 1, 4)), (a, b),
                   input_names=["a", "b"], dynamic_axes={"a": {0: "B"}, "b": {0: "B"}},
                   more_args=[(torch.arange(10).reshape(1, 10), torch.arange(3).reshape(1, 3))])


# ---------------------------------------------------------------------------- antialiased resize
AA_CASES = {
    "down_size": dict(size=(4, 7)),
    "up_size": dict(size=(13, 29)),
    "mixed_scale": dict(scale_factor=(1.7, 0.45)),
    "align_corners": dict(size=(5, 6), align_corners=True),
    "to_one": dict(size=(1, 1)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("case", sorted(AA_CASES))
def test_interpolate_antialias(case, mode, dtype):
    torch.manual_seed(0)
    kw = AA_CASES[case]
    assert_exports(Fn(lambda x: torch.nn.functional.interpolate(x, mode=mode, antialias=True,
                                                                **kw)),
                   (torch.randn(2, 3, 10, 20, dtype=dtype),))


def test_interpolate_antialias_dynamic_batch():
    torch.manual_seed(0)
    assert_exports(Fn(lambda x: torch.nn.functional.interpolate(x, size=(3, 5), mode="bicubic",
                                                                antialias=True)),
                   (torch.randn(2, 3, 9, 11),), input_names=["x"],
                   dynamic_axes={"x": {0: "B"}}, more_args=[(torch.randn(5, 3, 9, 11),)])


# ---------------------------------------------------------------------------- histogram
def _hist_data(dtype=torch.float32):
    torch.manual_seed(0)
    x = torch.randn(40, dtype=dtype)
    # exact edges of linspace(-1, 1, 9), the range ends, outside values
    x[:8] = torch.tensor([-1.0, -0.75, 0.0, 0.25, 1.0, -1.5, 2.0, 0.5], dtype=dtype)
    return x


HIST = {
    "bins_only": lambda x, w: torch.histogram(x, 7),
    "range": lambda x, w: torch.histogram(x, 8, range=(-1.0, 1.0)),
    "range_weight_density": lambda x, w: torch.histogram(x, 8, range=(-1.0, 1.0), weight=w,
                                                         density=True),
    "weight": lambda x, w: torch.histogram(x, 5, weight=w),
    "density": lambda x, w: torch.histogram(x, 3, density=True),
    "degenerate_range": lambda x, w: torch.histogram(x, 4, range=(0.25, 0.25)),
    "tensor_edges": lambda x, w: torch.histogram(x, torch.tensor([-2.0, -0.5, 0.0, 0.25, 3.0],
                                                                  dtype=x.dtype), weight=w),
    "tensor_edges_density": lambda x, w: torch.histogram(
        x, torch.tensor([-1.0, 0.0, 0.5, 1.0], dtype=x.dtype), density=True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(HIST))
def test_histogram(name, dtype):
    x = _hist_data(dtype)
    w = torch.rand(40, dtype=dtype)
    # the bin edges of a given range or edges tensor depend on no input: declared so
    edges = ["output_1"] if "range" in name or "edges" in name else []
    assert_exports(Fn(HIST[name]), (x, w), more_args=[(x.flip(0) * 3, w)],
                   constant_outputs=edges)


def test_histogram_nan_skipped_with_range_and_2d_input():
    x = torch.tensor([[0.1, float("nan"), 0.9], [0.5, float("inf"), -0.2]])
    assert_exports(Fn(lambda x: torch.histogram(x, 4, range=(0.0, 1.0))), (x,),
                   constant_outputs=["output_1"])  # the edges of the given range


def test_histogram_all_equal_values():
    assert_exports(Fn(lambda x: torch.histogram(x, 3)), (torch.full((6,), 2.0),),
                   more_args=[(torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),)])


HISTDD = {
    "int_bins": lambda x, w, a, b: torch.histogramdd(x, 3),
    "list_bins_range_weight": lambda x, w, a, b: torch.histogramdd(
        x, [4, 2], range=[-1.0, 1.0, 0.0, 2.0], weight=w),
    "density": lambda x, w, a, b: torch.histogramdd(x, [2, 5], density=True),
    "tensor_edges": lambda x, w, a, b: torch.histogramdd(x, [a, b], weight=w, density=True),
}


@pytest.mark.parametrize("name", sorted(HISTDD))
def test_histogramdd(name):
    torch.manual_seed(0)
    x = torch.randn(3, 10, 2)
    x[0, 0] = torch.tensor([-1.0, 2.0])
    w = torch.rand(3, 10)
    a = torch.tensor([-2.0, -0.5, 0.0, 1.0, 3.0])
    b = torch.tensor([-1.0, 0.5, 2.0])
    # a list of bin counts with a range: the edges depend on no input
    edges = ["output_1", "output_2"] if name == "list_bins_range_weight" else []
    assert_exports(Fn(HISTDD[name]), (x, w, a, b), constant_outputs=edges)


# ---------------------------------------------------------------------------- grid_sampler_3d
@pytest.mark.parametrize("align", [False, True], ids=["no_align", "align"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d(mode, padding, align):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 5, 6)
    grid = torch.rand(2, 3, 4, 2, 3) * 2.6 - 1.3  # some points outside [-1, 1]
    assert_exports(Fn(lambda x, gr: torch.nn.functional.grid_sample(
        x, gr, mode=mode, padding_mode=padding, align_corners=align)), (x, grid))


def test_grid_sample_bicubic_border_clamps_each_tap():
    """PyTorch clamps each of the 16 bicubic taps into the image (tract's own border mode
    clamps the point: up to 0.46 off near the edges); points far outside read the edge."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 7)
    grid = torch.rand(2, 6, 4, 2) * 4 - 2
    assert_exports(Fn(lambda x, gr: tuple(torch.nn.functional.grid_sample(
        x, gr, mode="bicubic", padding_mode="border", align_corners=a) for a in (False, True))),
        (x, grid))


# ---------------------------------------------------------------------------- stft (real view)
STFT = {
    "defaults": lambda x, w: torch.stft(x, 16, return_complex=False),
    "hann_hop": lambda x, w: torch.stft(x, 16, hop_length=5, window=w, return_complex=False),
    "short_window": lambda x, w: torch.stft(x, 16, win_length=10, window=w[:10],
                                            return_complex=False),
    "short_rect_window": lambda x, w: torch.stft(x, 16, win_length=9, return_complex=False),
    "no_center_normalized": lambda x, w: torch.stft(x, 12, center=False, normalized=True,
                                                    return_complex=False),
    "two_sided_constant_pad": lambda x, w: torch.stft(x, 8, onesided=False, pad_mode="constant",
                                                      return_complex=False),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("batch", [False, True], ids=["1d", "2d"])
@pytest.mark.parametrize("name", sorted(STFT))
def test_stft_real_output(name, batch, dtype):
    torch.manual_seed(0)
    x = torch.randn(3, 90, dtype=dtype) if batch else torch.randn(90, dtype=dtype)
    assert_exports(Fn(STFT[name]), (x, torch.hann_window(16, dtype=dtype)))
