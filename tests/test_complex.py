"""Differential tests (torch eager vs tract) for complex tensors inside the graph: their
(re, im) real form, construction and parts, arithmetic, layout ops, the FFT family and the
STFT on tract's FFT ops, with float32/float64 parts, odd/even lengths, norms, ``n``/``s``
padding and trimming, dynamic lengths; and the refusal of complex model inputs/outputs."""

import pytest
import torch

import t2n
from t2n.testing import assert_exports
from t2n.testing import FunctionModule as Fn

DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
R = torch.view_as_real


def _z(x):
    """A complex tensor from the pairs of a real one's last axis (an odd last value dropped)."""
    x = x[..., :x.shape[-1] // 2 * 2].contiguous()
    return torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))


# ---------------------------------------------------------------------------- arithmetic
ARITH = {
    "roundtrip": lambda x, y: R(_z(x)),
    "complex_parts": lambda x, y: R(torch.complex(x, y)),
    "add": lambda x, y: R(_z(x) + _z(y)),
    "sub_alpha": lambda x, y: R(torch.sub(_z(x), _z(y), alpha=3)),
    "rsub_scalar": lambda x, y: R(2.5 - _z(x)),
    "mul": lambda x, y: R(_z(x) * _z(y)),
    "mul_real_broadcast": lambda x, y: R(_z(x) * y[:1, :4]),
    "mul_real_wider": lambda x, y: R(_z(x)[0] * y[:, :4]),
    "mul_scalar": lambda x, y: R(_z(x) * 0.5),
    "mul_complex_scalar": lambda x, y: R(_z(x) * (1 - 2j)),
    "div": lambda x, y: R(_z(x) / (_z(y) + 3)),
    "div_real": lambda x, y: R(_z(x) / (y[:, :4].abs() + 1)),
    "neg": lambda x, y: R(-_z(x)),
    "abs": lambda x, y: _z(x).abs(),
    "abs_sq": lambda x, y: _z(x).abs() ** 2,
    "angle": lambda x, y: _z(x).angle(),
    "real_imag": lambda x, y: (_z(x).real * 2, _z(x).imag - 1),
    "conj_mul": lambda x, y: R(_z(x) * _z(y).conj()),
    "conj_physical": lambda x, y: R(torch.conj_physical(_z(x))),
    "polar": lambda x, y: R(torch.polar(x.abs(), y)),
    "pow2": lambda x, y: R(_z(x) ** 2),
    "pow_half": lambda x, y: R(_z(x) ** 0.5),
    "exp": lambda x, y: R(torch.exp(_z(x) * 0.3)),
    "sum_mean": lambda x, y: (R(_z(x).sum(0)), R(_z(x).mean(dim=-1, keepdim=True)),
                              R(_z(x).sum())),
    "to_complex": lambda x, y: R(x.to(torch.complex64 if x.dtype == torch.float32
                                     else torch.complex128) * _z(y)[:, :1]),
}


@DTYPES
@pytest.mark.parametrize("name", sorted(ARITH))
def test_complex_arithmetic(name, dtype):
    torch.manual_seed(0)
    x, y = torch.randn(3, 8, dtype=dtype), torch.randn(3, 8, dtype=dtype)
    assert_exports(Fn(ARITH[name]), (x, y))


# ---------------------------------------------------------------------------- layout
LAYOUT = {
    "reshape": lambda z: R(z.reshape(2, -1)),
    "flatten": lambda z: R(z.flatten(1)),
    "flatten_neg": lambda z: R(z.flatten(-2, -1)),
    "transpose": lambda z: R(z.transpose(0, -1)),
    "permute": lambda z: R(z.permute(2, 0, 1)),
    "slice": lambda z: R(z[:, 1:, ::2]),
    "slice_last": lambda z: R(z[..., :-1]),
    "select": lambda z: R(z[:, -1]),
    "unsqueeze": lambda z: R(z[:, None, :, None]),
    "squeeze": lambda z: R(z[:1].squeeze(0)),
    "cat": lambda z: R(torch.cat([z, z * 2], dim=-1)),
    "cat_real": lambda z: R(torch.cat([z, z.real], dim=1)),
    "stack": lambda z: R(torch.stack([z, z.conj()], dim=-1)),
    "expand": lambda z: R(z[:, :1].expand(-1, 5, -1)),
    "flip": lambda z: R(z.flip(-1)),
    "chunk": lambda z: tuple(R(c) for c in z.chunk(2, dim=-1)),
    "fftshift": lambda z: R(torch.fft.fftshift(z)),
}


@DTYPES
@pytest.mark.parametrize("name", sorted(LAYOUT))
def test_complex_layout(name, dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 2, dtype=dtype)
    assert_exports(Fn(lambda x: LAYOUT[name](torch.view_as_complex(x))), (x,))


# ---------------------------------------------------------------------------- FFT family
def _fft_cases():
    cases = {}
    for norm in (None, "ortho", "forward"):
        for n in (None, 5, 12):
            cases[f"fft_n{n}_{norm}"] = lambda x, n=n, norm=norm: R(torch.fft.fft(x, n=n, norm=norm))
            cases[f"ifft_n{n}_{norm}"] = lambda x, n=n, norm=norm: R(
                torch.fft.ifft(_z(x), n=n, dim=1, norm=norm))
            cases[f"rfft_n{n}_{norm}"] = lambda x, n=n, norm=norm: R(
                torch.fft.rfft(x, n=n, dim=0, norm=norm))
            cases[f"irfft_n{n}_{norm}"] = lambda x, n=n, norm=norm: torch.fft.irfft(
                torch.fft.rfft(x) * (1 + 0.5j), n=n, norm=norm)
            cases[f"hfft_n{n}_{norm}"] = lambda x, n=n, norm=norm: torch.fft.hfft(
                _z(x), n=n, dim=-2, norm=norm)
            cases[f"ihfft_n{n}_{norm}"] = lambda x, n=n, norm=norm: R(
                torch.fft.ihfft(x, n=n, norm=norm).resolve_conj())
        cases[f"fftn_{norm}"] = lambda x, norm=norm: R(torch.fft.fftn(x, norm=norm))
        cases[f"fft2_s_{norm}"] = lambda x, norm=norm: R(torch.fft.fft2(x, s=(3, 10), norm=norm))
        cases[f"ifftn_dims_{norm}"] = lambda x, norm=norm: R(
            torch.fft.ifftn(_z(x), dim=(0, 2), norm=norm))
        cases[f"rfftn_{norm}"] = lambda x, norm=norm: R(torch.fft.rfftn(x, dim=(2, 0), norm=norm))
        cases[f"rfft2_s_{norm}"] = lambda x, norm=norm: R(torch.fft.rfft2(x, s=(6, 7), norm=norm))
        cases[f"irfftn_{norm}"] = lambda x, norm=norm: torch.fft.irfftn(
            torch.fft.rfftn(x) * 1j, norm=norm)
        cases[f"hfftn_{norm}"] = lambda x, norm=norm: torch.fft.hfftn(
            _z(x), s=(4, 3, 6), norm=norm)
        cases[f"hfft2_{norm}"] = lambda x, norm=norm: torch.fft.hfft2(_z(x) * 1j, norm=norm)
        cases[f"ihfftn_{norm}"] = lambda x, norm=norm: R(
            torch.fft.ihfftn(x, dim=(0, 2), norm=norm).resolve_conj())
        cases[f"ihfft2_s_{norm}"] = lambda x, norm=norm: R(
            torch.fft.ihfft2(x, s=(3, 9), norm=norm).resolve_conj())
        cases[f"irfft2_s_{norm}"] = lambda x, norm=norm: torch.fft.irfft2(
            torch.fft.fft2(x), s=(4, 9), norm=norm)
    return cases


FFT = _fft_cases()


@DTYPES
@pytest.mark.parametrize("shape", [(3, 4, 8), (2, 5, 7)], ids=["even", "odd"])
@pytest.mark.parametrize("name", sorted(FFT))
def test_complex_fft(name, shape, dtype):
    torch.manual_seed(0)
    assert_exports(Fn(FFT[name]), (torch.randn(*shape, dtype=dtype),), atol=1e-4)


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_complex_fft_dynamic_length(norm):
    torch.manual_seed(0)
    f = Fn(lambda x: (R(torch.fft.fft(x, dim=1, norm=norm)),
                      R(torch.fft.rfft(x, norm=norm)).sum(-1),
                      torch.fft.ifft(torch.fft.fft(x, norm=norm), norm=norm).real))
    assert_exports(f, (torch.randn(2, 12),), atol=1e-4, input_names=["x"],
                   dynamic_axes={"x": {1: "T"}},
                   more_args=[(torch.randn(2, 9),), (torch.randn(2, 31),)])


