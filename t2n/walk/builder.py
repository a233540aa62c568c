"""The NNEF graph under construction, and the lowering helpers every mapping shares.

Mapping functions never write NNEF text: they call :meth:`Graph.op` and the helpers below,
which take care of tract's quirks once, here:

* broadcasting pads missing axes at the *end* in tract, so binary ops equalise ranks with
  leading ``unsqueeze`` (:meth:`Graph.binary`);
* integer literals are TDim, not i64, and a float literal beside an int tensor is cast
  silently, so non-f32 constants are emitted typed (:meth:`Graph.const`);
* there is no implicit promotion between tensors, so operands are cast explicitly.

A :class:`Tensor` (:mod:`t2n.walk.tensors`) is a handle: a name, a shape (ints, or sympy
expressions for symbolic axes), a torch dtype and, for constants, the known value.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from t2n import dtypes
from t2n.walk import opmath
from t2n.errors import ConversionError
# handles (t2n.walk.tensors) and NNEF spelling (t2n.write.nnef_text), re-exported for mappings
from t2n.walk.tensors import DATA_DEPENDENT_PREFIX, Dim, Op, Tensor, Unavailable  # noqa: F401
from t2n.walk.tensors import Variable, _python_dtype, _result_type, broadcast_shapes  # noqa: F401
from t2n.walk.tensors import marked_complex  # noqa: F401
from t2n.write.nnef_text import _literal_array, _SymDim, format_dim, format_float  # noqa: F401
from t2n.write.nnef_text import format_value, safe_identifier, sanitize  # noqa: F401

# element-wise ops whose tract kernels take numbers only, in the form tract has for bools
_BOOL_FORMS = {"max": "or", "min": "and", "mul": "and", "add": "or"}


MAX_INLINE_ELEMENTS = 8


@dataclass
class NodeContext:
    """What the walker knows about the aten node being converted (from the trace)."""

    op: str
    out_dtypes: list = field(default_factory=list)
    out_shapes: list = field(default_factory=list)
    where: str | None = None
    in_strides: list = field(default_factory=list)  # traced strides of tensor inputs (or None)
    # the dtype PyTorch's kernel stores the node's computed weights in when it computes in
    # a wider one (float16 interpolation weights of a half node computed in float32; set by
    # t2n.walk.opmath), else None
    weights_dtype: object = None
    torch_out_dtypes: list = field(default_factory=list)  # PyTorch's (bf16: t2n.walk.bf16_values)


class Graph:
    """An NNEF graph being built: inputs, ops in emission order, variables, outputs. The
    export's choices and shared tables are its ``session`` (t2n.session.ExportSession)."""

    def __init__(self, session):
        self.session = session
        self.inputs: list[Tensor] = []
        self.outputs: list[Tensor] = []
        self.output_names: list[str] = []
        self.ops: list[Op] = []
        self.variables: list[Variable] = []
        self.symbols: dict[str, int] = {}  # tract symbol -> its least size (t2n.walk.dynamic)
        self.symbol_maxima: dict[str, int] = {}  # symbol -> a user-given most size
        self.fragments: list = []  # loop bodies (t2n.walk.loops.Fragment), written first
        self._var_cache: dict = {}
        self.shared: dict = {}  # values built once per graph and reused by later ops (key -> value)
        self._labels: set[str] = set()
        self._names: set[str] = set()
        self._counts: Counter = Counter()  # the graph's numbered sequences (count())
        self.node: NodeContext | None = None

    # ------------------------------------------------------------------ naming
    def count(self, sequence: str) -> int:
        """The next number (1 first) of one of the graph's sequences: fresh names, constant
        labels, the sizes the data decides (each family of symbols numbered apart)."""
        self._counts[sequence] += 1
        return self._counts[sequence]

    def fresh_name(self, hint: str) -> str:
        hint = sanitize(hint.replace("tract_core_", ""))
        while True:
            name = f"{hint}_{self.count('name')}"
            if name not in self._names:
                self._names.add(name)
                return name

    def reserve_name(self, name: str) -> None:
        self._names.add(name)

    # ------------------------------------------------------------------ node context
    def computed(self, dtype):
        """The dtype the graph computes a value of torch ``dtype`` in (bf16 -> the export's
        ``dtype=`` choice)."""
        return self.session.bf16_as if dtype == torch.bfloat16 else dtype

    def out_dtype(self, i: int = 0) -> torch.dtype:
        """The dtype PyTorch gave output ``i`` of the node being converted."""
        return self.node.out_dtypes[i]

    def out_shape(self, i: int = 0) -> tuple:
        return tuple(self.node.out_shapes[i])

    def streams(self, t: Tensor, axis: int) -> bool:
        """Whether ``axis`` of ``t`` is the streaming axis of a streaming export (lowerings
        ask it to pick forms tract can pulse)."""
        streaming = self.session.streaming
        return streaming is not None and streaming.carries(t.shape[axis])

    def error(self, message: str) -> ConversionError:
        """A ConversionError naming the current op: ``raise g.error("...")``."""
        op = self.node.op if self.node else "?"
        return ConversionError(op, message)

    def unavailable(self, reason: str) -> Unavailable:
        """A placeholder for an output this mapping does not compute (see Unavailable)."""
        return Unavailable(self.node.op if self.node else "?", reason)

    # ------------------------------------------------------------------ declarations
    def add_input(self, name: str, shape: Sequence[Dim], dtype: torch.dtype) -> Tensor:
        t = Tensor(name, shape, dtype)
        self.reserve_name(name)
        self.inputs.append(t)
        return t

    def add_symbol(self, name: str, minimum: int = 1) -> None:
        self.symbols[name] = min(self.symbols.get(name, minimum), minimum)

    def variable(self, data: torch.Tensor, label: str | None = None) -> Tensor:
        """A weight stored in its own .dat file; the same storage is written once."""
        data = data.detach()
        if data.is_complex() and dtypes.complex_part(data.dtype):  # (re, im) pairs, marked
            return marked_complex(self.variable(torch.view_as_real(data.resolve_conj()).clone()))
        key = (data.data_ptr(), data.dtype, tuple(data.shape), tuple(data.stride()),
               data.storage_offset()) if data.numel() else None
        if key is not None and key in self._var_cache:
            return self._var_cache[key]
        dtype = self.computed(data.dtype)  # bf16 weights: converted while written
        if not dtypes.supported(dtype):
            raise self.error(f"constant of dtype {data.dtype} is not supported by tract")
        if label is None:
            label = f"t2n_const_{self.count('const')}"
        t = Tensor(self.fresh_name(label), data.shape, dtype, value=data)
        self.variables.append(Variable(t, label, data))
        if key is not None:
            self._var_cache[key] = t
        return t

    def final_labels(self, used: set[int]) -> dict[int, str]:
        """File labels of the variables in use, unique, in emission order.

        Labels are settled at the end so that a weight reshaped for broadcasting (the unused
        original dropped) keeps its state_dict name.
        """
        taken: set[str] = set()
        out = {}
        for v in self.variables:
            if id(v.tensor) not in used:
                continue
            label = v.label.replace("/", ".").lstrip(".") or "w"
            base, k = label, 1
            while label in taken:
                k += 1
                label = f"{base}.{k}"
            taken.add(label)
            out[id(v.tensor)] = label
        return out

    def const(self, value, dtype: torch.dtype | None = None, label: str | None = None) -> Tensor:
        """A constant (tensor, array, number or list): a literal when small, else a .dat
        variable; an int is really i64 (or its own int type), never tract's TDim."""
        if isinstance(value, Tensor):
            return self.cast(value, dtype) if dtype is not None else value
        if isinstance(value, (torch.Tensor, np.ndarray, np.generic)):
            t = value.detach() if isinstance(value, torch.Tensor) else torch.tensor(value)
            if dtype is not None and t.dtype != dtype:
                t = t.to(dtype)
        else:
            if dtype is None:
                dtype = _python_dtype(value)
            t = torch.tensor(value, dtype=dtype)
        if t.dtype == torch.bfloat16 and t.numel() <= MAX_INLINE_ELEMENTS:
            t = t.to(self.session.bf16_as)
        if t.numel() <= MAX_INLINE_ELEMENTS and t.numel() > 0:
            lit = self._literal_text(t)
            if lit is not None:
                return Tensor(lit, t.shape, t.dtype, value=t, literal=lit)
        return self.variable(t.contiguous() if t.numel() <= 1 << 16 else t, label)

    constant = const  # its name in the public builder surface (docs/extensions.md)

    def _literal_text(self, t: torch.Tensor) -> str | None:
        a = t.numpy()
        if t.dtype == torch.bool:
            return _literal_array(a, lambda v: "true" if v else "false")
        if t.dtype.is_floating_point:
            if np.isnan(a).any():
                return None
            with np.errstate(over="ignore"):
                a32 = a.astype(np.float32)
            if t.dtype == torch.float64 and not np.array_equal(a32.astype(np.float64), a):
                return None
            text = _literal_array(a32, lambda v: format_float(float(v)))
            if t.dtype == torch.float32:
                return text
            return f"tract_core_cast({text}, to = '{dtypes.tract_name(t.dtype)}')"
        if not dtypes.supported(t.dtype):
            return None
        if a.ndim > 0 and (int(a.min()) < -2 ** 31 or int(a.max()) >= 2 ** 31):
            return None  # tract reads integer *array* literals as i32 (wraps); use a .dat
        text = _literal_array(a, lambda v: str(int(v)))
        return f"tract_core_cast({text}, to = '{dtypes.tract_name(t.dtype)}')"

    def reshaped_const(self, t: Tensor, shape) -> Tensor:
        """A constant with a new shape: a literal stays inline, a weight keeps its label."""
        data = t.value.reshape(shape)
        if t.literal is not None:
            return self.const(data)
        var = next((v for v in self.variables if v.tensor is t), None)
        return self.variable(data, var.label if var else None)

    def scalar(self, value, dtype: torch.dtype) -> Tensor:
        """A rank-0 constant of exactly ``dtype``."""
        if isinstance(value, Tensor):
            return self.cast(value, dtype)
        if _is_sym(value):
            return self.dim_scalar(value, dtype)
        if isinstance(value, torch.Tensor):
            return self.const(value.to(dtype))
        return self.const(torch.tensor(value, dtype=dtype))

    def dim_scalar(self, expr, dtype: torch.dtype = torch.int64) -> Tensor:
        """A rank-0 tensor holding a (symbolic) size, evaluated by tract at run time:
        ``tract_core_cast(2*S+1, to = 'i64')`` (a dim literal is a TDim, never i64)."""
        t = self.op("tract_core_cast", _SymDim(expr), to="i64", out_dtype=torch.int64,
                    out_shape=())
        return self.cast(t, dtype)

    # ------------------------------------------------------------------ ops
    def op(self, kind: str, *args, out_dtype: torch.dtype | None = None, out_shape=None,
           outputs: int = 1, out_dtypes=None, out_shapes=None, **attrs):
        """Emit one NNEF op; returns its output handle (or a tuple when ``outputs > 1``).

        Default output dtype/shape: the first tensor argument's dtype, the broadcast of the
        tensor arguments' shapes (right for element-wise ops). Symbolic dims inside list
        attributes (``shape=[B, 3]``) are written as tract dim expressions.
        """
        if kind in _NUMBERS_ONLY and isinstance(args[0], Tensor) and args[0].dtype == torch.bool:
            return self._bool_through_u8(kind, args, attrs, out_shape)
        tensors = [a for a in _flatten(args) if isinstance(a, Tensor)]
        dtype = out_dtype if out_dtype is not None else (
            tensors[0].dtype if tensors else torch.float32)
        shape = out_shape
        if shape is None:
            shape = broadcast_shapes(*(t.shape for t in tensors)) if tensors else ()
        attrs = {k: _attr(v) for k, v in attrs.items()}
        out_dtypes = out_dtypes or [dtype] * outputs
        out_shapes = out_shapes or [shape] * outputs
        outs = [Tensor(self.fresh_name(kind), s, d) for s, d in zip(out_shapes, out_dtypes)]
        self.ops.append(Op(kind, list(args), attrs, outs, self.node))
        return outs[0] if outputs == 1 else tuple(outs)

    def _bool_through_u8(self, kind, args, attrs, out_shape):
        """A data-moving op whose tract kernel takes numbers only ("Bool is not a number"),
        on a bool tensor: run on u8 (0/1) and cast back; an ``add`` (``mul``) reduction is
        ``max`` (``min``) there, which is PyTorch's bool ``or`` (``and``)."""
        args = [self.cast(a, torch.uint8) if i in _NUMBERS_ONLY[kind] else a
                for i, a in enumerate(args)]
        attrs = dict(attrs)
        if "value" in attrs:
            attrs["value"] = float(bool(attrs["value"]))
        if "reduction" in attrs:
            attrs["reduction"] = {"add": "max", "mul": "min"}.get(attrs["reduction"],
                                                                  attrs["reduction"])
        y = self.op(kind, *args, out_dtype=torch.uint8, out_shape=out_shape, **attrs)
        return self.cast(y, torch.bool)

    # ------------------------------------------------------------------ shared helpers
    def cast(self, t: Tensor, dtype: torch.dtype) -> Tensor:
        if t.dtype == dtype:
            return t
        if t.is_const and t.value.numel() <= MAX_INLINE_ELEMENTS:
            return self.const(t.value.to(dtype))
        return self.op("tract_core_cast", t, to=dtypes.tract_name(dtype), out_dtype=dtype)

    def as_tensor(self, v, dtype: torch.dtype) -> Tensor:
        """A tensor argument or a Python scalar, as a tensor of ``dtype``."""
        if isinstance(v, Tensor):
            return self.cast(v, dtype)
        return self.scalar(v, dtype)

    def unsqueeze_to_rank(self, t: Tensor, rank: int) -> Tensor:
        """Leading unit axes up to ``rank`` (tract broadcasts from the end otherwise)."""
        if t.rank >= rank:
            return t
        missing = rank - t.rank
        if t.is_const:
            return self.reshaped_const(t, (1,) * missing + tuple(t.value.shape))
        return self.unsqueeze(t, list(range(missing)))

    def binary(self, kind: str, a, b, dtype: torch.dtype | None = None,
               out_dtype: torch.dtype | None = None) -> Tensor:
        """Element-wise binary op with torch broadcasting: operands cast to ``dtype`` and
        brought to equal rank first."""
        if dtype is None:
            dtype = _result_type(a, b)
        if dtype == torch.bool and kind in ("eq", "ne"):
            # tract compares numbers only: bool equality is (not) xor
            x = self.binary("tract_core_xor", a, b, torch.bool)
            return x if kind == "ne" else self.op("not", x, out_dtype=torch.bool)
        if dtype == torch.bool and kind in ("lt", "gt", "le", "ge"):
            dtype = torch.uint8
        if dtype == torch.bool and kind in _BOOL_FORMS:
            # tract's max/min/mul kernels take numbers only; on bools they are or/and
            kind = _BOOL_FORMS[kind]
        a = self.as_tensor(a, dtype)
        b = self.as_tensor(b, dtype)
        if dtype == torch.float16 and kind in opmath.TRACT_F16_WIDENED:
            # tract's f16 kernel is not correctly rounded: PyTorch's float op, rounded once
            wide = self.binary(kind, self.cast(a, torch.float32), self.cast(b, torch.float32),
                               torch.float32)
            return self.cast(wide, out_dtype or dtype)
        rank = max(a.rank, b.rank)
        # a rank-0 literal broadcasts against any rank in tract's binary ops
        if not (a.rank == 0 and a.literal is not None):
            a = self.unsqueeze_to_rank(a, rank)
        if not (b.rank == 0 and b.literal is not None):
            b = self.unsqueeze_to_rank(b, rank)
        return self.op(kind, a, b, out_dtype=out_dtype or dtype)

    def unary(self, kind: str, x: Tensor, **attrs) -> Tensor:
        return self.op(kind, x, **attrs)

    def unsqueeze(self, t: Tensor, axes: list[int]) -> Tensor:
        if not axes:
            return t
        shape = list(t.shape)
        for a in sorted(axes):
            shape.insert(a, 1)
        return self.op("unsqueeze", t, axes=list(axes), out_shape=shape)

    def squeeze(self, t: Tensor, axes: list[int]) -> Tensor:
        if not axes:
            return t
        shape = [d for i, d in enumerate(t.shape) if i not in set(axes)]
        return self.op("squeeze", t, axes=sorted(axes), out_shape=shape)

    def reshape(self, t: Tensor, shape: Sequence[Dim]) -> Tensor:
        shape = list(shape)
        if list(t.shape) == shape:
            return t
        if not shape:  # tract's reshape cannot produce rank 0 (`shape = []` fails to load)
            return self.squeeze(t, list(range(t.rank)))
        if any(isinstance(d, int) and d == 0 for d in shape):
            # NNEF reads 0 in a reshape target as "copy this axis": an empty result is
            # made by broadcasting instead (it holds no values anyway)
            return self.op("tract_core_broadcast", self.scalar(0, t.dtype), shape=shape,
                           out_shape=shape, out_dtype=t.dtype)
        return self.op("reshape", t, shape=shape, out_shape=shape)

    def transpose(self, t: Tensor, perm: Sequence[int]) -> Tensor:
        perm = list(perm)
        if perm == list(range(t.rank)):
            return t
        shape = [t.shape[p] for p in perm]
        return self.op("transpose", t, axes=perm, out_shape=shape)

    def slice(self, t: Tensor, axis: int, begin: Dim, end: Dim, stride: int = 1) -> Tensor:
        """``t[begin:end:stride]`` along ``axis``; bounds must already be normalised
        (0 <= begin <= end <= dim), as tract requires."""
        dim = t.shape[axis]
        if begin == 0 and end == dim and stride == 1:
            return t
        shape = list(t.shape)
        n = end - begin
        shape[axis] = (n + stride - 1) // stride if isinstance(n, int) else _ceil_div(n, stride)
        if isinstance(n, int) and n == 0:
            shape[axis] = 0
        if stride > 1 and not (isinstance(n, int) and n == 0) and not self.streams(t, axis):
            # (on a streaming axis the strided slice stays: tract pulses it, not a gather)
            # tract 0.23.9 miscompiles a strided slice (its Downsample op) pulled over a
            # softmax on the same axis (wrong values) or over a reshape ("Invalid axis" at
            # load): a gather of in-range indices 0, stride, ... is the same thing, safely
            t = self.slice(t, axis, begin, end)
            if isinstance(n, int):
                idx = self.const(torch.arange(0, n, stride), torch.int64)
            else:
                idx = self.binary("mul", self.arange(shape[axis]),
                                  self.scalar(stride, torch.int64), torch.int64)
            return self.gather(t, idx, axis)
        return self.op("slice", t, axes=[axis], begin=[begin], end=[end], stride=[stride],
                       out_shape=shape)

    def repeat_each(self, t: Tensor, axis: int, r: int) -> Tensor:
        """Every element ``r`` times in a row along ``axis`` (``repeat_interleave(r)``,
        nearest upsampling by ``r``): unsqueeze, broadcast, reshape. Size-generic, so it
        serves dynamic axes, and tract pulses it on a streaming axis."""
        if r == 1:
            return t
        u = self.unsqueeze(t, [axis + 1])
        shape = list(u.shape)
        shape[axis + 1] = r
        b = self.broadcast_to(u, shape)
        out = list(t.shape)
        out[axis] = t.shape[axis] * r
        return self.reshape(b, out)

    def concat(self, ts: list[Tensor], axis: int) -> Tensor:
        if len(ts) == 1:
            return ts[0]
        shape = list(ts[0].shape)
        total = 0
        for t in ts:
            total = total + t.shape[axis]
        shape[axis] = total
        if any(isinstance(d, int) and d == 0 for d in shape):
            # tract's optimiser fails on a concat of empty tensors; the result holds nothing
            return self.op("tract_core_broadcast", self.scalar(0, ts[0].dtype), shape=shape,
                           out_shape=shape, out_dtype=ts[0].dtype)
        return self.op("concat", list(ts), axis=axis, out_shape=shape, out_dtype=ts[0].dtype)

    def gather(self, t: Tensor, indices: Tensor, axis: int) -> Tensor:
        shape = list(t.shape[:axis]) + list(indices.shape) + list(t.shape[axis + 1:])
        return self.op("tract_core_gather", t, indices, axis=axis, out_shape=shape,
                       out_dtype=t.dtype)

    def broadcast_to(self, t: Tensor, shape: Sequence[Dim]) -> Tensor:
        t = self.unsqueeze_to_rank(t, len(shape))
        if tuple(t.shape) == tuple(shape):
            return t
        return self.op("tract_core_broadcast", t, shape=list(shape), out_shape=list(shape))

    def reduce(self, kind: str, t: Tensor, axes: list[int], keepdim: bool,
               dtype: torch.dtype | None = None) -> Tensor:
        """NNEF reductions keep the reduced axes; squeeze them for keepdim=False."""
        axes = sorted(set(axes))
        shape = [1 if i in axes else d for i, d in enumerate(t.shape)]
        if any(isinstance(t.shape[a], int) and t.shape[a] == 0 for a in axes) \
                and kind in _REDUCE_IDENTITY:
            # tract aborts when reducing over an empty axis: the result is the identity
            r = self.broadcast_to(self.scalar(_identity(kind, dtype or t.dtype),
                                              dtype or t.dtype), shape)
        elif kind == "sum_reduce" and not t.dtype.is_floating_point and t.dtype != torch.bool:
            r = self._integer_sum(t, axes)
        else:
            r = self.op(kind, t, axes=axes, out_shape=shape, out_dtype=dtype or t.dtype)
            if kind in ("max_reduce", "min_reduce") and t.dtype.is_floating_point:
                r = self._unsaturate(kind, t, axes, shape, r)
        return r if keepdim else self.squeeze(r, axes)

    def _integer_sum(self, t: Tensor, axes: list[int]) -> Tensor:
        """An exact integer sum (reduced axes kept). tract's integer ``sum_reduce``
        accumulates in i32 and saturates (i64 terms are truncated to 32 bits first), while
        its ``tract_core_cumsum`` adds in the tensor's own type, wrapping as PyTorch does:
        per axis, the first element of a reverse cumsum is the total."""
        for a in axes:
            if isinstance(t.shape[a], int) and t.shape[a] == 1:
                continue
            c = self.op("tract_core_cumsum", t, axis=a, exclusive=False, reverse=True,
                        out_shape=list(t.shape))
            t = self.slice(c, a, 0, 1)
        return t

    def _unsaturate(self, kind: str, t: Tensor, axes: list[int], shape, r: Tensor) -> Tensor:
        """tract's float max/min reductions never leave the finite range: a slice of only
        -inf gives the lowest finite float for max (+inf likewise for min). One flag
        reduction and a select give back the infinity."""
        inf = float("-inf") if kind == "max_reduce" else float("inf")
        beyond = self.binary("gt" if kind == "max_reduce" else "lt", t, inf, t.dtype,
                             out_dtype=torch.bool)
        reached = self.op("any_reduce", beyond, axes=axes, out_shape=shape,
                          out_dtype=torch.bool)
        return self.op("select", reached, r, self.scalar(inf, t.dtype), out_shape=shape,
                       out_dtype=r.dtype)

    def shape_of(self, t: Tensor) -> Tensor:
        """The runtime shape of ``t`` as an i64 vector (symbolic axes stay symbolic)."""
        s = self.op("tract_core_shape_of", t, out_shape=[t.rank], out_dtype=torch.int64)
        return self.op("tract_core_cast", s, to="i64", out_dtype=torch.int64)

    def arange(self, n: Dim, dtype: torch.dtype = torch.int64) -> Tensor:
        """``[0, 1, ..., n-1]`` where ``n`` may be symbolic.

        A static ``n`` gives ``tract_core_range`` (folded to a constant). A symbolic one is
        an exclusive cumsum of ones: tract 0.23.9 rewrites comparisons of symbolic
        ``tract_core_range`` outputs (``j <= i`` causal masks) into region splits that fail at
        run time ("Undetermined symbol in expression"), and a cumsum is opaque to that."""
        if isinstance(n, int):
            r = self.op("tract_core_range", 0, n, 1, out_dtype=torch.int64, out_shape=[n])
        else:
            ones = self.broadcast_to(self.scalar(1, torch.int64), [n])
            r = self.op("tract_core_cumsum", ones, axis=0, exclusive=True, reverse=False,
                        out_dtype=torch.int64, out_shape=[n])
        return self.cast(r, dtype)

    def zeros_like(self, t: Tensor, value=0) -> Tensor:
        return self.broadcast_to(self.scalar(value, t.dtype), t.shape)

    # ------------------------------------------------------------------ finishing
    def set_outputs(self, tensors: list[Tensor], names: list[str]) -> None:
        self.outputs = list(tensors)
        self.output_names = list(names)

    def live_ops(self) -> list[Op]:
        """Ops the outputs depend on, in emission order (dead code is dropped)."""
        producer = {}
        for op in self.ops:
            for o in op.outputs:
                producer[id(o)] = op
        live: set[int] = set()
        stack = [t for t in self.outputs]
        seen = set()
        while stack:
            t = stack.pop()
            if id(t) in seen:
                continue
            seen.add(id(t))
            op = producer.get(id(t))
            if op is None or id(op) in live:
                continue
            live.add(id(op))
            for a in _flatten(op.args):
                if isinstance(a, Tensor):
                    stack.append(a)
            for v in op.attrs.values():
                for a in _flatten([v]):
                    if isinstance(a, Tensor):
                        stack.append(a)
        return [op for op in self.ops if id(op) in live]

    def used_tensors(self, ops: list[Op]) -> set[int]:
        used = {id(t) for t in self.outputs}
        for op in ops:
            for a in _flatten(op.args) + _flatten(list(op.attrs.values())):
                if isinstance(a, Tensor):
                    used.add(id(a))
        return used

    def op_histogram(self) -> dict[str, int]:
        c = Counter(op.kind for op in self.live_ops())
        return dict(sorted(c.items()))


