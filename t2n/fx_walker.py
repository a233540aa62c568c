"""Walk a ``torch.export`` program (an FX graph of ATen ops) and build the NNEF graph.

The second front end of t2n: the same registry, the same resolved-argument convention
(tensor handles, Python values in schema order), the same builder and error reporting as the
TorchScript walker (:mod:`t2n.walker`), whose folding rules, labels and problem collection
this module reuses. What differs is only how nodes are read:

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

from . import bf16_values, registry
from .builder import Graph, NodeContext, Tensor, Unavailable
from .errors import ConversionError, UnsupportedOperatorsError
from .export_capture import PREFIX
from .stopwatch import timed
from .walker import (POISON, _NON_DETERMINISTIC, _T2N_DIR, _TORCH_DIR, _Unsupported, _flat,
                     _is_number, _is_symbolic, _pruned_label, conform, unmapped_library_op)

# Python-level functions export records for size arithmetic
_PY_FUNCS = {
    operator.add: operator.add, operator.sub: operator.sub, operator.mul: operator.mul,
    operator.floordiv: operator.floordiv, operator.mod: operator.mod,
    operator.truediv: operator.truediv, operator.neg: operator.neg, operator.pow: operator.pow,
    operator.eq: operator.eq, operator.ne: operator.ne, operator.lt: operator.lt,
    operator.le: operator.le, operator.gt: operator.gt, operator.ge: operator.ge,
    math.ceil: math.ceil, math.floor: math.floor, math.sqrt: math.sqrt,
}
# runtime checks export inserts: nothing to compute
_IGNORED = {"_assert_scalar", "_assert_tensor_metadata", "sym_constrain_range_for_size",
            "sym_constrain_range", "_assert_async", "_functional_assert_async",
            "_functional_sym_constrain_range", "_functional_sym_constrain_range_for_size"}
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


class FxWalker:
    def __init__(self, graph: Graph, program, symbols: dict[int, dict[int, object]]):
        self.g = graph
        self.ep = program
        self.symbols = symbols  # user input index -> {axis: t2n sympy symbol}
        self.env: dict = {}
        self.labels: dict[int, str] = {}
        self.problems: dict[str, list] = {}
        self._const_handles: dict[int, Tensor] = {}
        self._sym_map: dict = {}
        self.output_names: list[str] | None = None  # ModelOutput fields, cache tensors ...

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
                return self._outputs(node)
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
        value = value.detach()
        label = spec.target.removeprefix(PREFIX)  # the user's own state_dict name
        self.labels.setdefault(id(value), label)
        return value

    def _outputs(self, node) -> list:
        outs = []
        from torch.export.graph_signature import OutputKind

        self.output_names = getattr(self.ep, "t2n_output_names", None)
        specs = self.ep.graph_signature.output_specs
        results = [a for a, spec in zip(_as_tuple(node.args[0]), specs)
                   if spec.kind == OutputKind.USER_OUTPUT]  # not buffer updates
        for value in _flat([self._value(a) for a in results]):
            if isinstance(value, Unavailable):
                self._record(value.op, value.reason, None)
                value = POISON
            elif not isinstance(value, (Tensor, torch.Tensor)) and value is not POISON:
                raise ConversionError("output", f"the model returns a {type(value).__name__}, "
                                      "not a tensor; t2n exports tensor outputs only")
            outs.append(value)
        if self.problems:
            raise UnsupportedOperatorsError(self.problems)
        return outs

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
        """A size of export's ShapeEnv as a t2n dim: an int or an expression of t2n symbols."""
        if isinstance(d, torch.SymInt):
            expr = d.node.expr
            if expr.is_number:
                return int(expr)
            return _to_t2n(expr.xreplace(self._sym_map))
        return int(d)

    def _record(self, problem_op: str, reason: str, where: str | None) -> None:
        self.problems.setdefault(problem_op, []).append((reason, where))

    # ------------------------------------------------------------------ nodes
    def _visit(self, node) -> None:
        if node.op == "get_attr":
            self.env[node] = getattr(self.ep.graph_module, node.target)
            return
        if node.op != "call_function":
            self._record(node.op, "FX node kind not supported", fx_source_location(node))
            self.env[node] = POISON
            return
        target = node.target
        args = self._value(list(node.args))
        kwargs = self._value(dict(node.kwargs))
        if any(x is POISON for x in _flat(list(args) + list(kwargs.values()))):
            self.env[node] = POISON
            return
        where = fx_source_location(node)
        try:
            if target is operator.getitem:
                result = args[0][args[1]]
            elif target in _PY_FUNCS or getattr(target, "__module__", "") == "torch" \
                    and getattr(target, "__name__", "").startswith("sym_"):
                result = _py_call(target, args)
            elif isinstance(target, torch._ops.OpOverload):
                result = self._aten(node, target, args, kwargs, where)
            elif target is torch.ops.higher_order.cond:
                result = self._cond(node, *args)
            elif getattr(target, "__name__", "").startswith("auto_functionalized"):
                # export's wrapper of an op that writes into its arguments (mutates_args)
                raise ConversionError(_op_name(args[0]), "the op writes into its arguments "
                                      "(mutates_args); mapped ops must be functional")
            else:
                raise _Unsupported(f"{getattr(target, '__name__', target)} is not an aten op")
        except ConversionError as e:
            name = _op_name(target)
            self._record(e.op if e.op and e.op != "?" else name, e.message, where)
            result = POISON
        except _Unsupported as e:
            self._record(_op_name(target), str(e), where)
            result = POISON
        self.env[node] = result

    def _aten(self, node, target, args: list, kwargs: dict, where):
        schema = target._schema
        # aten ops by their name, ops of other libraries (torch_nn::...) by their qualified name
        name = schema.name.split("::", 1)[1] if target.namespace == "aten" else schema.name
        fn = registry.lookup(name)
        if name in _IGNORED:
            return None
        if name in ("sym_size", "size") and isinstance(args[0], Tensor):
            shape = args[0].torch_shape
            return shape[args[1] % max(len(shape), 1)]
        if name == "sym_numel" and isinstance(args[0], Tensor):
            n = 1
            for d in args[0].torch_shape:
                n = n * d
            return n
        values = _schema_args(schema, args, kwargs)
        if self._foldable(name, values):
            return self._fold(target, name, args, kwargs)
        vals = _as_tuple(node.meta.get("val"))
        if registry.touches_complex(values, [v.dtype for v in vals
                                             if isinstance(v, torch.Tensor)]):
            fn = registry.lookup_complex(name)
            if fn is None:
                raise _Unsupported("no lowering of this op for complex tensors")
        if fn is None:
            raise _Unsupported("no mapping for this aten op" if target.namespace == "aten"
                               else unmapped_library_op(schema.name))
        resolved = [self._resolve(arg, v) for arg, v in zip(schema.arguments, values)]
        self.g.node = NodeContext(
            op=schema.name,
            out_dtypes=[self.g.computed(v.dtype) if isinstance(v, torch.Tensor) else None
                        for v in vals],
            torch_out_dtypes=[v.dtype if isinstance(v, torch.Tensor) else None for v in vals],
            out_shapes=[[self._sym(d) for d in v.shape] if isinstance(v, torch.Tensor)
                        else None for v in vals],
            where=where,
            in_strides=[_strides(a) for a in _schema_nodes(schema, node)])
        try:
            result = bf16_values.call_node(self.g, name, fn, resolved)
        finally:
            self.g.node = None
        if len(vals) > 1 and isinstance(result, (tuple, list)):
            return tuple(self._conform(name, r, v) for r, v in zip(result, vals))
        return self._conform(name, result, vals[0] if vals else None)

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
            x, y = self._tensor_arg(x), self._tensor_arg(y)
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

    def _conform(self, name: str, r, val):
        """The mapping's result with the dtype and shape export recorded for the node."""
        if not isinstance(r, Tensor) or not isinstance(val, torch.Tensor):
            return r
        return conform(self.g, name if "::" in name else f"aten::{name}", r,
                       self.g.computed(val.dtype), [self._sym(d) for d in val.shape])

    def _foldable(self, name: str, values: list) -> bool:
        if name in _NON_DETERMINISTIC:
            return False
        return not any(isinstance(x, Tensor) or _is_symbolic(x) for x in _flat(values))

    def _fold(self, target, name: str, args: list, kwargs: dict):
        with torch.no_grad():
            result = target(*args, **kwargs)
        label = _pruned_label(name, [self.labels[id(x)] for x in _flat(list(args))
                                     if isinstance(x, torch.Tensor) and id(x) in self.labels])
        for r in _flat(list(_as_tuple(result))):
            if isinstance(r, torch.Tensor) and label is not None and id(r) not in self.labels:
                self.labels[id(r)] = label
        return result

    def _resolve(self, arg, value):
        """Constants in tensor positions become handles (weights as labelled variables)."""
        if isinstance(value, torch.dtype):
            return self.g.computed(value)
        tname = str(arg.type).replace("Optional[", "").replace("]", "")
        is_list = tname.startswith("List[")
        tname = tname.replace("List[", "")
        if tname == "Tensor" and not is_list:
            return self._tensor_arg(value)
        if tname == "Tensor" and is_list and isinstance(value, (list, tuple)):
            return [self._tensor_arg(x) if x is not None else None for x in value]
        return value

    def _tensor_arg(self, value):
        if isinstance(value, Tensor) or value is None:
            return value
        if isinstance(value, torch.Tensor):
            key = id(value)
            if key not in self._const_handles:
                label = self.labels.get(key)
                self._const_handles[key] = self.g.variable(value, label) if label is not None \
                    else self.g.const(value)
            return self._const_handles[key]
        if _is_symbolic(value):
            return self.g.scalar(value, torch.int64)
        if _is_number(value):
            dtype = torch.float32 if isinstance(value, float) else \
                torch.bool if isinstance(value, bool) else torch.int64
            return self.g.scalar(value, dtype)
        return value


# ---------------------------------------------------------------------------- helpers
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
    return (_PY_FUNCS.get(fn) or fn)(*args)


def _to_t2n(expr):
    """export's FloorDiv/Mod/CeilToInt in sympy expressions as plain sympy floor arithmetic
    (``a % b`` as ``a - b*floor(a/b)``, which sympy simplifies where its ``Mod`` stays
    opaque: ``(S + (64 - S % 64) % 64) / 64`` is whole)."""
    import sympy
    from torch.utils._sympy.functions import CeilToInt, FloorDiv, FloorToInt, Mod, PythonMod

    return expr.replace(
        lambda e: isinstance(e, (FloorDiv, Mod, PythonMod, CeilToInt, FloorToInt)),
        lambda e: (sympy.floor(e.args[0] / e.args[1]) if isinstance(e, FloorDiv) else
                   e.args[0] - e.args[1] * sympy.floor(e.args[0] / e.args[1])
                   if isinstance(e, (Mod, PythonMod)) else
                   sympy.ceiling(e.args[0]) if isinstance(e, CeilToInt) else
                   sympy.floor(e.args[0])))
