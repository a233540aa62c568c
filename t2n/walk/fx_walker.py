"""Read a ``torch.export`` program (an FX graph of ATen ops) for the walker core
(:mod:`t2n.walk.core`), which folds, dispatches and conforms every op as it does for the
TorchScript reader (:mod:`t2n.walk.walker`). What differs is only how nodes are read:

* placeholders are the lifted parameters, buffers and constants (written as labelled weights,
  named by their state_dict key) and the user's inputs;
* sizes are SymInts of export's ShapeEnv; each dynamic axis's SymInt is mapped to the t2n
  symbol of that axis, so shapes, ``sym_size`` and size arithmetic arrive as t2n's sympy
  expressions;
* the graph is functionalised: there are no in-place ops or views to write back through;
* source lines come from each node's recorded stack trace.
"""

from __future__ import annotations

import math
import operator
import os
import re

import torch

from t2n import dtypes
from t2n.walk.builder import DATA_DEPENDENT_PREFIX, Graph, Tensor
from t2n.errors import ConversionError
from t2n.capture.torch_export import PREFIX
from t2n.stopwatch import timed
from t2n.walk.core import POISON, OpCall, Out, WalkerCore, _flat
from t2n.walk.torchscript import (_T2N_DIR, _TORCH_DIR, _Unsupported, _is_number, _is_symbolic,
                                  size_remainder)

# Python-level functions export records for size arithmetic
_PY_FUNCS = {
    operator.add: operator.add, operator.sub: operator.sub, operator.mul: operator.mul,
    operator.floordiv: operator.floordiv, operator.mod: size_remainder,
    operator.truediv: operator.truediv, operator.neg: operator.neg, operator.pow: operator.pow,
    operator.eq: operator.eq, operator.ne: operator.ne, operator.lt: operator.lt,
    operator.le: operator.le, operator.gt: operator.gt, operator.ge: operator.ge,
    math.ceil: math.ceil, math.floor: math.floor, math.sqrt: math.sqrt,
}
# runtime checks export inserts: nothing to compute
_IGNORED = {"_assert_scalar", "_assert_tensor_metadata", "sym_constrain_range_for_size",
            "sym_constrain_range", "_assert_async", "_functional_assert_async",
            "_functional_sym_constrain_range", "_functional_sym_constrain_range_for_size"}
# namespaces read as aten: t2n's own leaves of a capture (t2n/capture/leaf_ops.py)
# have the schema of the aten op of their name
_ATEN_LIKE = ("aten", "t2n")
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def fx_source_location(node) -> str | None:
    """``file.py:LINE`` of the innermost frame of the user's code that emitted ``node``."""
    trace = node.meta.get("stack_trace") or ""
    found = None
    for path, line in _FRAME.findall(trace):
        if path.startswith(_TORCH_DIR) or path.startswith(_T2N_DIR + os.sep + "t2n") \
                or "/torch/" in path:
            continue
        found = f"{os.path.basename(path)}:{line}"
    return found


