"""Weight formats: how each weight of an export is stored in the archive.

``t2n.export(..., weights=...)`` picks a storage policy for the model's float weights:

* ``"f32"`` (default): every weight as the model holds it;
* ``"f16"``: float32/float64 weights stored as float16 ``.dat`` files (half the size), each
  followed by a ``tract_core_cast`` back to its own dtype, so the graph computes exactly as
  before, on rounded weights. Weights already float16 (an f16 model) stay f16;
* ``"q4_0"``: weights of matrix products against constant weights (``linear``, ``matmul``,
  ``addmm``, GPT-2's ``Conv1D``), convolution filters and embedding tables stored in tract's Q4_0 block format
  (blocks of 32 values along the reduced axis, 4-bit values and an f16 scale per block:
  18 bytes per 32 weights, 0.14x of float32). tract consumes them directly (its matmul
  kernels unpack the blocks; no float copy is stored). A weight qualifies when it is
  float32, every use reads it as a matmul operand, a convolution filter or the table of a
  row gather, and its reduced axis (for a filter: ``C_in/groups * kernel``) is a multiple
  of 32; everything else stays as held.

Only weights that are the model's own parameters or buffers (or views of them), or such
a weight times a factor (a batch norm or a scale folded into a convolution or a linear layer
by the graph passes), are compressed: the check then runs PyTorch on a copy of the model
whose parameters carry the same rounded values (for a folded weight: the model weight
rescaled so that the fold gives the rounded values; :mod:`t2n.check.compressed`). Other
constants t2n computes during the export (folded biases among them) stay as they are.

The interface
-------------
:func:`plan` runs after the graph passes (it is the ``weights`` pass): it decides, per
variable, a :class:`Storage` and records it in the session's ``storage`` (keyed by the
variable's tensor id); it also adjusts the few consumer attributes a layout needs (a transposed matmul
operand, the output type of a gather from a block-quantized table). The writer then
declares each variable with :meth:`Storage.declaration` and streams its bytes with
:meth:`Storage.header` / :meth:`Storage.payload`, one tensor at a time, a few MB at a time;
the model is never copied nor modified.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np
import torch

from t2n import dtypes
from t2n.errors import UsageError
from t2n.write.weight_layouts import CONV_ROWS, Uses



@dataclass(frozen=True)
class WeightFormat:
    """One ``weights=`` choice, with the questions the passes ask of it.

    ``compresses``: some float weights are stored rounded (so the passes must not invent
    weights the check cannot map back onto the model's, and the check runs on the rounded
    model); ``block_quantized``: products' weights are stored in blocks tract's matmul
    reads directly (it packs nothing at load)."""

    name: str
    compresses: bool
    block_quantized: bool
    help: str


WEIGHT_FORMATS: dict[str, WeightFormat] = {f.name: f for f in (
    WeightFormat("f32", False, False, "every weight as the model holds it"),
    WeightFormat("f16", True, False, "float weights stored as float16, cast back after loading"),
    WeightFormat("q4_0", True, True, "products' weights, filters and embedding tables in "
                 "tract's 4-bit Q4_0 blocks"),
)}
FORMATS = tuple(WEIGHT_FORMATS)
F16_MAX = 65504.0
Q4_BLOCK = 32
Q4_BLOCK_BYTES = 18  # f16 scale + 16 bytes of 4-bit values
TRACT_VENDOR = 0x5452  # "TR": tract's own .dat item types
Q4_0_GGML_CODE = 0x3040  # Q4_0 blocks in GGML nibble order (tract nnef/src/tensors.rs)
STREAM_ELEMENTS = 1 << 22  # values converted per piece while streaming


def get_format(weights) -> WeightFormat:
    """The format called ``weights`` (None: ``"f32"``), or a UsageError listing them."""
    if weights is None:
        return WEIGHT_FORMATS["f32"]
    if not isinstance(weights, str) or weights.lower() not in WEIGHT_FORMATS:
        raise UsageError(f"weights={weights!r} is not a weight format; use one of "
                         f"{', '.join(repr(f) for f in FORMATS)}")
    return WEIGHT_FORMATS[weights.lower()]


# ---------------------------------------------------------------------------- storages
def dat_header(shape, nbytes: int, bits: int, code: int, vendor: int = 0) -> bytes:
    """The 128-byte NNEF tensor header (little-endian; tract reads the vendor at 50)."""
    if len(shape) > 8:
        raise UsageError(f"tensor of rank {len(shape)}: NNEF files hold rank 8 at most")
    dims = [int(d) for d in shape] + [0] * (8 - len(shape))
    head = struct.pack("<BBBBII8IIHH", 0x4E, 0xEF, 1, 0, nbytes, len(shape), *dims, bits,
                       code, vendor)
    return head + b"\0" * (128 - len(head))


class Streamed:
    """A payload produced piece by piece: ``len()`` bytes, iterated as buffers."""

    def __init__(self, nbytes: int, pieces):
        self.nbytes = nbytes
        self._pieces = pieces

    def __len__(self) -> int:
        return self.nbytes

    def __iter__(self):
        return self._pieces()


def row_pieces(t: torch.Tensor, max_elements: int = STREAM_ELEMENTS):
    """``t`` in C order as tensors of whole trailing rows, about ``max_elements`` each
    (contiguous copies of one piece at a time, never of the whole tensor)."""
    if t.numel() == 0:
        return
    if t.dim() <= 1:
        for i in range(0, t.numel(), max_elements):
            yield t[i:i + max_elements].contiguous()
        return
    row = t[0].numel()
    if row > max_elements:
        for i in range(t.shape[0]):
            yield from row_pieces(t[i], max_elements)
        return
    step = max(1, max_elements // max(row, 1))
    for i in range(0, t.shape[0], step):
        yield t[i:i + step].contiguous()


@dataclass
class Storage:
    """How one variable is written: subclasses say the bytes; the writer asks for the
    declaration, the header and the payload.

    ``data`` is the variable's weight as the graph uses it; ``shape`` the shape declared in
    graph.nnef; ``raw_name`` names the stored tensor when a cast follows it; ``source`` the
    model weight ``data`` is a scaled copy of (a weight folded by the graph passes), None
    when ``data`` is the model's own tensor."""

    data: torch.Tensor
    shape: tuple
    raw_name: str | None = None
    kind: str = "as held"
    source: torch.Tensor | None = None

    def stored_dtype(self) -> str:  # tract's name of the stored item type
        return dtypes.tract_name(self.data.dtype)

    def cast_to(self) -> torch.dtype | None:
        """The dtype of a ``tract_core_cast`` after the variable (None: no cast)."""
        return None

    def nbytes(self) -> int:
        raise NotImplementedError

    def header(self) -> bytes:
        raise NotImplementedError

    def payload(self):
        raise NotImplementedError

    def rounded(self) -> torch.Tensor:
        """The values tract computes with, shaped and typed like ``data``."""
        raise NotImplementedError


@dataclass
class F16Storage(Storage):
    kind: str = "f16"

    def stored_dtype(self) -> str:
        return "f16"

    def cast_to(self) -> torch.dtype:
        return self.data.dtype

    def nbytes(self) -> int:
        return self.data.numel() * 2

    def header(self) -> bytes:
        return dat_header(self.shape, self.nbytes(), 16, 0)

    def payload(self):
        data = self.data

        def pieces():
            for p in row_pieces(data):
                a = p.to(torch.float16).numpy()
                yield memoryview(a.reshape(-1)).cast("B")
        return Streamed(self.nbytes(), pieces)

    def rounded(self) -> torch.Tensor:
        return self.data.to(torch.float16).to(self.data.dtype)


def q4_0_blocks(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 of ``rows`` (float32, [n, 32]): (blocks [n, 18] uint8, dequantised [n, 32]).

    The scale of a block is its value of largest magnitude over -8, stored f16; each value
    becomes ``trunc(x / scale + 8.5)`` clipped to 0..15 (the GGML rule, as tract's own
    quantiser); tract reads ``(q - 8) * scale``. Byte j of the 16 value bytes holds value j
    in its low nibble and value j + 16 in its high nibble (GGML order, item code 0x3040)."""
    n = rows.shape[0]
    pick = np.abs(rows).argmax(axis=1)
    extreme = rows[np.arange(n), pick]
    scale = (extreme / np.float32(-8.0)).astype(np.float32)
    safe = np.where(scale == 0, np.float32(1.0), scale)
    inv = np.where(scale == 0, np.float32(0.0), np.float32(1.0) / safe).astype(np.float32)
    q = np.trunc(rows * inv[:, None] + np.float32(8.5))
    q = np.clip(q, 0, 15).astype(np.uint8)
    d16 = scale.astype(np.float16)
    blocks = np.empty((n, Q4_BLOCK_BYTES), np.uint8)
    blocks[:, :2] = d16.view(np.uint8).reshape(n, 2)
    blocks[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    deq = (q.astype(np.float32) - np.float32(8.0)) * d16.astype(np.float32)[:, None]
    return blocks, deq


@dataclass
class Q4Storage(Storage):
    """Q4_0 blocks along the last axis of ``stored`` (``data`` itself, or its last two axes
    swapped when the consumers reduce over ``data``'s second-to-last axis)."""

    kind: str = "q4_0"
    transposed: bool = False

    def stored(self) -> torch.Tensor:
        return self.data.transpose(-1, -2) if self.transposed else self.data

    def nbytes(self) -> int:
        return self.data.numel() // Q4_BLOCK * Q4_BLOCK_BYTES

    def header(self) -> bytes:
        return dat_header(self.shape, self.nbytes(), 0xFFFFFFFF, Q4_0_GGML_CODE, TRACT_VENDOR)

    def _pieces(self, dequantised: bool):
        for p in row_pieces(self.stored(), STREAM_ELEMENTS):
            blocks, deq = q4_0_blocks(p.numpy().reshape(-1, Q4_BLOCK))
            yield (deq.reshape(p.shape) if dequantised else blocks)

    def payload(self):
        def pieces():
            for b in self._pieces(False):
                yield memoryview(b.reshape(-1))
        return Streamed(self.nbytes(), pieces)

    def rounded(self) -> torch.Tensor:
        parts = [torch.from_numpy(d) for d in self._pieces(True)]
        flat = torch.cat([p.reshape(-1) for p in parts])
        stored = flat.reshape(self.stored().shape)
        return stored.transpose(-1, -2) if self.transposed else stored


# ---------------------------------------------------------------------------- the plan
@dataclass
class Plan:
    """What :func:`plan` decided, for the report and the check."""

    format: str
    compressed: list = field(default_factory=list)  # (label, shape, kind, use, bytes, stored)
    kept: list = field(default_factory=list)  # (label, reason)
    bytes_before: int = 0
    bytes_after: int = 0
    compute: str = ""

    def report_lines(self) -> list[str]:
        if self.format == "f32":
            return []
        mb = 1 / 1e6
        lines = [f"weights {self.format}: {len(self.compressed)} tensor(s) compressed "
                 f"({self.bytes_before * mb:.2f} MB -> {self.bytes_after * mb:.2f} MB)"
                 + (f"; {self.compute}" if self.compute else "")]
        if self.compressed:
            lines.append("  compressed: " + ", ".join(
                f"{c[0]} [{_dims(c[1])}{', ' + c[3] if c[3] else ''}]"
                for c in self.compressed))
        if self.kept:
            reasons: dict[str, list[str]] = {}
            for label, reason in self.kept:
                reasons.setdefault(reason, []).append(label)
            for reason, labels in reasons.items():
                shown = ", ".join(labels[:12]) + (f", ... ({len(labels)} in all)"
                                                  if len(labels) > 12 else "")
                lines.append(f"  kept as held ({reason}): {shown}")
        return lines

    def as_dict(self) -> dict:
        return {"format": self.format, "bytes_before": self.bytes_before,
                "bytes_after": self.bytes_after, "compute": self.compute,
                "compressed": [{"label": c[0], "shape": list(c[1]), "format": c[2],
                                "use": c[3]} for c in self.compressed],
                "kept": [{"label": k, "reason": r} for k, r in self.kept]}


def _dims(shape) -> str:
    """Dims without the leading unit axes t2n adds for broadcasting."""
    shape = list(shape)
    while len(shape) > 2 and shape[0] == 1:
        shape.pop(0)
    return "x".join(map(str, shape))


def model_storages(model) -> set[int]:
    """Data pointers of the storages of the model's parameters and buffers."""
    out = set()
    if not isinstance(model, torch.nn.Module):
        return out
    for t in list(model.parameters()) + list(model.buffers()):
        if t.numel():
            out.add(t.untyped_storage().data_ptr())
    return out


def plan(g, session) -> Plan:
    """Decide how every weight of ``g`` is stored, into ``session.storage`` (see the module
    docstring)."""

    fmt = session.weights.name
    result = Plan(fmt)
    session.storage.clear()
    if not session.weights.compresses:
        return result
    uses = Uses(g)
    owned = model_storages(session.model)
    scaled_from = session.derived.scaled_from
    folded = session.derived.folded
    chosen: dict[int, Storage] = {}
    for v in uses.variables():
        data = v.data
        label = uses.label(v)
        if not data.dtype.is_floating_point or data.numel() == 0:
            continue
        source = scaled_from.get(id(v.tensor))
        if data.untyped_storage().data_ptr() not in owned and (
                source is None or source.untyped_storage().data_ptr() not in owned):
            result.kept.append((label, "folded from model weights by the graph passes, "
                                       "not a scaled copy of one" if id(v.tensor) in folded
                                else "computed during the export, not a model weight"))
            continue
        if fmt == "f16":
            st, reason = _f16_storage(g, v)
        else:
            st, reason = _q4_storage(g, v, uses)
        if st is None:
            if reason:
                result.kept.append((label, reason))
            continue
        if data.untyped_storage().data_ptr() not in owned:
            st.source = source
        chosen[id(v.tensor)] = st
    for vid in _shared_sources(uses, chosen, scaled_from):
        v = uses.variable(vid)
        result.kept.append((uses.label(v), "a model weight read both as it is and folded "
                                           "(or folded twice)"))
        del chosen[vid]
    for vid in uses.conflicting(chosen):
        v = uses.variable(vid)
        result.kept.append((uses.label(v), "shares its storage with a weight stored "
                                           "differently"))
        del chosen[vid]
    dtypes_seen = set()
    for v in uses.variables():
        st = chosen.get(id(v.tensor))
        if st is None:
            continue
        session.storage[id(v.tensor)] = st
        if isinstance(st, Q4Storage):
            uses.adapt_consumers_to_q4(v, st.transposed)
        dtypes_seen.add(v.data.dtype)
        before = v.data.numel() * v.data.element_size()
        result.bytes_before += before
        result.bytes_after += st.nbytes()
        result.compressed.append((uses.label(v), tuple(v.data.shape), st.kind,
                                  uses.describe(v), before, st.nbytes()))
    if fmt == "f16" and dtypes_seen:
        names = "/".join(sorted(dtypes.tract_name(d) for d in dtypes_seen))
        result.compute = f"compute stays {names} (a cast after each weight)"
    elif fmt == "f16":
        halfs = [v for v in uses.variables() if v.data.dtype == torch.float16]
        if halfs:
            result.compute = "the model's weights are float16 already: stored and " \
                             "computed as f16"
    elif fmt == "q4_0" and result.compressed:
        result.compute = "tract multiplies with the blocks directly (no float copy)"
    return result


def _shared_sources(uses, chosen: dict, scaled_from: dict) -> list[int]:
    """Chosen weights sharing a model weight with a folded (scaled) copy of it, or two
    folded copies of one model weight: the check's copy of the model can hold one rounding
    of each model weight, and the other reader would compute with a different one."""
    readers: dict[int, list[int]] = {}
    folded_ptrs = set()
    for v in uses.variables():
        src = scaled_from.get(id(v.tensor))
        t = src if src is not None else v.data
        if t.numel():
            ptr = t.untyped_storage().data_ptr()
            readers.setdefault(ptr, []).append(id(v.tensor))
            if src is not None:
                folded_ptrs.add(ptr)
    return [vid for ptr in folded_ptrs if len(readers[ptr]) > 1
            for vid in readers[ptr] if vid in chosen]


def _f16_storage(g, v):
    data = v.data
    if data.dtype == torch.float16:
        return None, None
    if data.dtype not in (torch.float32, torch.float64):
        return None, f"{data.dtype} has no f16 form"
    finite = torch.isfinite(data)
    if bool((data.abs() > F16_MAX).logical_and(finite).any()):
        return None, "values beyond the f16 range"
    return F16Storage(data, tuple(data.shape), raw_name=g.fresh_name(v.tensor.name + "_f16")), \
        None


def _q4_storage(g, v, uses):
    data = v.data
    if data.dtype != torch.float32:
        return None, f"{data.dtype} weight (Q4_0 is applied to float32 weights)"
    if data.dim() < 2:
        return None, "not a matrix"  # biases, norms
    axis, why = uses.reduced_axis(v)
    if axis is None:
        return None, why
    if axis == CONV_ROWS:
        k = data[0].numel()
        if k % Q4_BLOCK:
            return None, f"filter rows of {k} values, not a multiple of {Q4_BLOCK}"
        return Q4Storage(data, tuple(data.shape)), None
    k = data.shape[axis]
    if k % Q4_BLOCK:
        return None, f"reduced axis of {k}, not a multiple of {Q4_BLOCK}"
    transposed = axis == data.dim() - 2
    shape = tuple(data.shape)
    if transposed:
        shape = shape[:-2] + (shape[-1], shape[-2])
    return Q4Storage(data, shape, transposed=transposed), None
