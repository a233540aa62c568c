"""Fresh input sets for the check: other values (and other sizes of the dynamic axes) than
the example's, so a check proves the graph and not one replay of the trace.

A trace freezes whatever it cannot see (a NumPy detour, a tensor read as a Python number,
a size read as an int): the archive then returns the example's results whatever its
inputs. Replaying the example cannot show it; inputs the trace never saw do.

What is drawn, deterministically (``numpy.random.default_rng((seed, set number))``; the
global RNGs of torch and NumPy are not touched):

* floats like the example's own values: from the example's empirical distribution (its
  quantiles, interpolated: same range, same sign, no ties) or, when the example holds a
  few distinct values (a 0/1 mask, -inf/0 biases), from those values at their frequencies;
  an example of one value (a scale, a mask of ones) keeps it;
* integers in ``int_range`` [lo, hi) when given (the CLI's ``--int-range``), else in the
  example's own [min, max]; all distinct when the example's are (permutations, index
  lists); sorted, from the example's first to its last value, when the example is sorted
  (offsets);
* bools at random;
* every dynamic axis also at another size near the example's
  (:meth:`FreshInputs.size_candidates`) and at one far from it
  (:meth:`FreshInputs.far_candidates`: 3n + 1, else 2n, within the user's most size), so a
  count the trace froze (a loop over ``range(S // 4)``) shows even when the near size
  keeps it.
"""

from __future__ import annotations

import numpy as np
import torch

_FEW_DISTINCT = 16  # at most this many distinct example values: a discrete input


class FreshInputs:
    """The fresh sets of one export: ``args`` are the example inputs, ``shapes`` the
    archive's input shapes (a sympy symbol on each dynamic axis)."""

    def __init__(self, args, shapes, int_range=None, seed: int = 0, names=None, most=None):
        self.args = tuple(args)
        self.most = dict(most or {})  # symbol -> the user's most size
        self.shapes = [list(s) for s in shapes]
        # per input: its [lo, hi) (one pair for all, or {input name: pair}), else None
        if isinstance(int_range, dict):
            self.int_ranges = [int_range.get(n) for n in (names or [])] + \
                [None] * (len(self.args) - len(names or []))
        else:
            self.int_ranges = [int_range] * len(self.args)
        self.seed = seed
        self.symbols: dict[str, int] = {}  # symbol -> its example size
        for a, shape in zip(self.args, self.shapes):
            for axis, d in enumerate(shape):
                name = getattr(d, "name", None)
                if name is not None and name not in self.symbols:
                    self.symbols[name] = int(a.shape[axis])

    @classmethod
    def of_export(cls, args, inputs, check, most=None) -> "FreshInputs":
        """The fresh sets of an export's check: ``inputs`` are the graph's input handles,
        ``check`` the session's CheckSettings (``int_range``, ``seed``), ``most`` the
        symbols' most sizes."""
        return cls(args, [t.shape for t in inputs], check.int_range, check.seed or 0,
                   names=[t.name for t in inputs], most=most)

    def same_shapes(self) -> tuple[str, tuple]:
        """("fresh", new values of the example's shapes)."""
        return "fresh", self._draw({}, 1)

    def size_candidates(self) -> list[dict[str, int]]:
        """Sizes to try for the dynamic axes, in order, each a {symbol: size} with every
        symbol off its example size: example + 1, then half of it, then example - 1
        (sizes >= 2; the first one PyTorch accepts is compared). Attempt k gives every
        symbol its k-th size, so symbols of equal example sizes stay equal (two names of
        one sequence length)."""
        per = {s: _sizes(n) for s, n in self.symbols.items()}
        per = {s: c for s, c in per.items() if c}
        if not per:
            return []
        tries = max(len(c) for c in per.values())
        return [{s: c[min(k, len(c) - 1)] for s, c in per.items()} for k in range(tries)]

    def far_candidates(self) -> list[dict[str, int]]:
        """Sizes far from the example, in order (3n + 1, then 2n, each at most the
        symbol's most size and above n + 1), tried after the near one."""
        per = {}
        for s, n in self.symbols.items():
            top = self.most.get(s)
            c = [min(k, top) if top is not None else k for k in (3 * n + 1, 2 * n)]
            c = [k for i, k in enumerate(c) if k > n + 1 and k not in c[:i]]
            if c:
                per[s] = c
        if not per:
            return []
        tries = max(len(c) for c in per.values())
        return [{s: c[min(k, len(c) - 1)] for s, c in per.items()} for k in range(tries)]

    def resized(self, sizes: dict[str, int], attempt: int) -> tuple[str, tuple]:
        name = "fresh " + " ".join(f"{s}={n}" for s, n in sizes.items())
        return name, self._draw(sizes, 2 + attempt)

    def _draw(self, sizes: dict[str, int], number: int) -> tuple:
        rng = np.random.default_rng((self.seed, number))
        # an integer that equals a resized axis' example size follows it (the last offset
        # of an EmbeddingBag with include_last_offset is the number of indices)
        moved = {self.symbols[s]: n for s, n in sizes.items()}
        out = []
        for a, shape, int_range in zip(self.args, self.shapes, self.int_ranges):
            dims = [sizes.get(getattr(d, "name", None), int(n))
                    for d, n in zip(shape, a.shape)]
            out.append(draw_like(a, dims, rng, int_range, moved))
        return tuple(out)


