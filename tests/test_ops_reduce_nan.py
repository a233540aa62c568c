"""Float max/min reductions follow PyTorch on NaN (a NaN in the slice gives NaN, and its
first index for max/min with dim and argmax/argmin) and on slices of only -inf / +inf,
where tract's own reductions skip NaN and stop at the finite range."""

import pytest
import torch

from opcases import assert_cases


def _special(dtype=torch.float32):
    inf, nan = float("inf"), float("nan")
    return torch.tensor([
        [-inf, -inf, -inf, -inf],   # only -inf
        [inf, inf, inf, inf],       # only +inf
        [1.0, nan, 2.0, nan],       # NaN in the middle: NaN, first NaN's index
        [nan, nan, nan, nan],
        [-inf, 3.0, inf, -2.0],
        [-3.4028234663852886e38, -inf, -inf, 0.5],  # lowest finite float is a real value
        [0.5, 0.5, -1.0, -1.0],      # ties: first index
    ], dtype=dtype)


CASES = {
    "amax dim 1": lambda x: torch.amax(x, 1),
    "amin dim 1 keepdim": lambda x: torch.amin(x, 1, keepdim=True),
    "amax dim 0": lambda x: torch.amax(x, 0),
    "amin all": lambda x: torch.amin(x),
    "amax dims (0, 1)": lambda x: torch.amax(x.reshape(7, 2, 2), (1, 2)),
    "max dim": lambda x: torch.max(x, 1),
    "min dim keepdim": lambda x: torch.min(x, 1, keepdim=True),
    "max dim 0": lambda x: torch.max(x, 0),
    "max all": lambda x: torch.max(x),
    "min all of rows without NaN": lambda x: torch.min(x[:2]),
    "max all of -inf": lambda x: torch.max(x[0]),
    "argmax dim": lambda x: torch.argmax(x, 1),
    "argmin dim": lambda x: torch.argmin(x, 1),
    "argmax flat": lambda x: torch.argmax(x),
    "argmin flat keepdim": lambda x: torch.argmin(x[4:], keepdim=True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_nan_and_infinities(dtype):
    assert_cases(CASES, (_special(dtype),))


def test_random_values_and_ints_unchanged():
    assert_cases({
        "amax f32": lambda x, i: torch.amax(x, (0, 2)),
        "max dim f32": lambda x, i: torch.max(x, -1),
        "amin int": lambda x, i: torch.amin(i, 1),
        "max dim int": lambda x, i: torch.max(i, 0),
        "argmin int": lambda x, i: torch.argmin(i),
    }, (torch.randn(3, 4, 5), torch.randint(-5, 5, (4, 6))))
