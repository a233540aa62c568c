"""Size expressions with floors proven equal or non-negative by their remainder classes
(t2n/walk/dim_periodic.py), written in one form (t2n/walk/dim_equal.py), and a model that
pads a dynamic axis to whole chunks and reshapes into them (Mamba 2's SSD scan) through
both captures."""

import pytest
import sympy
import torch
import torch.nn.functional as F

from t2n.testing import assert_exports
from t2n.walk.dim_equal import canonical_floors, fold_constant_quotients, known_equal
from t2n.walk.dim_sign import known_nonnegative

S = sympy.Symbol("S", integer=True, positive=True)
B = sympy.Symbol("B", integer=True, positive=True)
T = sympy.Symbol("T", integer=True, nonnegative=True)
floor, Mod = sympy.floor, sympy.Mod
CEIL_S_4 = [-floor(-S / 4), floor(S / 4 + Mod(3 * S, 4) / 4), S - floor(3 * S / 4),
            floor((S + 3) / 4), sympy.ceiling(S / 4)]  # ceil(S/4), as torch writes it


def _brute(e, symbols, sizes=range(0, 40)):
    """``e`` at every size (the test's own check of what the proofs claim)."""
    return [e.xreplace(dict(zip(symbols, v))) for v in
            ([(n,) for n in sizes] if len(symbols) == 1 else [(n, n % 7) for n in sizes])]


@pytest.mark.parametrize("a,b,equal", [
    *[(x, y, True) for x in CEIL_S_4 for y in CEIL_S_4 if x is not y],
    (256 * B * floor(S / 4 + Mod(3 * S, 4) / 4), -256 * B * floor(-S / 4), True),
    (floor(S / 4), floor((S + 3) / 4), False),
    (S - 4 * floor(S / 4), Mod(S, 4), True),
    (floor(floor(S / 2) / 3), floor(S / 6), True),
    (floor(floor(S / 2) / 3), floor(S / 5), False),
    (S + Mod(3 - Mod(S, 3), 3), 3 * sympy.ceiling(S / 3), True),
    (S + Mod(3 - Mod(S, 3), 3), S, False),
    (floor(S / 4) * floor(T / 3), floor(T / 3) * floor(S / 4), True),
    (floor(S * T / 4), floor(S * T / 4) + 1, False),
    (sympy.Max(1, S - 3), S - 3, False),
])
def test_known_equal(a, b, equal):
    assert known_equal(a, b) is equal
    if equal:
        syms = sorted((a - b).free_symbols, key=str)
        assert all(v == 0 for v in _brute(a - b, syms, range(1, 40)))


@pytest.mark.parametrize("e,nonnegative", [
    (4 * floor((S + 3) / 4) - S, True),  # S padded to whole chunks of 4, minus S
    (Mod(3 * S, 4), True), (3 - Mod(S, 4), True), (S - 1, True),
    (S - 2, False), (floor(S / 4) - 1, False), (2 * floor((S + 1) / 2) - S - 1, False),
])
def test_known_nonnegative_by_remainder_classes(e, nonnegative):
    assert known_nonnegative(e) is nonnegative
    assert nonnegative is all(v >= 0 for v in _brute(e, [S], range(1, 40)))


def test_equal_sizes_get_one_form():
    forms = {canonical_floors(e) for e in CEIL_S_4}
    assert len(forms) == 1
    (form,) = forms
    assert all(v == -(-n // 4) for v, n in zip(_brute(form, [S], range(40)), range(40)))
    assert canonical_floors(4 * B * CEIL_S_4[0]) == canonical_floors(4 * B * CEIL_S_4[2])
    # the padding to whole chunks, written as tract can read it and sums to the padded size
    pad = canonical_floors(Mod(3 * S, 4))
    assert sympy.expand(S + pad - 4 * canonical_floors(CEIL_S_4[1])) == 0


def test_a_quotient_that_is_one_number_is_folded():
    chunk = floor((S + Mod(3 * S, 4)) / floor(S / 4 + Mod(3 * S, 4) / 4))
    assert fold_constant_quotients(chunk) == 4
    varying = floor((2 * S + 1) / S)  # 3 at S = 1, 2 after: kept
    assert fold_constant_quotients(varying) == varying


class Chunked(torch.nn.Module):
    """Mamba 2's chunked scan in small: pad S to whole chunks, reshape into (chunks, chunk),
    a cumulative sum inside each chunk, back to (B, S', D) and cropped to S; with
    ``size_back`` the chunk length is computed back from the padded length (a quotient
    torch.export records as an expression, which the trace reads as a tensor's value)."""

    def __init__(self, chunk, size_back=False):
        super().__init__()
        self.chunk, self.size_back = chunk, size_back

    def forward(self, x):
        b, s, d = x.shape
        pad = (self.chunk - s % self.chunk) % self.chunk
        y = F.pad(x, (0, 0, 0, pad))
        n = (s + pad) // self.chunk
        y = y.reshape(b, n, -1, d).cumsum(2)
        if not self.size_back:
            return y.reshape(b, -1, d)[:, :s]
        size = (s + pad) // n  # the chunk length, as the model computes it back
        return y.reshape(b, n * size, d)[:, :s]


MORE = [(torch.randn(1, n, 5),) for n in (1, 5, 7, 9, 16)]


@pytest.mark.parametrize("chunk", [3, 4])
def test_padding_to_whole_chunks_of_a_dynamic_axis(chunk, capture):
    assert_exports(Chunked(chunk), (torch.randn(2, 6, 5),), input_names=["x"],
                   dynamic_axes={"x": {0: "B", 1: "S"}}, capture=capture, more_args=MORE)


@pytest.mark.parametrize("chunk", [3, 4])
def test_chunk_length_computed_back_is_a_number(chunk):
    """``(S + pad) // n`` is ``chunk`` at every S: folded, since tract cannot divide by a
    size (torch.export only: the trace reads the sizes as tensors here)."""
    assert_exports(Chunked(chunk, size_back=True), (torch.randn(2, 6, 5),),
                   input_names=["x"], dynamic_axes={"x": {0: "B", 1: "S"}}, capture="export",
                   more_args=MORE)
