"""Serialise a built graph: ``graph.nnef`` text plus one ``.dat`` file per weight.

Output is byte-reproducible (members sorted, mtime/uid/gid fixed, gzip header without name or
time) and atomic: everything is written to a temporary sibling of the destination, renamed
into place at the end, and removed on any failure or interrupt. Weights stream from their
own storage into the archive, one at a time, without copies of the model.
"""

from __future__ import annotations

import math
import os
import shutil
import struct
import tarfile
import tempfile

import numpy as np
import torch

from t2n import dtypes
from t2n.write import output_paths
from t2n.walk.builder import Graph, Tensor, Variable, format_dim, format_value
from t2n.errors import UsageError
from t2n.write.durable import flush_to_disk
from t2n.write.gzstream import GzipStream
from t2n.walk.loops import op_line, render_fragments
from t2n.write.nnef_text import nnef_type
from t2n.write.shallow_text import ShallowText
from t2n.write.output_paths import output_kind  # noqa: F401  (t2n.write.writer.output_kind)
from t2n.write.staging import move_into_place
from t2n.stopwatch import timed

GRAPH_NAME = "network"
WRITE_SLICE = 1 << 24  # bytes per write call when reporting progress


# ---------------------------------------------------------------------------- graph.nnef
def render_graph(g: Graph) -> str:
    """graph.nnef in the dialect of the graph's target (``g.session.target``), declaring each
    weight as the session's ``storage`` says."""
    target, storage = g.session.target, g.session.storage
    ops = g.live_ops()
    used = g.used_tensors(ops)
    _name_outputs(g, ops)
    lines = ["version 1.0;", ""] + target.header_lines(g)
    lines.append("")
    lines.extend(render_fragments(g))
    if target.can("properties"):  # tract's own metadata fragment (refused elsewhere)
        lines += render_properties(g.session.properties)
    shallow = ShallowText(_names(g, ops)) if target.shallow_text else None
    body = []
    for t in g.inputs:
        body.append(f"  {t.name} = {target.external(t)};")
    labels = g.final_labels(used)
    aliases = same_bytes_aliases(g, used)
    for v in g.variables:
        if id(v.tensor) in used and id(v.tensor) not in aliases:
            body += _declaration(g, v, labels[id(v.tensor)], storage.get(id(v.tensor)),
                                 shallow)
    for v in g.variables:
        if id(v.tensor) in aliases:
            shape = ", ".join(str(int(d)) for d in v.tensor.shape)
            body.append(f"  {v.tensor.name} = reshape({aliases[id(v.tensor)].tensor.name}, "
                        f"shape = [{shape}]);")
    outputs = {id(t) for t in g.outputs}
    for op in ops:
        line = None
        if shallow is not None and not any(id(o) in outputs for o in op.outputs):
            line = shallow.op_line(op)
        body.append("  " + (line or op_line(op)) + ";")
    for name, t in zip(g.output_names, g.outputs):
        if t.name != name:
            body.append(f"  {name} = copy({format_value(t)});")
    if shallow is not None:
        lines += shallow.fragment_lines()
    ins = ", ".join(t.name for t in g.inputs)
    outs = ", ".join(g.output_names)
    lines.append(f"graph {GRAPH_NAME}({ins}) -> ({outs})")
    lines.append("{")
    lines += body
    lines.append("}")
    return "\n".join(lines) + "\n"


def _names(g: Graph, ops) -> set[str]:
    """Every identifier the graph text uses already (fragments, tensors, outputs)."""
    names = {f.name for f in g.fragments} | set(g.output_names)
    names.update(t.name for t in g.inputs)
    names.update(v.tensor.name for v in g.variables)
    names.update(o.name for op in ops for o in op.outputs if isinstance(o, Tensor))
    return names


def _declaration(g: Graph, v: Variable, label: str, storage,
                 shallow: ShallowText | None = None) -> list[str]:
    """The ``variable`` line of a weight; with a weight format (``storage``), its stored
    shape, and a cast back to the graph's dtype when it is stored in another one."""
    if storage is None:
        line = shallow.variable_line(v.tensor.name, v.tensor.dtype, v.tensor.shape, label) \
            if shallow is not None else None
        if line is not None:
            return [f"  {line};"]
        shape = ", ".join(str(int(d)) for d in v.tensor.shape)
        return [f"  {v.tensor.name} = variable<{nnef_type(v.tensor.dtype)}>"
                f"(shape = [{shape}], label = {format_value(label)});"]
    shape = ", ".join(str(int(d)) for d in storage.shape)
    cast = storage.cast_to()
    name = storage.raw_name if cast is not None else v.tensor.name
    lines = [f"  {name} = variable<scalar>(shape = [{shape}], label = {format_value(label)});"]
    if cast is not None:
        lines += _cast_back(g, name, v.tensor.name, [int(d) for d in storage.shape],
                            dtypes.tract_name(cast), cast.itemsize)
    return lines


