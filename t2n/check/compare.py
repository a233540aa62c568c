"""Compare tract's outputs with PyTorch's: the definition of a correct export.

Floats: ``|tract - torch| <= atol + rtol * |torch|`` element-wise, NaN where torch has NaN,
infinities equal. Integers and bools: exact. Shapes and dtypes must match too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5


@dataclass
class OutputCheck:
    name: str
    ok: bool
    max_abs_err: float
    max_rel_err: float
    message: str = ""
    input_set: str = ""  # the input set the figures come from (t2n.check.input_sets)

    def line(self) -> str:
        status = "ok" if self.ok else "MISMATCH"
        extra = f" ({self.message})" if self.message else ""
        return (f"{self.name}: {status} max_abs_err={self.max_abs_err:.3g} "
                f"max_rel_err={self.max_rel_err:.3g}{extra}")


def compare(name: str, expected: np.ndarray, actual: np.ndarray, rtol: float = DEFAULT_RTOL,
            atol: float = DEFAULT_ATOL) -> OutputCheck:
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    if expected.shape != actual.shape:
        return OutputCheck(name, False, float("inf"), float("inf"),
                           f"shape {list(actual.shape)} in tract, {list(expected.shape)} in torch")
    if expected.dtype != actual.dtype:
        return OutputCheck(name, False, float("inf"), float("inf"),
                           f"dtype {actual.dtype} in tract, {expected.dtype} in torch")
    if expected.size == 0:
        return OutputCheck(name, True, 0.0, 0.0)
    if expected.dtype.kind in "biu":
        diff = expected.astype(np.float64) - actual.astype(np.float64) \
            if expected.dtype.kind != "b" else (expected != actual).astype(np.float64)
        err = float(np.abs(diff).max())
        return OutputCheck(name, err == 0, err, err, "" if err == 0 else "integers differ")
    e = expected.astype(np.float64)
    a = actual.astype(np.float64)
    nan_e, nan_a = np.isnan(e), np.isnan(a)
    if (nan_e != nan_a).any():
        n = int((nan_e != nan_a).sum())
        return OutputCheck(name, False, float("nan"), float("nan"),
                           f"NaN in {n} place(s) where the other side has a number")
    inf_e, inf_a = np.isinf(e), np.isinf(a)
    if (inf_e != inf_a).any() or (e[inf_e] != a[inf_a]).any():
        return OutputCheck(name, False, float("inf"), float("inf"), "infinities differ")
    finite = ~(nan_e | inf_e)
    # NaN/Inf that both sides agree on pass, but the user should know the model makes them
    special = ", ".join(f"{int(m.sum())} {what}" for m, what in ((nan_e, "NaN"), (inf_e, "Inf"))
                        if m.any())
    note = f"{special} in both torch and tract" if special else ""
    if not finite.any():
        return OutputCheck(name, True, 0.0, 0.0, note)
    diff = np.abs(e[finite] - a[finite])
    ref = np.abs(e[finite])
    max_abs = float(diff.max())
    max_rel = float((diff / np.maximum(ref, np.finfo(np.float64).tiny)).max())
    ok = bool((diff <= atol + rtol * ref).all())
    return OutputCheck(name, ok, max_abs, max_rel, note)