class FxWalker(WalkerCore):
    """The reader of ``torch.export`` programs: visits the FX nodes, keeps their values by
    node, and maps export's SymInts to the t2n symbols of the dynamic axes."""

    def __init__(self, graph: Graph, program, symbols: dict[int, dict[int, object]]):
        super().__init__(graph)
        self.ep = program
        self.symbols = symbols  # user input index -> {axis: t2n sympy symbol}
        self.env: dict = {}
        self._sym_map: dict = {}
        self.output_names: list[str] | None = None  # ModelOutput fields, cache tensors ...
        self._detached: dict = {}  # id of a lifted tensor -> its one detached value
        self._names: dict | None = None

    # ------------------------------------------------------------------ entry point
    @timed("walk")
    def run(self, inputs: list[Tensor]) -> list:
        sig = self.ep.graph_signature
        kinds = {s.arg.name: s for s in sig.input_specs}
        user = iter(enumerate(inputs))
        for node in self.ep.graph.nodes:
            if node.op == "placeholder":
                self.env[node] = self._placeholder(node, kinds.get(node.name), user)
            elif node.op == "output":
                return self._user_outputs(node)
            else:
                self._visit(node)
        raise ConversionError("output", "the exported program has no output")

    def _placeholder(self, node, spec, user):
        from torch.export.graph_signature import InputKind

        if spec is None or spec.kind == InputKind.USER_INPUT:
            i, t = next(user)
            fake = node.meta.get("val")
            for axis, sym in self.symbols.get(i, {}).items():
                d = fake.shape[axis]
                if isinstance(d, torch.SymInt):
                    self._sym_map[d.node.expr] = sym
            return t
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            value = self.ep.state_dict.get(spec.target)
            if value is None:
                value = self.ep.constants[spec.target]
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            value = self.ep.constants[spec.target]
        else:
            raise ConversionError("placeholder", f"{spec.kind.name} inputs are not supported")
        original, value = value, self._detached.setdefault(id(value), value.detach())
        if spec.kind == InputKind.CONSTANT_TENSOR and node.users and all(
                u.target is torch.ops.aten.lift_fresh_copy.default for u in node.users):
            return value  # a torch.tensor(...) of forward: a constant, as the trace's
        # the user's own state_dict name; of a tensor held under several (an embedding table
        # tied to the head), the first, as the trace names it: export lifts each name
        label = self._first_names().get(id(original), spec.target).removeprefix(PREFIX)
        self._label(value, label)
        return value

    def _first_names(self) -> dict:
        """id of each state_dict tensor -> its first name in state_dict order."""
        if self._names is None:
            self._names = {}
            for name, t in list(self.ep.state_dict.items()) + list(self.ep.constants.items()):
                self._names.setdefault(id(t), name)
        return self._names

    def _user_outputs(self, node) -> list:
        from torch.export.graph_signature import OutputKind

        self.output_names = getattr(self.ep, "t2n_output_names", None)
        specs = self.ep.graph_signature.output_specs
        results = [a for a, spec in zip(_as_tuple(node.args[0]), specs)
                   if spec.kind == OutputKind.USER_OUTPUT]  # not buffer updates
        return self._outputs([self._value(a) for a in results])

    # ------------------------------------------------------------------ values
    def _value(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self._value(x) for x in a)
        if isinstance(a, dict):
            return {k: self._value(v) for k, v in a.items()}
        return a

    def _sym(self, d):
        """A size of export's ShapeEnv as a t2n dim: an int or an expression of t2n symbols.
        A size the data decides (export's unbacked ``u0``: a boolean mask's count, an
        ``.item()``) becomes a data-dependent t2n symbol (:func:`_unbacked_renamed`), as the
        trace path names it: a mapping keeps it out of shape attributes, and the writer
        refuses it there by name rather than write a symbol tract would leave unbound."""
        if isinstance(d, torch.SymInt):
            expr = d.node.expr
            if expr.is_number:
                return int(expr)
            expr = _to_t2n(_unbacked_renamed(expr.xreplace(self._sym_map)))
            return int(expr) if expr.is_number else expr
        return int(d)

    # ------------------------------------------------------------------ nodes
    def _visit(self, node) -> None:
        if node.op == "get_attr":
            self.env[node] = getattr(self.ep.graph_module, node.target)
            return
        where = fx_source_location(node)
        if node.op != "call_function":
            self._record(node.op, "FX node kind not supported", where)
            self.env[node] = POISON
            return
        target = node.target
        args = self._value(list(node.args))
        kwargs = self._value(dict(node.kwargs))
        if target is operator.getitem:  # one of a node's results: only that one is read
            self.env[node] = POISON if args[0] is POISON else args[0][args[1]]
            return
        if self._poisoned(list(args) + list(kwargs.values()), where):
            self.env[node] = POISON
            return
        op = _op_name(target)
        short = op.split("::", 1)[1] if isinstance(target, torch._ops.OpOverload) \
            and target.namespace in _ATEN_LIKE else op
        self.env[node] = self._guarded(op, short, where,
                                       lambda: self._call(node, target, args, kwargs, where))

    def _call(self, node, target, args: list, kwargs: dict, where):
        if target in _PY_FUNCS or getattr(target, "__module__", "") == "torch" \
                and getattr(target, "__name__", "").startswith("sym_"):
            return _py_call(target, args)
        if isinstance(target, torch._ops.OpOverload):
            return self._aten(node, target, args, kwargs, where)
        if target is torch.ops.higher_order.cond:
            return self._cond(node, *args)
        if getattr(target, "__name__", "").startswith("auto_functionalized"):
            # export's wrapper of an op that writes into its arguments (mutates_args)
            raise ConversionError(_op_name(args[0]), "the op writes into its arguments "
                                  "(mutates_args); mapped ops must be functional")
        raise _Unsupported(f"{getattr(target, '__name__', target)} is not an aten op")

    def _aten(self, node, target, args: list, kwargs: dict, where):
        schema = target._schema
        # aten ops by their name, ops of other libraries (torch_nn::...) by their qualified
        # name; t2n's capture leaves (t2n::lstm ...) are the aten op of their name
        name = schema.name.split("::", 1)[1] if target.namespace in _ATEN_LIKE \
            else schema.name
        if name in _IGNORED:
            return None
        values = _schema_args(schema, args, kwargs)
        answer = self._hooked(name, values)
        if answer is None:
            answer = self._size_query(name, args)
        if answer is None:
            vals = _as_tuple(node.meta.get("val"))
            answer = self._op(OpCall(name, schema, values,
                                     [Out(v.dtype, None) if isinstance(v, torch.Tensor)
                                      else None for v in vals],
                                     len(vals) > 1, where, node, target))
        return answer[0] if len(answer) == 1 else tuple(answer)

    def _cond(self, node, pred, true_gm, false_gm, operands):
        """``torch.cond``: a constant predicate picks its branch at export; a runtime one
        computes both branches and selects each output element-wise (tract's ``select``)."""
        operands = list(operands)
        if isinstance(pred, (bool, int)) or isinstance(pred, torch.Tensor):
            return self._call_graph(true_gm if bool(pred) else false_gm, operands)
        if not isinstance(pred, Tensor) or pred.rank != 0 and any(d != 1 for d in pred.shape):
            raise _Unsupported("torch.cond with a predicate that is not a scalar")
        a = self._call_graph(true_gm, operands)
        b = self._call_graph(false_gm, operands)
        cond = pred if pred.dtype == torch.bool else self.g.cast(pred, torch.bool)
        out = []
        for x, y in zip(a, b):
            x = self._tensor_arg(x, _python_dtype(x))
            y = self._tensor_arg(y, _python_dtype(y))
            if tuple(x.shape) != tuple(y.shape) or x.dtype != y.dtype:
                raise _Unsupported("torch.cond branches with outputs of different shapes or "
                                   "dtypes cannot be selected at run time")
            out.append(self.g.op("select", self.g.unsqueeze_to_rank(cond, x.rank), x, y,
                                 out_dtype=x.dtype, out_shape=x.shape))
        return tuple(out)

    def _call_graph(self, gm, operands: list) -> tuple:
        """Walk a branch graph of a higher-order op with ``operands`` as its inputs."""
        saved = self.env
        self.env = dict(saved)
        try:
            args = iter(operands)
            for n in gm.graph.nodes:
                if n.op == "placeholder":
                    self.env[n] = next(args)
                elif n.op == "output":
                    return tuple(self._value(a) for a in _as_tuple(n.args[0]))
                elif n.op == "get_attr":
                    self.env[n] = getattr(gm, n.target)
                else:
                    self._visit(n)
        finally:
            self.env = saved
        return ()

    # ------------------------------------------------------------------ the core's hooks
    def _complete(self, call: OpCall, fn) -> None:
        """Sizes as t2n dims, strides where export knows them, and a number in a Tensor
        argument as a scalar of its Python type."""
        for out, v in zip(call.outs, _as_tuple(call.node.meta.get("val"))):
            if out is not None:
                out.sizes = [self._sym(d) for d in v.shape]
        call.in_strides = [_strides(a) for a in _schema_nodes(call.schema, call.node)]
        call.number_dtypes = [_python_dtype(v) for v in call.values]
        _quantized_outs(call)

    def _after_mapping(self, call, results: list) -> None:
        """A size export leaves to the data (an unbacked ``u0``) that the mapping knows as
        a number (a constant mask's count) is that number in every later shape: the
        conformed result kept it (:func:`t2n.walk.core.conform`)."""
        import sympy
        from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

        for r, v in zip(results, _as_tuple(call.node.meta.get("val"))):
            if not isinstance(r, (Tensor, torch.Tensor)) or not isinstance(v, torch.Tensor) \
                    or len(r.shape) != v.dim():
                continue
            for d, s in zip(r.shape, v.shape):
                if isinstance(d, int) and isinstance(s, torch.SymInt) and s.node.expr.is_symbol \
                        and free_unbacked_symbols(s.node.expr):
                    self._sym_map.setdefault(s.node.expr, sympy.Integer(d))

    _after_fold = _after_mapping  # an op folded on constants: its sizes are numbers

    def _argument(self, arg, value, user_mapping: bool):
        return self.g.computed(value) if isinstance(value, torch.dtype) else value