# tract's constant folder (PropConst, 0.23.9) does not fold an op whose output outweighs
# both its inputs and this budget (CONST_FOLD_MEM_BUDGET): a cast of a stored f16 weight
# back to f32 doubles it, so beyond this size it would run at every inference
TRACT_FOLD_BUDGET_BYTES = 4 << 20


def _cast_back(g: Graph, stored: str, name: str, shape: list[int], to: str,
               itemsize: int) -> list[str]:
    """``name = cast(stored)``; when the cast result outweighs tract's fold budget, the cast
    runs on slices of the flattened weight that each fit it, concatenated and reshaped
    back: tract folds every step at load (a slice's input is exempt from the budget, a
    concat's output weighs what its inputs do), so the graph computes on a float32
    constant instead of casting the weight at every run (GPT-2 small with f16 weights: 7x
    slower than float32 before)."""
    n = math.prod(shape)
    chunk = TRACT_FOLD_BUDGET_BYTES // itemsize
    if n <= chunk:
        return [f"  {name} = tract_core_cast({stored}, to = '{to}');"]
    flat = g.fresh_name(stored + "_flat")
    lines = [f"  {flat} = reshape({stored}, shape = [{n}]);"]
    parts = []
    for begin in range(0, n, chunk):
        end = min(n, begin + chunk)
        piece, part = g.fresh_name(stored + "_part"), g.fresh_name(stored + "_cast")
        lines.append(f"  {piece} = slice({flat}, axes = [0], begin = [{begin}], "
                     f"end = [{end}]);")
        lines.append(f"  {part} = tract_core_cast({piece}, to = '{to}');")
        parts.append(part)
    joined = g.fresh_name(stored + "_joined")
    lines.append(f"  {joined} = concat([{', '.join(parts)}], axis = 0);")
    lines.append(f"  {name} = reshape({joined}, shape = [{', '.join(map(str, shape))}]);")
    return lines


def render_properties(props: dict) -> list[str]:
    """The ``tract_core_properties`` fragment: metadata tract reads into the model
    (``Model.property_keys()`` / ``Model.property(key)``). Values are strings, integers or
    non-empty lists of one of them; tract's parser has no escapes, so a string may not hold
    a quote or a backslash."""
    if not props:
        return []

    def literal(key, v):
        if isinstance(v, bool) or not isinstance(v, (int, str, list, tuple)):
            raise UsageError(f"property {key!r}: {type(v).__name__} values are not supported "
                             "(strings, integers or lists of them)")
        if isinstance(v, (list, tuple)):
            if not v or len({type(x) for x in v}) != 1 or isinstance(v[0], (list, tuple)):
                raise UsageError(f"property {key!r}: a list must be non-empty and hold "
                                 "strings only or integers only")
            return "[" + ", ".join(literal(key, x) for x in v) + "]"
        if isinstance(v, int):
            if not -2**31 <= v < 2**31:
                raise UsageError(f"property {key!r}: {v} does not fit tract's i32 properties")
            return str(v)
        if any(c in v for c in "\"'\\\n"):
            raise UsageError(f"property {key!r}: strings may not hold quotes, backslashes or "
                             "newlines")
        return f'"{v}"'

    items = []
    for k, v in props.items():
        if not isinstance(k, str) or not k or any(c in k for c in "\"'\\\n"):
            raise UsageError(f"property key {k!r} must be a non-empty string without quotes")
        items.append(f'("{k}", {literal(k, v)})')
    return ["fragment tract_core_properties(", ") -> (properties: (string, tensor<scalar>)[])",
            "{", "  properties = [" + ", ".join(items) + "];", "}", ""]


def same_bytes_aliases(g: Graph, used: set[int]) -> dict[int, Variable]:
    """{id(tensor): first variable} for used variables whose bytes ARE an earlier one's.

    A weight reshaped for broadcasting (``unsqueeze_to_rank`` on a tied embedding used by
    both a gather and a matmul) is a second variable over the same storage; writing it twice
    would double its share of the archive. It is declared as a ``reshape`` of the first one
    instead (tract folds it when optimising). Only contiguous views of the very same bytes
    qualify: equal data pointer, dtype and element count.
    """
    first: dict[tuple, Variable] = {}
    out: dict[int, Variable] = {}
    for v in g.variables:
        d = v.data
        if id(v.tensor) not in used or d.numel() == 0 or not d.is_contiguous():
            continue
        key = (d.data_ptr(), d.dtype, d.numel())
        if key in first:
            out[id(v.tensor)] = first[key]
        else:
            first[key] = v
    return out


