"""Walk an inlined TorchScript graph and build the NNEF graph.

For every node, in order:

* ``prim::`` plumbing (constants, attributes, lists, tuples) is resolved to Python values;
* an aten node whose inputs are all known constants is evaluated with torch itself (constant
  folding: weight preprocessing, pruning masks, static shape arithmetic);
* any other aten node is dispatched to the mapping registered for its name, with resolved
  arguments;
* in-place ops (``add_``, ``index_put_``, ``copy_`` ...) run the functional mapping and the
  result is written back into the mutated tensor and, when that tensor is a view (``y[:, 1:3]``),
  into its base through the chain of view ops, so the exported graph computes the same final
  values as PyTorch.

TorchScript value reading lives in :mod:`t2n.torchscript`, view tracking and the inverse of
each view op in :mod:`t2n.views`.

Problems do not stop the walk: each unsupported op or case is recorded with its source
location and the values it would have produced are poisoned, so one run reports all of them.
"""

from __future__ import annotations

import torch

from . import bf16_values, dtypes, registry
from .folding import FoldedStorage, number_as_tensor
from .builder import Graph, NodeContext, Tensor, Unavailable
from .errors import ConversionError, UnsupportedOperatorsError
from .torchscript import (_flat, _has_symbols, _is_number, _is_symbolic, _py, _symbolic_shapes,
                          _ts_dtype, _ts_sizes, _ts_strides, _Unsupported, scalar_type,
                          source_location)
from .torchscript import _T2N_DIR, _TORCH_DIR  # noqa: F401  (kept importable from here)
from .views import LIST_VIEW_OPS, VIEW_OPS, _list_view_chain, _scatter_view, _View
from .stopwatch import timed


# Ops that must not be folded even when their inputs are constants.
_NON_DETERMINISTIC = {"rand", "randn", "randint", "rand_like", "randn_like", "randint_like",
                      "bernoulli", "bernoulli_", "normal", "normal_", "uniform_", "multinomial",
                      "randperm", "dropout", "feature_dropout", "alpha_dropout", "empty",
                      "empty_like", "new_empty", "empty_strided"}
# Symbolic/int arithmetic done in Python (shape computations on traced sizes).
_PY_ARITH = {
    "add": lambda a, b, alpha=1: a + b * alpha, "sub": lambda a, b, alpha=1: a - b * alpha,
    "rsub": lambda a, b, alpha=1: b - a * alpha, "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b, "floor_divide": lambda a, b: a // b,
    "remainder": lambda a, b: _remainder(a, b), "neg": lambda a: -a,
}