# ops whose tract kernels refuse bool tensors -> the positions of their data arguments
_NUMBERS_ONLY = {"pad": (0,), "tract_core_scatter_nd": (0, 2),
                 "tract_core_scatter_elements": (0, 2)}

_REDUCE_IDENTITY = {"sum_reduce": 0, "mean_reduce": float("nan"), "max_reduce": float("-inf"),
                    "min_reduce": float("inf"), "tract_core_product_reduce": 1,
                    "any_reduce": False, "all_reduce": True}


def _identity(kind: str, dtype: torch.dtype):
    v = _REDUCE_IDENTITY[kind]
    if dtype.is_floating_point or dtype == torch.bool or not isinstance(v, float):
        return v
    info = torch.iinfo(dtype)
    return info.max if v == float("inf") else info.min if v == float("-inf") else 0


def _flatten(args) -> list:
    out = []
    for a in args:
        if isinstance(a, (list, tuple)):
            out.extend(_flatten(a))
        else:
            out.append(a)
    return out


def _attr(v):
    """Attribute values as given, with symbolic dims wrapped for printing."""
    if isinstance(v, (list, tuple)):
        return type(v)(_attr(x) for x in v)
    if isinstance(v, (Tensor, str, bool, int, float, np.integer, np.floating, _SymDim)):
        return v
    if v is None:
        return v
    return _SymDim(v)


def _ceil_div(n, k):
    import sympy

    return sympy.ceiling(sympy.sympify(n) / k)


def _is_sym(x) -> bool:
    # looked up, not imported: no sympy value exists before sympy is imported (0.5 s that
    # every static export would pay)
    sympy = __import__("sys").modules.get("sympy")
    return sympy is not None and isinstance(x, sympy.Basic) and not x.is_number