def test_complex_fft_long_transform():
    torch.manual_seed(0)
    x = torch.randn(2, 4000)
    assert_exports(Fn(lambda x: torch.fft.irfft(torch.fft.rfft(x) * torch.fft.rfft(x).conj(),
                                                n=4000)), (x,), atol=1e-3)


# ---------------------------------------------------------------------------- STFT
STFT = {
    "defaults": lambda x, w: torch.stft(x, 16, return_complex=True),
    "hann_hop": lambda x, w: torch.stft(x, 16, hop_length=5, window=w, return_complex=True),
    "short_window": lambda x, w: torch.stft(x, 16, win_length=10, window=w[:10],
                                            return_complex=True),
    "short_rect_window": lambda x, w: torch.stft(x, 16, win_length=9, return_complex=True),
    "no_center_normalized": lambda x, w: torch.stft(x, 12, center=False, normalized=True,
                                                    return_complex=True),
    "two_sided_constant_pad": lambda x, w: torch.stft(x, 8, onesided=False, pad_mode="constant",
                                                      return_complex=True),
    "odd_nfft": lambda x, w: torch.stft(x, 15, hop_length=4, window=w[:15],
                                        return_complex=True),
}


@DTYPES
@pytest.mark.parametrize("batch", [False, True], ids=["1d", "2d"])
@pytest.mark.parametrize("name", sorted(STFT))
def test_complex_stft(name, batch, dtype):
    torch.manual_seed(0)
    x = torch.randn(3, 90, dtype=dtype) if batch else torch.randn(90, dtype=dtype)
    w = torch.hann_window(16, dtype=dtype)
    assert_exports(Fn(lambda x: R(STFT[name](x, w))), (x,), atol=1e-4)


def test_complex_stft_of_complex_signal():
    torch.manual_seed(0)
    x = torch.randn(2, 50, 2)
    w = torch.hann_window(8)
    assert_exports(Fn(lambda x: R(torch.stft(torch.view_as_complex(x), 8, hop_length=3,
                                             window=w, return_complex=True))), (x,))


def test_complex_stft_dynamic_length():
    torch.manual_seed(0)
    w = torch.hann_window(16)
    assert_exports(Fn(lambda x: torch.stft(x, 16, hop_length=4, window=w,
                                           return_complex=True).abs()),
                   (torch.randn(2, 100),), atol=1e-4, input_names=["x"],
                   dynamic_axes={"x": {1: "T"}},
                   more_args=[(torch.randn(2, 61),), (torch.randn(2, 203),)])


def test_complex_stft_runtime_window_is_refused():
    with pytest.raises(t2n.UnsupportedOperatorsError, match="window"):
        t2n.export(Fn(lambda x, w: R(torch.stft(x, 8, window=w, return_complex=True))),
                   (torch.randn(40), torch.hann_window(8)), "/tmp/never.nnef")


# ---------------------------------------------------------------------------- boundaries
def test_complex_output_is_refused_naming_it():
    with pytest.raises(t2n.ConversionError, match="output spectrum is complex"):
        t2n.export(Fn(lambda x: torch.fft.rfft(x)), (torch.randn(3, 8),), "/tmp/never.nnef",
                   output_names=["spectrum"])


def test_complex_input_is_refused_naming_it():
    with pytest.raises(t2n.UsageError, match="input z has dtype torch.complex64.*view_as_real"):
        t2n.export(Fn(lambda z: z.real), (torch.randn(3, 4, dtype=torch.complex64),),
                   "/tmp/never.nnef", input_names=["z"])


def test_complex_op_without_lowering_is_refused():
    with pytest.raises(t2n.UnsupportedOperatorsError, match="complex"):
        t2n.export(Fn(lambda x: R(torch.sigmoid(_z(x)))), (torch.randn(3, 4),),
                   "/tmp/never.nnef")