def _sizes(n: int) -> list[int]:
    out = []
    for c in (n + 1, n // 2, n - 1):
        if c >= 2 and c != n and c not in out:
            out.append(c)
    return out


def draw_like(a: torch.Tensor, shape, rng, int_range=None, moved=None) -> torch.Tensor:
    """A tensor of ``shape`` and ``a``'s dtype with values drawn like ``a``'s (``moved``:
    {example size: new size} of the resized axes, for sorted integers ending at one)."""
    count = int(np.prod(shape, dtype=np.int64))
    if a.dtype == torch.bool:
        return torch.from_numpy(rng.random(count) < 0.5).reshape(shape)
    if a.dtype.is_complex:
        real = rng.standard_normal((count, 2))
        return torch.view_as_complex(torch.from_numpy(real)).to(a.dtype).reshape(shape)
    example = a.detach().reshape(-1)
    if a.dtype.is_floating_point:
        values = _floats(example.double().numpy(), count, rng)
    else:
        values = _integers(example.numpy(), a.dtype, count, rng, int_range, moved or {})
    return _laid_out_like(a, torch.from_numpy(values).to(a.dtype).reshape(shape))


def _laid_out_like(a: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``t`` in ``a``'s memory layout: PyTorch picks kernels by layout (a channels-last input
    runs another interpolation kernel, with other rounding), so a fresh set keeps it."""
    for fmt, rank in ((torch.channels_last, 4), (torch.channels_last_3d, 5)):
        if a.dim() == rank and not a.is_contiguous() and a.is_contiguous(memory_format=fmt):
            return t.contiguous(memory_format=fmt)
    return t


def _floats(example: np.ndarray, count: int, rng) -> np.ndarray:
    finite = example[np.isfinite(example)]
    distinct = np.unique(finite)
    specials = example[~np.isfinite(example)]
    if distinct.size == 0:
        return rng.standard_normal(count)
    if distinct.size == 1 and specials.size == 0:  # a point mass (a scale, a mask of ones)
        return np.full(count, distinct[0])
    if distinct.size <= _FEW_DISTINCT and distinct.size * 2 <= example.size or specials.size:
        # a mask, a bias of -inf/0, or values with NaN/Inf: the same values, reshuffled
        return rng.choice(example, count)
    s = np.sort(finite)
    values = np.interp(rng.random(count) * (s.size - 1), np.arange(s.size), s)
    if (finite == np.round(finite)).all():  # whole numbers held as floats (degrees, counts)
        lo, hi = float(s[0]), float(s[-1])
        if np.unique(finite).size < finite.size:
            return np.round(values)
        if hi - lo + 1 >= count:  # all distinct in the example (no ties): distinct again
            return lo + rng.choice(int(hi - lo) + 1, count, replace=False).astype(np.float64)
    return values


def _integers(example: np.ndarray, dtype, count: int, rng, int_range, moved) -> np.ndarray:
    info = torch.iinfo(dtype)
    if int_range is not None:
        lo, hi = max(int_range[0], info.min), min(int_range[1] - 1, info.max)
    elif example.size:
        lo, hi = int(example.min()), int(example.max())
    else:
        lo, hi = 0, 9
    if hi < lo:
        lo, hi = hi, lo
    lo, hi = max(lo, -2 ** 63), min(hi, 2 ** 63 - 1)
    unique = example.size > 1 and np.unique(example).size == example.size
    if unique and hi - lo + 1 >= count and hi - lo < 2 ** 62:
        values = lo + rng.choice(hi - lo + 1, count, replace=False)
    else:
        values = rng.integers(lo, hi, count, dtype=np.int64, endpoint=True)
    if example.size > 1 and (np.diff(example) >= 0).all() and example[0] != example[-1]:
        first, last = int(example[0]), moved.get(int(example[-1]), int(example[-1]))
        values = np.sort(np.clip(values, first, last))  # offsets: sorted, same first and last
        if count:
            values[0], values[-1] = first, last
    return values.astype(np.int64)