def _remainder(a, b):
    """``a % b``; of a symbolic size, ``a - b*floor(a/b)``: sympy's ``Mod`` hides from its
    simplifier that ``(S + (4 - S % 4) % 4) / 4`` (a length padded to whole chunks) is whole."""
    if _is_symbolic(a) or _is_symbolic(b):
        return a - b * (a // b)
    return a % b


class _Poison:
    """The value of a node that could not be converted (its consumers are skipped quietly)."""


POISON = _Poison()


class Walker:
    def __init__(self, graph: Graph, root, labels: dict[int, str]):
        self.g = graph
        self.root = root
        self.labels = labels  # id(tensor) -> state_dict name, for weights
        self.env: dict = {}
        self.views: dict = {}  # value -> _View
        self.list_views: dict = {}  # list value of split/chunk/unbind -> (source, [links])
        self.version: dict = {}  # base value -> mutation count
        self.problems: dict[str, list] = {}
        self._schemas: dict[str, object] = {}
        self._const_handles: dict[int, Tensor] = {}
        # the torch tensors behind the id() keys of labels and _const_handles, kept alive:
        # a freed temporary's id is reused by the next tensor allocated, which would then
        # get the freed one's graph constant (GraniteMoeHybrid's conv weight read its
        # state cache's [2, 80, 4]) or its label
        self._keyed: dict[int, torch.Tensor] = {}
        self.folded = FoldedStorage()

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
        for node in ts_graph.nodes():
            self._visit(node)
        outs = []
        for v in ts_graph.outputs():
            outs.extend(self._flatten_output(self._get(v)))
        if self.problems:
            frozen = any("only works" in reason for uses in self.problems.values()
                         for reason, _ in uses)
            raise UnsupportedOperatorsError(self.problems, hint=_FROZEN_SIZES_HINT
                                            if frozen else None)
        return outs

    def _flatten_output(self, value) -> list:
        if isinstance(value, (list, tuple)):
            out = []
            for v in value:
                out.extend(self._flatten_output(v))
            return out
        if isinstance(value, dict):
            out = []
            for k in value:
                out.extend(self._flatten_output(value[k]))
            return out
        if isinstance(value, (Tensor, torch.Tensor)) or value is POISON:
            return [value]
        if isinstance(value, Unavailable):  # a model output the mapping did not compute
            self._record(value.op, value.reason, None)
            return [POISON]
        raise ConversionError("output", f"the model returns a {type(value).__name__}, not a tensor;"
                              " t2n exports tensor outputs only")

    # ------------------------------------------------------------------ values
    def _get(self, v):
        value = self.env[v]
        view = self.views.get(v)
        if view is not None and self.version.get(view.base, 0) != view.version:
            value = self._rederive(v, view)
        return value

    def _rederive(self, v, view: _View):
        value = self._get(view.base)
        for name, args in view.chain:
            value = registry.lookup(name)(self.g, value, *args)
        self.env[v] = value
        view.version = self.version.get(view.base, 0)
        return value

    def _record(self, problem_op: str, reason: str, where: str | None) -> None:
        self.problems.setdefault(problem_op, []).append((reason, where))

    # ------------------------------------------------------------------ nodes
    def _visit(self, node) -> None:
        kind = node.kind()
        ns, name = kind.split("::", 1)
        inputs = [self._get(v) for v in node.inputs()]
        outs = list(node.outputs())
        missing = next((x for x in _flat(inputs) if isinstance(x, Unavailable)), None)
        if missing is not None:  # an output its mapping did not compute is used here
            self._record(missing.op, missing.reason, source_location(node))
            inputs = [POISON]
        if any(x is POISON for x in _flat(inputs)):
            for o in outs:
                self.env[o] = POISON
            return
        where = source_location(node)
        try:
            if ns == "prim":
                results = self._prim(node, name, inputs)
            elif ns == "aten":
                results = self._aten(node, name, inputs, where)
            elif ns == "quantized":  # torch.ao int8 kernels (op_mappings/quantized.py)
                results = self._aten(node, kind, inputs, where)
            elif registry.lookup(kind) is not None or self._foldable(kind, inputs):
                # a user's mapping (t2n.extensions), or constant inputs: folded with torch
                _check_functional(self._schema(node))
                results = self._aten(node, kind, inputs, where)
            else:
                raise ConversionError(kind, unmapped_library_op(kind))
        except ConversionError as e:
            self._record(kind if not e.op or e.op in ("?", name) else e.op, e.message, where)
            results = [POISON] * len(outs)
        except _Unsupported as e:
            self._record(kind, str(e), where)
            results = [POISON] * len(outs)
        for o, r in zip(outs, results):
            self.env[o] = r

    def _prim(self, node, name: str, inputs: list) -> list:
        if name == "Constant":
            out = node.output()
            if out.type().kind() == "NoneType":
                return [None]
            return [out.toIValue()]
        if name == "GetAttr":
            obj = inputs[0]
            attr = node.s("name")
            value = getattr(obj, attr)
            if isinstance(value, torch.Tensor):
                prefix = self._module_path(obj)
                self.labels.setdefault(id(value), f"{prefix}{attr}")
                self._keyed.setdefault(id(value), value)
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
        outs = list(node.outputs())
        for x in inputs:  # a mapping's non-tensor value (a packed sequence) answers itself
            hook = getattr(x, "t2n_aten", None)
            if hook is not None:
                answer = hook(self.g, name, inputs)
                if answer is not None:
                    return answer
                break
        if name in ("Int", "Float", "Bool", "ScalarImplicit", "IntImplicit", "FloatImplicit"):
            return [self._to_python(name, inputs[0])]
        if name in ("size", "sym_size") and isinstance(inputs[0], Tensor):
            shape = inputs[0].torch_shape
            if len(inputs) == 1:
                return [list(shape)]
            return [shape[inputs[1] % max(len(shape), 1)]]
        if name == "numel" and isinstance(inputs[0], Tensor):
            n = 1
            for d in inputs[0].torch_shape:
                n = n * d
            return [n]
        if name in ("dim",) and isinstance(inputs[0], Tensor):
            return [len(inputs[0].torch_shape)]
        if name in ("__getitem__",) and isinstance(inputs[0], (list, tuple)):
            return [inputs[0][inputs[1]]]
        if name == "len" and isinstance(inputs[0], (list, tuple)):
            return [len(inputs[0])]
        if self._is_python_arith(name, inputs):
            return [_PY_ARITH[name](*[_py(x) for x in inputs])]
        if self._foldable(name, inputs):
            folded = self._fold(node, name, inputs)
            if name in ("detach", "alias"):  # weight.detach() then an in-place op on it
                # (embedding max_norm renorms the table): the write must reach the weight
                self._register_view_of(node.inputsAt(0), node.output(), (name, []))
            elif name in VIEW_OPS and isinstance(inputs[0], torch.Tensor):
                # a view of a folded tensor (z = zeros(...); z[:, 0] = x): a write of a
                # run-time value into it must reach z (RWKV's per-layer states)
                self._register_view_of(node.inputsAt(0), node.output(), (name, inputs[1:]))
            return folded

        fn = registry.lookup(name)
        if any(isinstance(x, Tensor) and x.dtype in dtypes.QUANTIZED for x in _flat(inputs)):
            fn = registry.lookup_quantized(name) or fn
        if registry.touches_complex(inputs, [_ts_dtype(o) for o in outs]):
            fn = registry.lookup_complex(name)
            if fn is None:
                raise _Unsupported("no lowering of this op for complex tensors")
        if fn is None:
            raise _Unsupported("no mapping for this aten op")
        schema = self._schema(node)
        shapes = [_ts_sizes(o) for o in outs]
        op = name if "::" in name else f"aten::{name}"  # quantized::, a user's mylib::
        if self.symbolic is not None and _has_symbols(inputs) \
                and not getattr(fn, "t2n_own_shapes", False):
            # the trace's sizes are those of the example: ask PyTorch's shape functions
            sym = self.symbolic.out_shapes(schema, inputs, op)
            if sym is not None and len(sym) == len(shapes):
                shapes = [s if s is not None else t for s, t in zip(sym, shapes)]
            elif sym is None and op not in self.symbolic.unknown:
                self.symbolic.unknown.add(op)
                self.g.warnings.append(f"{op}: PyTorch has no symbolic shape "
                                       "function for it; t2n's own shape is used (traced "
                                       "sizes for the axes it leaves static)")
        args = self._resolve_args(schema, node, inputs,
                                  getattr(fn, "t2n_user_mapping", False))
        self.g.node = NodeContext(op=op,
                                  out_dtypes=[self.g.computed(_ts_dtype(o)) for o in outs],
                                  torch_out_dtypes=[_ts_dtype(o) for o in outs],
                                  out_shapes=shapes, where=where,
                                  in_strides=[_ts_strides(v) for v in node.inputs()])
        try:
            if registry.is_inplace(name):
                return self._inplace(node, name, fn, args)
            result = bf16_values.call_node(self.g, name, fn, args)
        finally:
            self.g.node = None
        results = list(result) if isinstance(result, (tuple, list)) and len(outs) > 1 \
            else [result]
        results = [self._conform(name, o, r, s) for o, r, s in zip(outs, results, shapes)]
        if name in VIEW_OPS and isinstance(args[0], Tensor):
            self._register_view(node, name, args)
        if name in LIST_VIEW_OPS and isinstance(args[0], Tensor) and \
                isinstance(results[0], list):
            self.list_views[node.output()] = (node.inputsAt(0),
                                              _list_view_chain(name, args, results[0]))
        return results

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

    def _foldable(self, name: str, inputs: list) -> bool:
        if name in _NON_DETERMINISTIC:
            return False
        for x in _flat(inputs):
            if isinstance(x, Tensor) or _is_symbolic(x) or hasattr(x, "t2n_aten"):
                return False
        return True

    def _fold(self, node, name: str, inputs: list) -> list:
        schema = self._schema(node)
        args, kwargs = [], {}
        inplace = registry.is_inplace(name)
        for k, (arg, value, ts_value) in enumerate(zip(schema.arguments, inputs,
                                                       node.inputs())):
            value = number_as_tensor(arg.type, value, ts_value)
            if isinstance(value, torch.Tensor) and inplace:
                if k == 0 and self.folded.writable(value):
                    # written in place, as in eager: views of it and its base see the write
                    self.folded.before_write(self.g, value, self._const_handles)
                else:
                    value = value.clone()  # never mutate the user's model
            if arg.kwarg_only:
                kwargs[arg.name] = value
            else:
                args.append(value)
        namespace, op_name = schema.name.split("::", 1)
        op = getattr(getattr(torch.ops, namespace), op_name)
        if schema.overload_name:
            op = getattr(op, schema.overload_name)
        with torch.no_grad():
            result = op(*args, **kwargs)
        # Keep provenance of folded weights (pruning: weight_orig * weight_mask).
        label = _pruned_label(name, [self.labels[id(x)] for x in _flat(inputs)
                                     if isinstance(x, torch.Tensor) and id(x) in self.labels])
        results = list(result) if isinstance(result, (tuple, list)) and \
            len(list(node.outputs())) > 1 else [result]
        self.folded.note(args, results)
        for r in results:
            if isinstance(r, torch.Tensor) and label is not None and id(r) not in self.labels:
                self.labels[id(r)] = label
                self._keyed[id(r)] = r
        return results

    def _schema(self, node):
        text = node.schema()
        s = self._schemas.get(text)
        if s is None:
            if text == "(no schema)":
                raise _Unsupported("node without an operator schema")
            s = torch._C.parse_schema(text)
            self._schemas[text] = s
        return s

    def _resolve_args(self, schema, node, inputs: list, dtypes_as_dtypes=False) -> list:
        """Constants in tensor positions become handles (weights as labelled variables).
        A user's mapping (``dtypes_as_dtypes``) gets a ScalarType as a torch.dtype, as on
        the export path; t2n's own read the traced code (quantized dtypes have no dtype)."""
        args = []
        for arg, value, ts_value in zip(schema.arguments, inputs, node.inputs()):
            tname = str(arg.real_type if dtypes_as_dtypes else arg.type)
            tname = tname.replace("Optional[", "").replace("]", "")
            is_list = tname.startswith("List[")
            tname = tname.replace("List[", "")
            if tname == "ScalarType" and isinstance(value, int) and not isinstance(value, bool):
                value = self.g.computed(scalar_type(value))
            elif tname == "Tensor" and not is_list:
                value = self._tensor_arg(value, ts_value)
            elif tname == "Tensor" and is_list and isinstance(value, list):
                value = [self._tensor_arg(x, None) if x is not None else None for x in value]
            args.append(value)
        return args

    def _tensor_arg(self, value, ts_value):
        if isinstance(value, Tensor) or value is None:
            return value
        if isinstance(value, torch.Tensor):
            key = id(value)
            if key in self._const_handles and self._keyed.get(key) is value:
                return self._const_handles[key]
            label = self.labels.get(key)
            h = self.g.variable(value, label) if label is not None else self.g.const(value)
            self._const_handles[key] = h
            self._keyed[key] = value
            return h
        if _is_number(value) and ts_value is not None:
            dtype = self.g.computed(_ts_dtype(ts_value)) or (torch.float32 if isinstance(value, float)
                                            else torch.int64)
            return self.g.scalar(value, dtype)
        if _is_symbolic(value):
            # a size of a dynamic axis used in tensor math: computed by tract at run time
            dtype = self.g.computed(_ts_dtype(ts_value)) if ts_value is not None else None
            return self.g.scalar(value, dtype or torch.int64)
        return value

    def _conform(self, name: str, ts_out, r, sizes=None):
        """Give a mapping's result the dtype PyTorch traced for it, and its shape: the traced
        one, or with dynamic axes the symbolic one PyTorch's shape functions computed."""
        if not isinstance(r, Tensor):
            return r
        return conform(self.g, name if "::" in name else f"aten::{name}", r,
                       self.g.computed(_ts_dtype(ts_out)), sizes)

    # ------------------------------------------------------------------ views and in-place
    def _register_view(self, node, name: str, args: list) -> None:
        self._register_view_of(node.inputsAt(0), node.output(), (name, args[1:]))

    def _register_view_of(self, src, out, link) -> None:
        parent = self.views.get(src)
        if parent is not None:
            self.views[out] = _View(parent.base, parent.chain + [link],
                                    self.version.get(parent.base, 0))
        else:
            self.views[out] = _View(src, [link], self.version.get(src, 0))

    def _inplace(self, node, name: str, fn, args: list) -> list:
        target_v = node.inputsAt(0)
        target = args[0]
        if not isinstance(target, Tensor):
            raise _Unsupported("in-place op on a non-tensor")
        if target.complex:
            raise _Unsupported("in-place writes into complex tensors are not supported")
        if name[:-1] in VIEW_OPS:  # t_, transpose_, unsqueeze_: same data, new layout
            result = fn(self.g, *args)
            self._register_view(node, name[:-1], args)
            return [result]
        result = bf16_values.call_node(self.g, name, fn, args)
        result = self.g.cast(result, target.dtype)
        if tuple(result.shape) != tuple(target.shape):
            result = self.g.broadcast_to(result, target.shape)
        view = self.views.get(target_v)
        if view is not None:
            base = self._tensor_arg(self._get(view.base), None)  # a folded base: a constant
            if base.complex:
                raise _Unsupported("in-place writes into views of complex tensors are not "
                                   "supported")
            new_base = self._write_back(base, view.chain, result)
            self.env[view.base] = new_base
            self.version[view.base] = self.version.get(view.base, 0) + 1
            self.env[target_v] = result
            view.version = self.version[view.base]
            self.views[node.output()] = _View(view.base, list(view.chain), view.version)
        else:
            self.env[target_v] = result
            self.version[target_v] = self.version.get(target_v, 0) + 1
            self.views[node.output()] = _View(target_v, [], self.version[target_v])
        return [result]

    def _write_back(self, base: Tensor, chain: list, value: Tensor) -> Tensor:
        if not chain:
            return value
        (name, args), rest = chain[0], chain[1:]
        node, self.g.node = self.g.node, None  # the view ops are re-run out of their node:
        try:  # the traced shapes of the in-place node are not theirs (view(2, 6)[0] = v)
            inner = registry.lookup(name)(self.g, base, *args)
        finally:
            self.g.node = node
        new_inner = self._write_back(inner, rest, value)
        return _scatter_view(self.g, name, base, new_inner, args)


# after a refusal because a size fits the example only: the tracer records sizes the model
# computes in Python (math.ceil(h / p), sizes kept on modules) as numbers
_FROZEN_SIZES_HINT = ("hint: where the model computes sizes in Python from x.shape, "
                      "capture='export' (--capture export) records that arithmetic with the "
                      "dynamic axes; the trace keeps the example's numbers")


def unmapped_library_op(op: str) -> str:
    """The refusal of an op of another library (a torch.library custom op) without a
    mapping, shared by both captures: what to do about it."""
    return (f"no mapping for this operator of the {op.split('::')[0]!r} library; register "
            f"one with @t2n.mapping({op!r}) (docs/extensions.md)")


def _check_functional(schema) -> None:
    """A user's op that writes into an argument (``mutates_args``) is refused: its mapping
    returns values, and the write would be lost."""
    written = [a.name for a in schema.arguments
               if a.alias_info is not None and a.alias_info.is_write]
    if written:
        raise _Unsupported(f"the op writes into its argument(s) {', '.join(written)} "
                           "(mutates_args); mapped ops must be functional")


def conform(g: Graph, op: str, r: Tensor, dtype, sizes) -> Tensor:
    """A mapping's result with the dtype (``None``: as it is) and sizes PyTorch recorded for
    the node, shared by both captures: symbolic sizes replace the mapping's where PyTorch's
    shape functions named a dynamic axis; a rank that differs is a bug in the mapping."""
    if dtype is not None and dtype.is_complex:
        if not r.complex or r.dtype != dtypes.complex_part(dtype):
            raise ConversionError(op, f"internal: mapping produced {r!r} where PyTorch has a "
                                  f"{dtype} tensor")
        return _conform_shape(op, r, None if sizes is None else list(sizes) + [2])
    if r.complex:
        raise ConversionError(op, f"internal: mapping produced {r!r} where PyTorch has a "
                              f"{dtype} tensor")
    if dtype is not None and r.dtype != dtype:
        r = g.cast(r, dtype)
    return _conform_shape(op, r, sizes)


def _conform_shape(op: str, r: Tensor, sizes) -> Tensor:
    if sizes is not None:
        if len(sizes) != r.rank:
            raise ConversionError(op, f"internal: mapping produced rank {r.rank} where PyTorch "
                                  f"has rank {len(sizes)}")
        if r.literal is None and not r.is_const:
            r.shape = tuple(s if isinstance(d, int) or _is_symbolic(s) else d
                            for s, d in zip(sizes, r.shape))
    return r


def _pruned_label(name: str, labels: list[str]) -> str | None:
    """The label of a folded tensor: its first labelled input's, except that the product
    ``<p>.<w>_orig * <p>.<w>_mask`` that a torch.nn.utils.prune hook computes is the weight
    ``<p>.<w>`` itself (the archive stores that one tensor under its state_dict name)."""
    if name == "mul" and len(labels) == 2:
        a, b = sorted(labels, key=lambda s: s.endswith("_mask"))
        if a.endswith("_orig") and b.endswith("_mask") and a[:-5] == b[:-5]:
            return a[:-5]
    return labels[0] if labels else None


def _strip_path(path: str, prefix: str) -> str:
    """A module path relative to the user's model (weights keep their state_dict names)."""
    if not prefix:
        return path
    if path == prefix:
        return ""
    return path.removeprefix(prefix + ".")