def _name_outputs(g: Graph, ops) -> None:
    """Rename the tensor producing each output to the output's name when it is free to."""
    produced = {id(o) for op in ops for o in op.outputs}
    taken = set()
    for i, (name, t) in enumerate(zip(g.output_names, g.outputs)):
        if isinstance(t, Tensor) and id(t) in produced and id(t) not in taken \
                and t.literal is None:
            t.name = name
            taken.add(id(t))



# ---------------------------------------------------------------------------- .dat
def dat_header(shape, dtype: torch.dtype, nbytes: int) -> bytes:
    if len(shape) > 8:
        raise UsageError(f"tensor of rank {len(shape)}: NNEF files hold rank 8 at most")
    bits = 1 if dtype == torch.bool else dtypes.numpy_dtype(dtype).itemsize * 8
    dims = [int(d) for d in shape] + [0] * (8 - len(shape))
    head = struct.pack("<BBBBII8III", 0x4E, 0xEF, 1, 0, nbytes, len(shape), *dims, bits,
                       dtypes.dat_code(dtype))
    return head + b"\0" * (128 - len(head))


def dat_payload(data: torch.Tensor, dtype: torch.dtype | None = None):
    """The raw little-endian bytes of a weight, without copying contiguous storage.

    A non-contiguous weight (a folded ``w.t()``) comes as :class:`Chunks`, made contiguous a
    few MB at a time, so that no full copy of it ever exists; so does a weight written in
    another ``dtype`` than it is held in (a bfloat16 weight of a float32/float16 export),
    converted a few MB at a time."""
    t = data.detach()
    if dtype is not None and dtype != t.dtype:
        return Chunks(t, dtype)
    if t.dtype == torch.bool:
        return np.packbits(t.contiguous().numpy().reshape(-1)).tobytes()
    if not t.is_contiguous():
        return Chunks(t)
    a = t.numpy()
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return memoryview(a.reshape(-1)).cast("B") if a.size else b""