# ---------------------------------------------------------------------------- helpers
def _quantized_outs(call) -> None:
    """torch.export's fake tensors have no quantized dtype: it records
    ``quantize_per_tensor``'s result, and that of every op reading a quantized tensor, as
    float32. Conforming to that would cast the integers to float and drop their scale and
    zero point (the ``dequantize`` after them would pass the integers through): the
    quantizing op gets its ``dtype`` argument, the ops reading a quantized tensor (but
    ``dequantize``, whose float32 is right) keep the dtype their mapping gives."""
    if call.name == "quantize_per_tensor" and isinstance(call.values[3], torch.dtype):
        call.outs[0].dtype = call.values[3]
    elif call.name != "dequantize" and any(
            isinstance(x, Tensor) and x.dtype in dtypes.QUANTIZED for x in _flat(call.values)):
        for out in call.outs:
            if out is not None and out.dtype not in dtypes.QUANTIZED:
                out.dtype = None


def _schema_args(schema, args: list, kwargs: dict) -> list:
    """Every argument of ``schema`` in order: given positionally, by name, or its default."""
    out = []
    for i, arg in enumerate(schema.arguments):
        if i < len(args):
            out.append(args[i])
        elif arg.name in kwargs:
            out.append(kwargs[arg.name])
        elif arg.has_default_value():
            out.append(arg.default_value)
        else:
            out.append(None)
    return out


def _schema_nodes(schema, node) -> list:
    return [node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
            for i, arg in enumerate(schema.arguments)]


def _strides(a):
    if isinstance(a, torch.fx.Node):
        v = a.meta.get("val")
        if isinstance(v, torch.Tensor):
            strides = v.stride()
            # int() of a SymInt would guard on it, fixing the axis in export's ShapeEnv
            if all(isinstance(s, int) for s in strides):
                return list(strides)
    return None


def _python_dtype(value):
    """The dtype of a Python number used as a tensor (None for anything else)."""
    if isinstance(value, torch.Tensor) or not _is_number(value):
        return None
    return torch.float32 if isinstance(value, float) else \
        torch.bool if isinstance(value, bool) else torch.int64


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def _op_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name
    return getattr(target, "__name__", str(target))


def _py_call(fn, args):
    if fn in (math.ceil, math.floor) and _is_symbolic(args[0]):
        import sympy

        return (sympy.ceiling if fn is math.ceil else sympy.floor)(args[0])
    name = getattr(fn, "__name__", "")
    if name in ("sym_max", "sym_min") and any(_is_symbolic(a) for a in args):
        import sympy

        return (sympy.Max if name == "sym_max" else sympy.Min)(*args)
    if name in ("sym_float",):
        return args[0] if _is_symbolic(args[0]) else float(args[0])
    if name in ("sym_int",):
        return args[0] if _is_symbolic(args[0]) else int(args[0])
    out = (_PY_FUNCS.get(fn) or fn)(*args)
    if _is_symbolic(out) and fn in (operator.floordiv, operator.mod):
        from t2n.walk.dim_equal import tidy_size

        return tidy_size(out)  # a chunk size: padded length // chunk count
    return out


def _unbacked_renamed(expr):
    """``expr`` with export's unbacked symbols (``u0``, sizes only the data decides)
    renamed ``t2n_data_u0``: the walker core, mappings and the writer know them by that
    prefix (:data:`t2n.walk.tensors.DATA_DEPENDENT_PREFIX`)."""
    import sympy
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    unbacked = free_unbacked_symbols(expr)
    if not unbacked:
        return expr
    return expr.xreplace({u: sympy.Symbol(DATA_DEPENDENT_PREFIX + u.name, integer=True)
                          for u in unbacked})


def _to_t2n(expr):
    """export's FloorDiv/Mod/CeilToInt in sympy expressions as plain sympy floor arithmetic
    (``a % b`` as ``a - b*floor(a/b)``, which sympy simplifies where its ``Mod`` stays
    opaque: ``(S + (64 - S % 64) % 64) / 64`` is whole), in the one form
    :func:`t2n.walk.dim_equal.tidy_size` gives each size (tract compares sizes by form)."""
    import sympy
    from torch.utils._sympy.functions import CeilToInt, FloorDiv, FloorToInt, Mod, PythonMod

    from t2n.walk.dim_equal import tidy_size

    return tidy_size(expr.replace(
        lambda e: isinstance(e, (FloorDiv, Mod, PythonMod, CeilToInt, FloorToInt)),
        lambda e: (sympy.floor(e.args[0] / e.args[1]) if isinstance(e, FloorDiv) else
                   e.args[0] - e.args[1] * sympy.floor(e.args[0] / e.args[1])
                   if isinstance(e, (Mod, PythonMod)) else
                   sympy.ceiling(e.args[0]) if isinstance(e, CeilToInt) else
                   sympy.floor(e.args[0]))))
