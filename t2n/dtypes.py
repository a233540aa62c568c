"""The one table that says how a torch dtype appears in NNEF and in tract.

tract has no bf16 and no complex; bf16 values are held in f32 (rounded to bf16 as PyTorch
rounds them, t2n/walk/bf16_values.py, or computed in the export's ``dtype=``,
t2n/walk/compute_dtype.py). A complex tensor inside the graph is a float tensor of its parts with
a trailing (re, im) axis (tract's own convention for ``tract_core_fft``/``tract_core_stft``):
``complex_part`` names that float dtype; complex model inputs and outputs are refused.
Bools are written 1-bit packed in .dat files (the only layout both tract and the Khronos
reader accept).
"""

from __future__ import annotations

import numpy as np
import torch

# torch dtype -> (tract datum string, numpy dtype, NNEF .dat item code)
_TABLE = {
    torch.float32: ("f32", np.float32, 0),
    torch.float16: ("f16", np.float16, 0),
    torch.float64: ("f64", np.float64, 0),
    torch.int64: ("i64", np.int64, 4),
    torch.int32: ("i32", np.int32, 4),
    torch.int16: ("i16", np.int16, 4),
    torch.int8: ("i8", np.int8, 4),
    torch.uint8: ("u8", np.uint8, 1),
    torch.bool: ("bool", np.bool_, 5),
}
_UNSIGNED_EXTRA = {
    getattr(torch, "uint16", None): ("u16", np.uint16, 1),
    getattr(torch, "uint32", None): ("u32", np.uint32, 1),
    getattr(torch, "uint64", None): ("u64", np.uint64, 1),
}
_TABLE.update({k: v for k, v in _UNSIGNED_EXTRA.items() if k is not None})
# torch.ao quantized tensors are their integer representation in the graph (scale and zero
# point travel beside them, t2n/mappings/quantized.py): plain u8/i8/i32 tensors for tract
# PyTorch's ScalarType codes (TorchScript passes dtypes as these numbers), by code
_SCALAR_TYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                 torch.float32, torch.float64, torch.complex32, torch.complex64,
                 torch.complex128, torch.bool, None, None, None, torch.bfloat16]


def from_scalar_type(code: int) -> torch.dtype | None:
    """The torch dtype of a ScalarType code (None: a quantized or unknown code)."""
    return _SCALAR_TYPES[code] if 0 <= code < len(_SCALAR_TYPES) else None


QUANTIZED = {torch.quint8: torch.uint8, torch.qint8: torch.int8, torch.qint32: torch.int32}
_TABLE.update({q: _TABLE[r] for q, r in QUANTIZED.items()})

_FROM_NUMPY = {np.dtype(v[1]): k for k, v in _TABLE.items() if k not in QUANTIZED}
_FROM_NAME = {v[0]: k for k, v in _TABLE.items() if k not in QUANTIZED}
_FROM_NAME.update({"float32": torch.float32, "float": torch.float32, "float16": torch.float16,
                   "half": torch.float16, "float64": torch.float64, "double": torch.float64,
                   "int64": torch.int64, "long": torch.int64, "int32": torch.int32,
                   "int": torch.int32, "int16": torch.int16, "int8": torch.int8,
                   "uint8": torch.uint8, "bool": torch.bool})
_FROM_NAME.update({f"uint{v[0][1:]}": k for k, v in _TABLE.items()
                   if k not in QUANTIZED and v[0][0] == "u"})


# complex dtype -> the float dtype of its (re, im) parts inside the graph (no complex32: tract's
# FFT has no f16 kernel)
COMPLEX_PARTS = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def complex_part(dtype: torch.dtype) -> torch.dtype | None:
    """The float dtype holding the parts of complex ``dtype`` (None: not lowered)."""
    return COMPLEX_PARTS.get(dtype)


def complex_of(part: torch.dtype) -> torch.dtype:
    """The complex dtype whose parts are ``part`` (torch's promotion of a real to complex)."""
    return {torch.float64: torch.complex128}.get(part, torch.complex64)


def supported(dtype: torch.dtype) -> bool:
    return dtype in _TABLE


def tract_name(dtype: torch.dtype) -> str:
    """'f32', 'i64', ... as tract_core_cast and tract_core_external spell them."""
    try:
        return _TABLE[dtype][0]
    except KeyError:
        raise TypeError(f"dtype {dtype} has no tract equivalent") from None


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return np.dtype(_TABLE[dtype][1])


def dat_code(dtype: torch.dtype) -> int:
    return _TABLE[dtype][2]


def from_numpy(dtype) -> torch.dtype:
    return _FROM_NUMPY[np.dtype(dtype)]


def from_name(name: str) -> torch.dtype:
    """Parse a user-facing dtype name ('f32', 'i64', 'int32', 'bool', ...)."""
    try:
        return _FROM_NAME[name.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}{_did_you_mean(name)} (known: "
                         f"{', '.join(_SHORT_NAMES)})") from None


# each dtype once, by its short name: floats, signed, unsigned, bool, each by size
_SHORT_NAMES = sorted({v[0] for k, v in _TABLE.items() if k not in QUANTIZED},
                      key=lambda n: ("fiub".index(n[0]), int(n[1:]) if n[1:].isdigit() else 0))


def _did_you_mean(name: str) -> str:
    """``; did you mean 'f32'?`` for the closest spelling t2n knows (aliases included),
    given as its short name; empty when nothing is close."""
    import difflib

    close = difflib.get_close_matches(name.lower(), list(_FROM_NAME), n=1)
    return f"; did you mean {tract_name(_FROM_NAME[close[0]])!r}?" if close else ""


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def is_int(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool
