"""``t2n inspect``: what an NNEF archive holds, read from the archive alone.

Works on any archive (t2n's or another exporter's; folder, .tar or .tgz; tract or Khronos
dialect). Inputs, the op histogram and the weights come from ``graph.nnef`` and the 128-byte
``.dat`` headers (payloads are never read). Output shapes and the multiply-accumulate count
need shapes through the graph: for a standard graph, the Khronos parser infers them and
nnef-tools' MAC counter counts; for a tract graph, tract loads the archive in a child
process and its own cost model counts the FMAs (dynamic symbols default to 1).
"""

from __future__ import annotations

import os
import re
import struct
import tarfile
import tempfile
from collections import Counter
from dataclasses import dataclass, field

from t2n.errors import UsageError

# .dat item types: (code, bits) -> format name; vendor "TR" codes are tract's block formats
_FORMATS = {(0, 16): "f16", (0, 32): "f32", (0, 64): "f64", (5, 1): "bool", (5, 8): "bool"}
_INT_NAMES = {1: "u", 2: "u", 3: "i", 4: "i"}
_TRACT_VENDOR = 0x5452
# 0x2040 and 0x3040 are both Q4_0 (tract's own nibble order, GGML's); 0x3080 is Q8_1
_TRACT_TYPES = {0x1000: "string", 0x2040: "q4_0", 0x3040: "q4_0", 0x3080: "q8_1"}

_STATEMENT = re.compile(r"^\s*(\(?[\w\s,]+\)?)\s*=\s*([A-Za-z_][\w<>]*)\s*\(", re.M)
_EXTERNAL = re.compile(r"^\s*(\w+)\s*=\s*(?:external<(\w+)>|tract_core_external)\s*\((.*)\)\s*;",
                       re.M)
_GRAPH_START = re.compile(r"^\s*graph\s+\w+\s*\([^)]*\)\s*->\s*\([^)]*\)", re.M)
_GRAPH = re.compile(r"graph\s+\w+\s*\(([^)]*)\)\s*->\s*\(([^)]*)\)")


@dataclass
class WeightInfo:
    label: str
    shape: list[int]
    format: str
    nbytes: int

    @property
    def params(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class ArchiveInfo:
    path: str
    dialect: str  # "tract" or "khronos"
    archive_bytes: int
    symbols: list[str]
    inputs: list[dict]
    outputs: list[dict]
    op_histogram: dict[str, int]
    weights: list[WeightInfo] = field(default_factory=list)
    macs: int | None = None
    macs_source: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def params(self) -> int:
        return sum(w.params for w in self.weights)

    def by_format(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for w in self.weights:
            row = out.setdefault(w.format, {"tensors": 0, "params": 0, "bytes": 0})
            row["tensors"] += 1
            row["params"] += w.params
            row["bytes"] += w.nbytes
        return dict(sorted(out.items()))

    def as_dict(self) -> dict:
        return {"path": self.path, "dialect": self.dialect, "archive_bytes": self.archive_bytes,
                "symbols": self.symbols, "inputs": self.inputs, "outputs": self.outputs,
                "op_count": sum(self.op_histogram.values()), "op_histogram": self.op_histogram,
                "parameters": self.params, "weights_by_format": self.by_format(),
                "macs": self.macs, "macs_source": self.macs_source, "notes": self.notes}

    def report(self) -> str:
        lines = [f"archive {self.path} ({self.dialect} dialect, {self.archive_bytes:,} bytes)"]
        if self.symbols:
            lines.append("  symbols: " + ", ".join(self.symbols))
        for t in self.inputs:
            lines.append(f"  input  {t['name']}: {_dims(t['shape'])} {t['dtype']}")
        for t in self.outputs:
            lines.append(f"  output {t['name']}: {_dims(t.get('shape'))} {t.get('dtype', '?')}")
        top = sorted(self.op_histogram.items(), key=lambda kv: (-kv[1], kv[0]))
        lines.append(f"  ops ({sum(self.op_histogram.values())}): "
                     + ", ".join(f"{k} {v}" for k, v in top))
        lines.append(f"  parameters: {self.params:,} in {len(self.weights)} tensors")
        for fmt, row in self.by_format().items():
            lines.append(f"    {fmt}: {row['params']:,} params, {row['bytes']:,} bytes "
                         f"({row['tensors']} tensors)")
        if self.macs is not None:
            lines.append(f"  MACs: {self.macs:,} ({self.macs_source})")
        lines += ["  note: " + n for n in self.notes]
        return "\n".join(lines)


def _dims(shape) -> str:
    if shape is None:
        return "?"
    return "x".join(str(d) for d in shape) or "scalar"


def inspect_archive(path: str, symbols: dict[str, int] | None = None,
                    macs: bool = True) -> ArchiveInfo:
    """Describe the archive at ``path`` (see the module docstring)."""
    members = _read_members(path)
    if "graph.nnef" not in members:
        raise UsageError(f"{path}: no graph.nnef at the archive root: not an NNEF archive")
    text = members["graph.nnef"]().decode("utf-8", "replace")
    dialect = "tract" if re.search(r"^\s*extension\s+tract_", text, re.M) else "khronos"
    syms = re.findall(r"^\s*extension\s+tract_symbol\s+(\w+)\s*;", text, re.M)
    info = ArchiveInfo(path=path, dialect=dialect, archive_bytes=_size(path), symbols=syms,
                       inputs=_inputs(text), outputs=_outputs(text),
                       op_histogram=count_ops(text))
    for name, read_head in sorted(members.items()):
        if name.endswith(".dat"):
            info.weights.append(_weight(name[:-4], read_head(128)))
    if macs:
        _count_macs(info, path, members, symbols or {})
    return info


# ---------------------------------------------------------------------------- reading
def _read_members(path: str) -> dict:
    """{member name: reader(n=None) -> bytes} for a folder, .tar or .tgz."""
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file or directory")
    if os.path.isdir(path):
        out = {}
        for root, _, files in os.walk(path):
            for f in files:
                full = os.path.join(root, f)
                rel = os.path.relpath(full, path).replace(os.sep, "/")
                out[rel] = (lambda full: lambda n=None: _read_file(full, n))(full)
        return out
    try:
        tar = tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError) as e:
        raise UsageError(f"{path}: not a folder, tar or tgz archive ({e})") from None
    out = {}
    for m in tar.getmembers():
        if m.isfile():
            name = m.name[2:] if m.name.startswith("./") else m.name
            out[name] = (lambda m: lambda n=None: tar.extractfile(m).read(n))(m)
    return out


def _read_file(path: str, n: int | None) -> bytes:
    with open(path, "rb") as f:
        return f.read() if n is None else f.read(n)


def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path)
                   for f in fs)
    return os.path.getsize(path)


def _inputs(text: str) -> list[dict]:
    out = []
    for name, kind, args in _EXTERNAL.findall(text):
        shape = re.search(r"shape\s*=\s*\[([^\]]*)\]", args)
        dims = [d.strip() for d in shape.group(1).split(",") if d.strip()] if shape else []
        dtype = {"scalar": "f32", "integer": "i64", "logical": "bool"}.get(kind, kind)
        m = re.search(r"datum_type\s*=\s*'(\w+)'", args)
        if m:
            dtype = m.group(1).lower()
        out.append({"name": name, "shape": [int(d) if d.isdigit() else d for d in dims],
                    "dtype": dtype})
    return out


def _outputs(text: str) -> list[dict]:
    m = _GRAPH.search(text)
    names = [n.strip() for n in m.group(2).split(",") if n.strip()] if m else []
    return [{"name": n} for n in names]


_FRAGMENT = re.compile(r"^\s*fragment\s+(\w+)\s*\([^{]*\{([^}]*)\}", re.M)
_DECLARATIONS = ("external", "variable", "tract_core_external")


def count_ops(text: str) -> dict[str, int]:
    """The op histogram of a ``graph.nnef``: THE count of t2n (``t2n export``'s report and
    ``ExportResult.op_histogram`` read the archive they wrote with it, ``t2n inspect`` any
    archive), so both always agree.

    Each statement of the graph body is one op, by the name it calls: a fragment is one op
    (``t2n_gelu``, a composed ``t2n_linear3_f32``), as tract's loader makes it one node, its
    body ops not counted again; a call of a fragment whose body is a single op (the writer's
    shallow spelling, :mod:`t2n.write.shallow_text`) counts as that op; declarations (``external``,
    ``variable``, and fragments that only declare a weight) are not ops. Lines the writer
    adds around weights and outputs (a cast of a stored weight back to its dtype, an output
    ``copy``) are ops of the archive and count."""
    single: dict[str, str] = {}
    for name, body in _FRAGMENT.findall(text):
        kinds = [k for _, k in _STATEMENT.findall(body)]
        if len(kinds) == 1:
            single[name] = kinds[0]
    m = _GRAPH_START.search(text)
    body = text[m.end():] if m else ""
    kinds = Counter()
    for _, k in _STATEMENT.findall(body):
        k = single.get(k, k)
        if k.split("<")[0] not in _DECLARATIONS:
            kinds[k] += 1
    return dict(sorted(kinds.items()))


def archive_ops(path: str) -> dict[str, int]:
    """:func:`count_ops` of the archive at ``path`` (folder, .tar or .tgz), reading its
    ``graph.nnef`` only (the first member of t2n's tar archives)."""
    if os.path.isdir(path):
        with open(os.path.join(path, "graph.nnef"), "rb") as f:
            return count_ops(f.read().decode("utf-8", "replace"))
    with tarfile.open(path, "r:*") as tar:
        for m in tar:
            if m.name in ("graph.nnef", "./graph.nnef"):
                return count_ops(tar.extractfile(m).read().decode("utf-8", "replace"))
    raise UsageError(f"{path}: no graph.nnef at the archive root: not an NNEF archive")


def _weight(label: str, head: bytes) -> WeightInfo:
    if len(head) < 128 or head[:2] != b"\x4e\xef":
        return WeightInfo(label, [], "unknown", 0)
    nbytes, rank = struct.unpack_from("<II", head, 4)
    dims = list(struct.unpack_from("<8I", head, 12))[:rank]
    bits, code, vendor = struct.unpack_from("<IHH", head, 44)
    if vendor == _TRACT_VENDOR:
        fmt = _TRACT_TYPES.get(code, f"tract-0x{code:04x}")
    elif (code, bits) in _FORMATS:
        fmt = _FORMATS[(code, bits)]
    elif code in _INT_NAMES:
        fmt = f"{_INT_NAMES[code]}{bits}"
    else:
        fmt = f"code{code}/{bits}"
    return WeightInfo(label, dims, fmt, nbytes)


# ---------------------------------------------------------------------------- MACs
def _count_macs(info: ArchiveInfo, path: str, members: dict, symbols: dict[str, int]) -> None:
    with tempfile.TemporaryDirectory(prefix="t2n-inspect-") as d:
        folder = path if os.path.isdir(path) else _unpack(members, d)
        if info.dialect == "khronos":
            _khronos_macs(info, folder)
        else:
            _tract_macs(info, folder, symbols)


def _unpack(members: dict, d: str) -> str:
    """Write the members under ``d`` only: a name climbing out of it (``../x``, ``/x``)
    is refused, so a crafted archive cannot write elsewhere."""
    for name, read in members.items():
        parts = name.split("/")
        if name.startswith("/") or ".." in parts:
            raise UsageError(f"archive member {name!r} points outside the archive")
        target = os.path.join(d, *parts)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(read())
    return d


def _khronos_macs(info: ArchiveInfo, folder: str) -> None:
    import nnef
    from nnef_tools.gmac import _count_macs as count_op
    from nnef_tools.io.nnef import Reader

    try:
        graph = Reader(infer_shapes=True)(folder)
    except (nnef.Error, Exception) as e:  # the reference parser refuses the graph
        info.notes.append(f"the Khronos parser refused the graph: {str(e).splitlines()[0]}")
        return
    info.macs = int(sum(count_op(op, False, False, False, False) for op in graph.operations))
    info.macs_source = "nnef-tools' MAC counter"
    by_name = {t.name: t for t in graph.tensors}
    for o in info.outputs:
        t = by_name.get(o["name"])
        if t is not None:
            o["shape"] = list(t.shape)
            o["dtype"] = _short_dtype(t.dtype)


def _short_dtype(dtype) -> str:
    import numpy as np

    try:
        d = np.dtype(dtype)
    except TypeError:
        return str(dtype)
    return "bool" if d.kind == "b" else f"{'f' if d.kind == 'f' else d.kind}{d.itemsize * 8}"


def _tract_macs(info: ArchiveInfo, folder: str, symbols: dict[str, int]) -> None:
    values = {s: symbols.get(s, 1) for s in info.symbols}
    from t2n.check.tract_cost import profile_in_child

    cost, msg = profile_in_child(folder, values)
    if cost is None:
        info.notes.append(f"tract could not load the archive for the MAC count: {msg}")
        return
    info.macs = cost["macs"]
    shown = ", ".join(f"{k}={v}" for k, v in values.items())
    info.macs_source = "tract's cost model" + (f", {shown}" if shown else "")
    for o, fact in zip(info.outputs, cost["outputs"]):
        o["shape"], o["dtype"] = fact["shape"], fact["dtype"]
