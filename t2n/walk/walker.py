"""Read an inlined TorchScript graph (a trace, or a saved or scripted module) for the
walker core (:mod:`t2n.walk.core`), which folds, dispatches and conforms every op.

What is TorchScript's own stays here:

* ``prim::`` plumbing (constants, attributes, lists, tuples) is resolved to Python values,
  and ``aten::Int``/``size``/``len`` style reads and size arithmetic on traced sizes are
  computed in Python;
* every other node becomes an :class:`t2n.walk.core.OpCall`: dtypes come from the traced
  types, ScalarType codes become dtypes for a user's mapping, numbers the trace kept as
  numbers (``prim::NumToTensor``) become tensors again for folding, and with dynamic axes
  PyTorch's shape functions give the symbolic output sizes;
* in-place ops (``add_``, ``index_put_``, ``copy_`` ...) run the functional mapping and the
  result is written back into the mutated tensor and, when that tensor is a view (``y[:, 1:3]``),
  into its base through the chain of view ops, so the exported graph computes the same final
  values as PyTorch.

TorchScript value reading lives in :mod:`t2n.walk.torchscript`, view tracking and the inverse of
each view op in :mod:`t2n.walk.views`.
"""

from __future__ import annotations

import torch

from t2n.walk import registry
from t2n.walk.builder import Graph, Tensor
from t2n.errors import ConversionError
from t2n.walk.core import POISON, OpCall, Out, WalkerCore, unmapped_library_op
from t2n.walk.folding import number_as_tensor
from t2n.walk.torchscript import (_has_symbols, _is_number, _is_symbolic, _py, size_remainder,
                                  _symbolic_shapes, _ts_dtype, _ts_sizes, _ts_strides, _Unsupported,
                                  scalar_type, source_location)
from t2n.walk.torchscript import _T2N_DIR, _TORCH_DIR  # noqa: F401  (kept importable from here)
from t2n.walk.views import ViewWrites
from t2n.capture.constant_writes import written_constants
from t2n.stopwatch import timed


# Symbolic/int arithmetic done in Python (shape computations on traced sizes).
_PY_ARITH = {
    "add": lambda a, b, alpha=1: a + b * alpha, "sub": lambda a, b, alpha=1: a - b * alpha,
    "rsub": lambda a, b, alpha=1: b - a * alpha, "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b, "floor_divide": lambda a, b: a // b,
    "remainder": lambda a, b: size_remainder(a, b), "neg": lambda a: -a,
}