def test_complex_sizes_are_pytorchs():
    """``size``/``numel``/``dim`` of a complex tensor read PyTorch's shape, not the real
    form's (whose pair axis is last)."""
    def f(x):
        z = torch.fft.rfft(x)
        return x[..., :z.size(-1)] * z.dim() + z.numel() + z.shape[0]

    assert_exports(Fn(f), (torch.randn(3, 10),), input_names=["x"],
                   dynamic_axes={"x": {1: "T"}}, more_args=[(torch.randn(3, 15),)])


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_complex_through_both_captures(capture):
    torch.manual_seed(0)

    def f(x):
        z = torch.fft.rfft(x, dim=1)
        z = z * torch.polar(torch.ones_like(z.real), z.real * 0.1)
        return torch.fft.irfft(z.conj(), n=x.shape[1], dim=1), R(z[:, :3].transpose(0, 1))

    assert_exports(Fn(f), (torch.randn(2, 12, 3),), atol=1e-4, capture=capture)


@pytest.mark.parametrize("name", sorted(k for k in FFT if "_n5_" not in k))
def test_complex_fft_export_capture(name):
    """torch.export decomposes the FFTs into _fft_r2c/_fft_c2c/_fft_c2r."""
    torch.manual_seed(0)
    assert_exports(Fn(FFT[name]), (torch.randn(2, 5, 8),), atol=1e-4, capture="export")


ISTFT = {
    "hann_hop4": dict(n_fft=16, hop_length=4, window="hann"),
    "hann_hop5_gcd": dict(n_fft=16, hop_length=6, window="hann"),
    "odd_nfft": dict(n_fft=15, hop_length=5, window="hann"),
    "short_window_normalized": dict(n_fft=16, hop_length=3, win_length=10, window="hann10",
                                    normalized=True),
    "no_center_no_window": dict(n_fft=12, hop_length=3, window=None, center=False),
    "length_longer": dict(n_fft=16, hop_length=4, window="hann", length=100),
    "length_shorter": dict(n_fft=16, hop_length=4, window="hann", length=50),
    "two_sided": dict(n_fft=8, hop_length=2, window="hann8", onesided=False),
}


def _istft_case(name, dtype):
    kw = dict(ISTFT[name])
    w = kw.pop("window")
    if w is None:
        return kw, None
    size = {"hann": kw["n_fft"], "hann10": 10, "hann8": 8}[w]
    return kw, torch.hann_window(size, dtype=dtype)


@DTYPES
@pytest.mark.parametrize("batch", [False, True], ids=["1d", "2d"])
@pytest.mark.parametrize("name", sorted(ISTFT))
def test_complex_istft(name, batch, dtype, capture):
    """Through both captures: torch.export keeps istft one op (t2n::istft,
    t2n/capture/leaf_ops.py), as the trace records it; torch's own decomposition asserts a
    frame size an odd n_fft does not give."""
    torch.manual_seed(0)
    kw, window = _istft_case(name, dtype)
    stft_kw = {k: v for k, v in kw.items() if k != "length"}
    x = torch.randn(2, 80, dtype=dtype) if batch else torch.randn(80, dtype=dtype)

    def f(x):
        spec = torch.stft(x, window=window, return_complex=True, **stft_kw)
        return torch.istft(spec * 1.5, window=window, **kw)

    assert_exports(Fn(f), (x,), atol=1e-4)


def test_complex_istft_dynamic_length(capture):
    """A dynamic signal length, hence frame count (torch.export's decomposition of istft
    unfolds along the frame axis, which t2n cannot map when it is dynamic)."""
    torch.manual_seed(0)
    w = torch.hann_window(16)

    def f(x):
        spec = torch.stft(x, 16, hop_length=6, window=w, return_complex=True)
        return torch.istft(spec, 16, hop_length=6, window=w)

    assert_exports(Fn(f), (torch.randn(2, 90),), atol=1e-4, input_names=["x"],
                   dynamic_axes={"x": {1: "T"}},
                   more_args=[(torch.randn(2, 61),), (torch.randn(2, 150),)])