class Chunks:
    """The bytes of a strided tensor in C order, as contiguous pieces of <= WRITE_SLICE."""

    def __init__(self, t: torch.Tensor, dtype: torch.dtype | None = None):
        self.t = t
        self.dtype = dtype if dtype is not None else t.dtype

    def __len__(self) -> int:
        return self.t.numel() * torch.empty((), dtype=self.dtype).element_size()

    def __iter__(self):
        if self.dtype != self.t.dtype:
            return self._converted(self.t.reshape(-1))
        return self._pieces(self.t)

    def _converted(self, flat: torch.Tensor):
        step = max(1, WRITE_SLICE // 4)
        for i in range(0, flat.numel(), step):
            yield memoryview(flat[i:i + step].to(self.dtype).numpy()).cast("B")

    def _pieces(self, t: torch.Tensor):
        if t.is_contiguous():
            if t.numel():
                yield memoryview(t.numpy().reshape(-1)).cast("B")
            return
        row = t[0].numel() * t.element_size() if t.shape[0] else 0
        if t.dim() > 1 and row > WRITE_SLICE:
            for i in range(t.shape[0]):
                yield from self._pieces(t[i])
            return
        step = max(1, WRITE_SLICE // max(row, 1))
        for i in range(0, t.shape[0], step):
            yield memoryview(t[i:i + step].contiguous().numpy().reshape(-1)).cast("B")


def payload_bytes(g: Graph, graph_text: bytes) -> int:
    """Bytes of graph.nnef plus every .dat file (the total a progress display counts to)."""
    used = g.used_tensors(g.live_ops())
    total = len(graph_text)
    aliases = same_bytes_aliases(g, used)
    for v in g.variables:
        if id(v.tensor) in g.session.storage and id(v.tensor) not in aliases:
            total += 128 + g.session.storage[id(v.tensor)].nbytes()
        elif id(v.tensor) in used and id(v.tensor) not in aliases:
            n = v.data.numel()
            n = (n + 7) // 8 if v.data.dtype == torch.bool else \
                n * torch.empty((), dtype=v.tensor.dtype).element_size()
            total += 128 + n
    return total


def _members(g: Graph, graph_text: bytes):
    """(name, .dat header, payload) for every member, graph.nnef first, then by name.

    Lazy: each payload is a view of its weight, made when the member is reached."""
    ops = g.live_ops()
    used = g.used_tensors(ops)
    yield "graph.nnef", graph_text, b""
    labels = g.final_labels(used)
    aliases = same_bytes_aliases(g, used)
    vars_: list[Variable] = [v for v in g.variables
                             if id(v.tensor) in used and id(v.tensor) not in aliases]
    for v in sorted(vars_, key=lambda v: labels[id(v.tensor)]):
        name = labels[id(v.tensor)] + ".dat"
        storage = g.session.storage.get(id(v.tensor))
        if storage is not None:  # a weight format: converted piece by piece while written
            yield name, storage.header(), storage.payload()
            continue
        payload = dat_payload(v.data, v.tensor.dtype)
        yield name, dat_header(v.data.shape, v.tensor.dtype, len(payload)), payload
        del payload  # one weight's bytes alive at a time


# ---------------------------------------------------------------------------- output kinds
@timed("write")
def write(g: Graph, path: str, progress=None, flush: bool = True) -> int:
    """Write the archive atomically in the dialect of the graph's target (its session's);
    returns its size in bytes.

    The kind (tar, gzip tar, folder) comes from the name (:func:`output_kind`); what is at
    ``path`` is replaced only when it is an archive (:mod:`t2n.write.output_paths`).
    ``flush=False`` leaves flushing it to disk to the caller, who renames it later
    (:func:`t2n.write.durable.flushing`)."""
    kind = output_paths.check_output(path)
    shown = os.fspath(path)
    path = os.path.abspath(shown)
    parent = os.path.dirname(path) or "."
    if not os.access(parent, os.W_OK):
        raise UsageError(f"cannot write {path}: directory {parent} is not writable")
    graph_text = render_graph(g).encode("utf-8")
    if progress is not None and hasattr(progress, "start"):
        progress.start(payload_bytes(g, graph_text))
    base = os.path.basename(path)
    tmp = None
    try:
        if kind == "dir":
            tmp = tempfile.mkdtemp(prefix=f".{base}.", suffix=".partial", dir=parent)
            size = _write_dir(g, graph_text, tmp, progress)
            if flush:
                flush_to_disk(tmp)
            move_into_place(tmp, path, kind, shown)
        else:
            fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".partial", dir=parent)
            with os.fdopen(fd, "wb") as f:
                _write_tar(g, graph_text, f, kind == "tgz", progress)
                f.flush()
                if flush:
                    os.fsync(f.fileno())
            os.chmod(tmp, 0o644 & ~output_paths.umask())
            move_into_place(tmp, path, kind, shown)
            size = os.path.getsize(path)
        tmp = None
        return size
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        if tmp is not None:
            if os.path.isdir(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
            elif os.path.exists(tmp):
                os.remove(tmp)


def _write_dir(g: Graph, graph_text: bytes, root: str, progress) -> int:
    total = 0
    for name, head, payload in _members(g, graph_text):
        with open(os.path.join(root, name), "wb") as f:
            f.write(head)
            _copy(f, payload, progress, len(head))
        total += len(head) + len(payload)
        del payload
    return total


def _copy(sink, payload, progress, already: int = 0) -> None:
    """Write ``payload`` in slices of a memoryview (no copies), reporting bytes as they go."""
    if not isinstance(payload, (bytes, bytearray, memoryview)):  # Chunks, streamed pieces
        if progress and already:
            progress(already)
        for part in payload:
            sink.write(part)
            if progress:
                progress(len(part))
        return
    if not progress:
        if len(payload):
            sink.write(payload)
        return
    if already:
        progress(already)
    view = memoryview(payload)
    for i in range(0, len(view), WRITE_SLICE):
        part = view[i:i + WRITE_SLICE]
        sink.write(part)
        progress(len(part))


def _tar_header(name: str, size: int) -> bytes:
    """A GNU tar header with fixed owner, mode and time (reproducible archives)."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")


def _write_tar(g: Graph, graph_text: bytes, f, gz: bool, progress) -> None:
    """Tar (optionally gzip) stream: headers are built here so that each weight goes from its
    own storage to the file (or the compressor) by reference, never through a copy."""
    sink = GzipStream(f) if gz else f
    try:
        offset = 0
        for name, head, payload in _members(g, graph_text):
            size = len(head) + len(payload)
            tar_head = _tar_header(name, size)
            sink.write(tar_head + head)
            _copy(sink, payload, progress, len(head))
            del payload
            pad = -size % tarfile.BLOCKSIZE
            if pad:
                sink.write(b"\0" * pad)
            offset += len(tar_head) + size + pad
        # end of archive: two zero blocks, then zero-fill to a whole record (as tarfile does)
        offset += 2 * tarfile.BLOCKSIZE
        sink.write(b"\0" * (2 * tarfile.BLOCKSIZE + (-offset % tarfile.RECORDSIZE)))
    except BaseException:
        if gz:
            sink.abort()
        raise
    if gz:
        sink.close()