class Walker(ViewWrites, WalkerCore):
    """The reader of TorchScript graphs: visits the nodes and keeps their values by
    ``torch._C.Value``; views and in-place writes are :class:`t2n.walk.views.ViewWrites`'s."""

    def __init__(self, graph: Graph, root, labels: dict[int, str]):
        super().__init__(graph, labels)
        self.root = root
        self.env: dict = {}
        self.views: dict = {}  # value -> _View
        self.list_views: dict = {}  # list value of split/chunk/unbind -> (source, [links])
        self.version: dict = {}  # base value -> mutation count
        self._schemas: dict[str, object] = {}
        self._written: set[int] = set()  # the unique ids of constants the graph writes

    # ------------------------------------------------------------------ entry point
    @timed("walk")
    def run(self, ts_graph, inputs: list[Tensor]) -> list:
        ts_inputs = list(ts_graph.inputs())
        if self.root is not None:
            self.env[ts_inputs[0]] = self.root
            ts_inputs = ts_inputs[1:]
        for v, t in zip(ts_inputs, inputs):
            self.env[v] = t
        self.symbolic = _symbolic_shapes(ts_inputs, inputs)
        # constants the graph writes in place (through views too): folding writes into a
        # copy of each, so its views see the writes as eager's did (t2n.walk.folding)
        self._written = {n.output().unique() for n in written_constants(ts_graph)}
        for node in ts_graph.nodes():
            self._visit(node)
        outs = [self._get(v) for v in ts_graph.outputs()]
        frozen = any("only works" in reason for uses in self.problems.values()
                     for reason, _ in uses)
        return self._outputs(outs, hint=_FROZEN_SIZES_HINT if frozen else None)

    # ------------------------------------------------------------------ nodes
    def _visit(self, node) -> None:
        kind = node.kind()
        ns, name = kind.split("::", 1)
        inputs = [self._get(v) for v in node.inputs()]
        outs = list(node.outputs())
        where = source_location(node)
        if self._poisoned(inputs, where):
            results = [POISON] * len(outs)
        else:
            results = self._guarded(kind, name, where,
                                    lambda: self._dispatch(node, ns, name, kind, inputs, where))
            if results is POISON:
                results = [POISON] * len(outs)
        for o, r in zip(outs, results):
            self.env[o] = r

    def _dispatch(self, node, ns: str, name: str, kind: str, inputs: list, where) -> list:
        if ns == "prim":
            return self._prim(node, name, inputs)
        if ns == "aten":
            return self._aten(node, name, inputs, where)
        if ns == "quantized":  # torch.ao int8 kernels (t2n/mappings/quantized.py)
            return self._aten(node, kind, inputs, where)
        if registry.lookup(kind) is not None or self._foldable(kind, inputs):
            # a user's mapping (t2n.extensions), or constant inputs: folded with torch
            _check_functional(self._schema(node))
            return self._aten(node, kind, inputs, where)
        raise ConversionError(kind, unmapped_library_op(kind))

    def _prim(self, node, name: str, inputs: list) -> list:
        if name == "Constant":
            out = node.output()
            if out.type().kind() == "NoneType":
                return [None]
            value = out.toIValue()
            if out.unique() in self._written:
                value = value.clone()
                self.folded.note([], [value])
            return [value]
        if name == "GetAttr":
            obj = inputs[0]
            attr = node.s("name")
            value = getattr(obj, attr)
            if isinstance(value, torch.Tensor):
                self._label(value, f"{self._module_path(obj)}{attr}")
            return [value]
        if name in ("ListConstruct",):
            return [list(inputs)]
        if name == "TupleConstruct":
            return [tuple(inputs)]
        if name == "DictConstruct":  # {"out": ..., "aux": ...} (torchvision segmentation)
            return [dict(zip(inputs[0::2], inputs[1::2]))]
        if name in ("ListUnpack", "TupleUnpack"):
            if node.inputsAt(0) in self.list_views:  # a, b = y.split(2): views of y
                src, chain = self.list_views[node.inputsAt(0)]
                for out, link in zip(node.outputs(), chain):
                    self._register_view_of(src, out, link)
            return list(inputs[0])
        if name == "TupleIndex":
            return [inputs[0][inputs[1]]]
        if name in ("NumToTensor",):
            return [inputs[0]]
        if name == "device":
            return [torch.device("cpu")]
        if name == "dtype":
            x = inputs[0]
            return [x.dtype]
        if name in ("min", "max") and all(not isinstance(x, Tensor) for x in inputs):
            xs = list(inputs) if len(inputs) > 1 else list(inputs[0])
            if any(_is_symbolic(x) for x in xs):
                import sympy

                return [(sympy.Min if name == "min" else sympy.Max)(*xs)]
            return [min(xs) if name == "min" else max(xs)]
        if name == "PythonOp":
            # t2n's own capture inlines Functions (autograd_inline); this one was traced
            # before, into a ScriptModule the user passed
            raise _Unsupported(f"custom autograd Function {node.pyname()} in an already "
                               "traced graph: export the nn.Module itself, so that t2n "
                               "traces the Function's forward into aten ops")
        if name in ("If", "Loop"):
            # scripted control flow inside a trace (@torch.jit.script_if_tracing helpers,
            # as in transformers' VitDet): torch.export traces through it
            raise _Unsupported(f"TorchScript control flow (prim::{name}) from a "
                               "torch.jit.script / @torch.jit.script_if_tracing function "
                               "in the model; export it with capture='export' "
                               "(--capture export), which traces through it")
        raise _Unsupported("TorchScript construct not supported by the walker")

    path_prefix = ""  # module path of the user's model inside root (t2n's call adapter)

    def _module_path(self, obj) -> str:
        path = self._paths().get(id(obj))
        return f"{path}." if path else ""

    def _paths(self) -> dict:
        if not hasattr(self, "_path_cache"):
            cache = {}
            if self.root is not None:
                for n, m in self.root.named_modules():
                    cache[id(m)] = _strip_path(n, self.path_prefix)
            self._path_cache = cache
        return self._path_cache

    # ------------------------------------------------------------------ aten
    def _aten(self, node, name: str, inputs: list, where: str | None) -> list:
        answer = self._hooked(name, inputs)
        if answer is not None:
            return answer
        if name in ("Int", "Float", "Bool", "ScalarImplicit", "IntImplicit", "FloatImplicit"):
            return [self._to_python(name, inputs[0])]
        sized = self._size_query(name, inputs)
        if sized is not None:
            return sized
        if name in ("__getitem__",) and isinstance(inputs[0], (list, tuple)):
            return [inputs[0][inputs[1]]]
        if name == "len" and isinstance(inputs[0], (list, tuple)):
            return [len(inputs[0])]
        if self._is_python_arith(name, inputs):
            return [_PY_ARITH[name](*[_py(x) for x in inputs])]
        outs = list(node.outputs())
        return self._op(OpCall(name, self._schema(node), inputs,
                               [Out(_ts_dtype(o), None) for o in outs], len(outs) > 1,
                               where, node))

    def _to_python(self, name: str, x):
        if isinstance(x, Tensor):
            if x.is_const:
                x = x.value
            else:
                raise _Unsupported("a tensor computed from the inputs is read as a Python number "
                                   "(data-dependent value); the trace would freeze it")
        if isinstance(x, torch.Tensor):
            x = x.item()
        if name in ("Float", "FloatImplicit") and isinstance(x, (int, bool)):
            return float(x)
        if name in ("Int", "IntImplicit") and isinstance(x, float):
            return int(x)
        return x

    def _is_python_arith(self, name: str, inputs: list) -> bool:
        if name not in _PY_ARITH:
            return False
        has_sym = any(_is_symbolic(x) for x in inputs)
        return has_sym and all(_is_symbolic(x) or _is_number(x) for x in inputs)

    def _schema(self, node):
        text = node.schema()
        s = self._schemas.get(text)
        if s is None:
            if text == "(no schema)":
                raise _Unsupported("node without an operator schema")
            s = torch._C.parse_schema(text)
            self._schemas[text] = s
        return s

    # ------------------------------------------------------------------ the core's hooks
    def _torch_values(self, call: OpCall) -> list:
        """Numbers the trace kept as numbers in Tensor arguments, as the tensors it had."""
        return [number_as_tensor(arg.type, value, ts_value) for arg, value, ts_value
                in zip(call.schema.arguments, call.values, call.node.inputs())]

    def _complete(self, call: OpCall, fn) -> None:
        """The traced sizes (with dynamic axes, the symbolic ones PyTorch's shape functions
        give), strides, and a number's dtype as traced (float32/int64 if untyped)."""
        node = call.node
        shapes = [_ts_sizes(o) for o in node.outputs()]
        if self.symbolic is not None and _has_symbols(call.values) \
                and not getattr(fn, "t2n_own_shapes", False):
            # the trace's sizes are those of the example: ask PyTorch's shape functions
            sym = self.symbolic.out_shapes(call.schema, call.values, call.op)
            if sym is not None and len(sym) == len(shapes):
                shapes = [s if s is not None else t for s, t in zip(sym, shapes)]
            elif sym is None and call.op not in self.symbolic.unknown:
                self.symbolic.unknown.add(call.op)
                self.g.session.warnings.append(f"{call.op}: PyTorch has no symbolic shape "
                                       "function for it; t2n's own shape is used (traced "
                                       "sizes for the axes it leaves static)")
        for out, sizes in zip(call.outs, shapes):
            out.sizes = sizes
        ts_inputs = list(node.inputs())
        call.in_strides = [_ts_strides(v) for v in ts_inputs]
        call.number_dtypes = [_ts_dtype(v) or (torch.float32 if isinstance(x, float)
                                               else torch.int64)
                              for v, x in zip(ts_inputs, call.values)]

    def _argument(self, arg, value, user_mapping: bool):
        """A ScalarType code as a torch dtype, for a user's mapping (as on the export path)
        and where the schema says ScalarType; t2n's own read the traced code (quantized
        dtypes have no torch dtype)."""
        tname = str(arg.real_type if user_mapping else arg.type)
        if tname.replace("Optional[", "").replace("]", "") == "ScalarType" \
                and isinstance(value, int) and not isinstance(value, bool):
            return self.g.computed(scalar_type(value))
        return value

# after a refusal because a size fits the example only: the tracer records sizes the model
# computes in Python (math.ceil(h / p), sizes kept on modules) as numbers
_FROZEN_SIZES_HINT = ("hint: where the model computes sizes in Python from x.shape, "
                      "capture='export' (--capture export) records that arithmetic with the "
                      "dynamic axes; the trace keeps the example's numbers")


def _check_functional(schema) -> None:
    """A user's op that writes into an argument (``mutates_args``) is refused: its mapping
    returns values, and the write would be lost."""
    written = [a.name for a in schema.arguments
               if a.alias_info is not None and a.alias_info.is_write]
    if written:
        raise _Unsupported(f"the op writes into its argument(s) {', '.join(written)} "
                           "(mutates_args); mapped ops must be functional")


def _strip_path(path: str, prefix: str) -> str:
    """A module path relative to the user's model (weights keep their state_dict names)."""
    if not prefix:
        return path
    if path == prefix:
        return ""
    return path.removeprefix(prefix + ".")
