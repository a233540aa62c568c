"""The walker core: what walking a captured program does, whatever its IR.

Each capture yields a program in its own IR (TorchScript nodes from the tracer or a saved
file, FX nodes from ``torch.export``); a small reader per IR (:mod:`t2n.walk.walker`,
:mod:`t2n.walk.fx_walker`) visits its nodes in order and hands every op to this core as an
:class:`OpCall`: the op's registry name and schema, its arguments in schema order and what
the IR recorded for its outputs. The core then does, once for both:

* answer ops on a mapping's non-tensor values (a packed sequence answers itself) and size
  queries on tensor handles;
* fold an op whose inputs are all known with torch itself (weight preprocessing, pruning
  masks, static shape arithmetic), keeping the provenance of weights (their state_dict
  names) and never mutating the user's model;
* otherwise dispatch it to the mapping registered for it (:mod:`t2n.walk.registry`) with
  resolved arguments (torch tensors become graph constants or labelled weights), and give
  the result the dtype and shape PyTorch recorded (:func:`conform`);
* record every unsupported op with its source line instead of stopping, poison what it
  would have produced, and fail once at the end with all of them.

Graph constants are found again by ``id()`` of the torch tensor; every tensor behind such a
key is kept alive for the walk, since a freed temporary's id is handed to the next tensor
allocated (GraniteMoeHybrid's conv weight once read its state cache's constant).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from t2n import dtypes
from t2n.errors import ConversionError, UnsupportedOperatorsError
from t2n.walk import bf16_values, quant_steps, registry
from t2n.walk.builder import (DATA_DEPENDENT_PREFIX, MAX_INLINE_ELEMENTS, Graph, NodeContext,
                              Tensor, Unavailable)
from t2n.walk.folding import FoldedStorage
from t2n.walk.torchscript import _flat, _is_number, _is_symbolic, _Unsupported

# Ops that must not be folded even when their inputs are constants.
_NON_DETERMINISTIC = {"rand", "randn", "randint", "rand_like", "randn_like", "randint_like",
                      "bernoulli", "bernoulli_", "normal", "normal_", "uniform_", "multinomial",
                      "randperm", "dropout", "feature_dropout", "alpha_dropout", "empty",
                      "empty_like", "new_empty", "empty_strided"}


class _Poison:
    """The value of a node that could not be converted (its consumers are skipped quietly)."""


POISON = _Poison()


@dataclass
class Out:
    """What the IR recorded for one output of a node: PyTorch's dtype and sizes (``None``
    where it did not record them)."""

    dtype: torch.dtype | None
    sizes: list | None


@dataclass
class OpCall:
    """One op of the captured program, as a reader hands it to the core.

    ``values`` are every schema argument in order (graph tensor handles, torch tensors,
    Python values); ``outs`` one :class:`Out` per result the IR records (``None``: not a
    tensor, left as the mapping returns it); ``multi`` whether the op's result is split into
    those results. ``target`` runs the op in torch (``None``: looked up from the schema);
    ``node`` is the reader's own node, for its hooks. What only a mapping needs is filled
    by the reader's :meth:`WalkerCore._complete`: the output sizes, the input strides and
    ``number_dtypes``, per argument the dtype a Python number in a Tensor argument becomes
    (``None``: it stays a number)."""

    name: str  # registry key: "add", "quantized::linear", "mylib::op"
    schema: object
    values: list
    outs: list
    multi: bool
    where: str | None
    node: object = None
    target: object = None
    in_strides: list | None = None
    number_dtypes: list | None = None
    args: list = field(default_factory=list)  # the resolved arguments, once resolved

    @property
    def op(self) -> str:
        return self.name if "::" in self.name else f"aten::{self.name}"


class WalkerCore:
    """State and steps shared by the IR readers (which subclass it and add their node loop).

    Readers may override three hooks: :meth:`_torch_values` (the arguments as torch takes
    them when folding), :meth:`_complete` (what only a mapping needs: output sizes, input
    strides, number dtypes, read once the op is not folded) and :meth:`_argument` (a
    non-tensor argument as a mapping gets it), plus :meth:`_in_place`, :meth:`_after_fold`
    and :meth:`_after_mapping` where the IR has in-place ops and views."""

    def __init__(self, graph: Graph, labels: dict[int, str] | None = None):
        self.g = graph
        self.labels = labels if labels is not None else {}  # id(tensor) -> state_dict name
        self.problems: dict[str, list] = {}
        self._const_handles: dict[int, Tensor] = {}
        # the torch tensors behind the id() keys of labels and _const_handles, kept alive
        self._keyed: dict[int, torch.Tensor] = {}
        self.folded = FoldedStorage()

    # ------------------------------------------------------------------ problems
    def _record(self, problem_op: str, reason: str, where: str | None) -> None:
        self.problems.setdefault(problem_op, []).append((reason, where))

    def _poisoned(self, values, where) -> bool:
        """Whether a node is skipped: an input is poisoned, or is a model output its
        mapping did not compute (recorded here, where it is used)."""
        flat = _flat(values)
        missing = next((x for x in flat if isinstance(x, Unavailable)), None)
        if missing is not None:
            self._record(missing.op, missing.reason, where)
            return True
        return any(x is POISON for x in flat)

    def _guarded(self, op: str, short: str, where, convert):
        """``convert()``, or POISON with the problem recorded under the op it names."""
        try:
            return convert()
        except ConversionError as e:
            self._record(op if not e.op or e.op in ("?", short) else e.op, e.message, where)
        except _Unsupported as e:
            self._record(op, str(e), where)
        return POISON

    def _outputs(self, values, hint: str | None = None) -> list:
        """The model's outputs as a flat list of tensors; raises with every problem met."""
        outs = []
        for value in _flat_outputs(values):
            if isinstance(value, Unavailable):  # a model output the mapping did not compute
                self._record(value.op, value.reason, None)
                value = POISON
            elif not isinstance(value, (Tensor, torch.Tensor)) and value is not POISON:
                raise ConversionError("output", f"the model returns a {type(value).__name__},"
                                      " not a tensor; t2n exports tensor outputs only")
            outs.append(value)
        if self.problems:
            raise UnsupportedOperatorsError(self.problems, hint=hint)
        return outs

    # ------------------------------------------------------------------ weights
    def _label(self, value: torch.Tensor, label: str) -> None:
        """Name ``value`` (a parameter, buffer or constant) by its state_dict key."""
        self.labels.setdefault(id(value), label)
        self._keyed.setdefault(id(value), value)

    def _tensor_arg(self, value, dtype=None):
        """A Tensor argument as a graph tensor: torch tensors become constants (labelled
        ones weights), numbers rank-0 constants of ``dtype`` (without one they stay numbers),
        sizes of dynamic axes values computed by tract at run time."""
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
        if _is_number(value) and dtype is not None:
            return self.g.scalar(value, self.g.computed(dtype))
        if _is_symbolic(value):
            dtype = self.g.computed(dtype) if dtype is not None else None
            return self.g.scalar(value, dtype or torch.int64)
        return value

    # ------------------------------------------------------------------ ops
    def _hooked(self, name: str, inputs: list):
        """A mapping's non-tensor value (a packed sequence) answers an op reading it."""
        for x in inputs:
            hook = getattr(x, "t2n_aten", None)
            if hook is not None:
                return hook(self.g, name, inputs)
        return None

    @staticmethod
    def _size_query(name: str, inputs: list):
        """``x.size()``, ``x.size(d)``, ``x.numel()``, ``x.dim()`` of a graph tensor, as
        Python values (ints or expressions of the dynamic axes); ``None`` for other ops."""
        if not inputs or not isinstance(inputs[0], Tensor):
            return None
        shape = inputs[0].torch_shape
        if name in ("size", "sym_size"):
            return [list(shape)] if len(inputs) == 1 else [shape[inputs[1] % max(len(shape), 1)]]
        if name in ("numel", "sym_numel"):
            n = 1
            for d in shape:
                n = n * d
            return [n]
        if name == "dim":
            return [len(shape)]
        return None

    def _op(self, call: OpCall) -> list:
        """The results of one op (one per IR result): folded, or converted by its mapping."""
        if self._foldable(call.name, call.values) and \
                not widens_stored_integers(self.g, call):
            results = self._fold(call)
            self._after_fold(call, results)
            return results
        fn = self._mapping(call)
        self._complete(call, fn)
        call.args = self._resolve(call, fn)
        with self._at(call):
            written = self._in_place(call, fn)
            if written is not None:
                return written
            result = bf16_values.call_node(self.g, call.name, fn, call.args)
        results = [self._conform(call.op, r, out)
                   for r, out in zip(_split(result, call.multi), call.outs or [None])]
        quant_steps.carry(self.g, call.name, call.args, results)
        self._after_mapping(call, results)
        return results

    def _foldable(self, name: str, values: list) -> bool:
        if name in _NON_DETERMINISTIC:
            return False
        for x in _flat(values):
            if isinstance(x, Tensor) or _is_symbolic(x) or hasattr(x, "t2n_aten"):
                return False
        return True

    def _fold(self, call: OpCall) -> list:
        """Run the op in torch on known inputs, as eager does: an in-place op writes into a
        tensor folding created itself (its views see the write), never into the model's."""
        args, kwargs = [], {}
        inplace = registry.is_inplace(call.name)
        for k, (arg, value) in enumerate(zip(call.schema.arguments, self._torch_values(call))):
            if isinstance(value, torch.Tensor) and inplace:
                if k == 0 and self.folded.writable(value):
                    self.folded.before_write(self.g, value, self._const_handles)
                else:
                    value = value.clone()  # never mutate the user's model
            if arg.kwarg_only:
                kwargs[arg.name] = value
            else:
                args.append(value)
        op = call.target if call.target is not None else _torch_op(call.schema)
        with torch.no_grad():
            result = op(*args, **kwargs)
        # Keep provenance of folded weights (pruning: weight_orig * weight_mask).
        label = _pruned_label(call.name, [self.labels[id(x)] for x in _flat(call.values)
                                          if isinstance(x, torch.Tensor) and id(x) in self.labels])
        results = _split(result, call.multi)
        self.folded.note(args, results)
        for r in results:
            if isinstance(r, torch.Tensor) and label is not None and id(r) not in self.labels:
                self.labels[id(r)] = label
                self._keyed[id(r)] = r
        return results

    def _mapping(self, call: OpCall):
        """The mapping for the op: its quantized or complex lowering where the inputs ask."""
        fn = registry.lookup(call.name)
        if any(isinstance(x, Tensor) and x.dtype in dtypes.QUANTIZED for x in _flat(call.values)):
            variant = registry.lookup_quantized(call.name)
            if variant is None and not registry.moves_quantized(call.name):
                raise _Unsupported("no lowering of this op for torch.ao quantized tensors "
                                   "(dequantize before it)")
            fn = variant or fn
        if registry.touches_complex(call.values, [o.dtype for o in call.outs if o is not None]):
            fn = registry.lookup_complex(call.name)
            if fn is None:
                raise _Unsupported("no lowering of this op for complex tensors")
        if fn is None:
            raise _Unsupported("no mapping for this aten op"
                               if call.op.split("::")[0] in ("aten", "quantized")
                               else unmapped_library_op(call.op))
        return fn

    def _resolve(self, call: OpCall, fn) -> list:
        """Arguments as mappings take them: tensor positions as graph tensors (weights as
        labelled variables), the others as the reader translates them (:meth:`_argument`)."""
        user = getattr(fn, "t2n_user_mapping", False)
        args = []
        for arg, value, dtype in zip(call.schema.arguments, call.values, call.number_dtypes):
            tname = str(arg.type).replace("Optional[", "").replace("]", "")
            if tname == "Tensor":
                value = self._tensor_arg(value, dtype)
            elif tname == "List[Tensor" and isinstance(value, (list, tuple)):
                value = [self._tensor_arg(x) if x is not None else None for x in value]
            else:
                value = self._argument(arg, value, user)
            args.append(value)
        return args

    @contextlib.contextmanager
    def _at(self, call: OpCall):
        """The node being converted, as mappings read it (``g.out_dtype()``, errors' line)."""
        self.g.node = NodeContext(
            op=call.op,
            out_dtypes=[self.g.computed(o.dtype) if o is not None else None for o in call.outs],
            torch_out_dtypes=[o.dtype if o is not None else None for o in call.outs],
            out_shapes=[o.sizes if o is not None else None for o in call.outs],
            where=call.where, in_strides=call.in_strides)
        try:
            yield
        finally:
            self.g.node = None

    def _conform(self, op: str, r, out: Out | None):
        """A mapping's result with the dtype and sizes PyTorch recorded for it."""
        if out is None or not isinstance(r, Tensor):
            return r
        return conform(self.g, op, r, self.g.computed(out.dtype), out.sizes)

    # ------------------------------------------------------------------ reader hooks
    def _torch_values(self, call: OpCall) -> list:
        return call.values

    def _complete(self, call: OpCall, fn) -> None:
        pass

    def _argument(self, arg, value, user_mapping: bool):
        return value

    def _in_place(self, call: OpCall, fn):
        return None

    def _after_fold(self, call: OpCall, results: list) -> None:
        pass

    def _after_mapping(self, call: OpCall, results: list) -> None:
        pass


# the integer dtypes whose constants a dequantization or cast keeps stored as they are
_STORED_INTEGERS = (torch.int8, torch.uint8)


def widens_stored_integers(g: Graph, call: OpCall) -> bool:
    """Whether an op on known inputs is left to its mapping rather than folded: the mapping
    widens an int8/uint8 weight to a float (torchao's weight-only configs cast it, pt2e's
    ``dequantize_per_channel`` scales it), and folding would store the float result, four
    times the bytes. Small tensors (literals anyway) and integer results still fold, and
    so does everything for a target without integer weights (standard NNEF)."""
    fn = registry.lookup(call.name)
    if not getattr(fn, "t2n_stores_integers", False) or \
            not g.session.target.can("integer_weights"):
        return False
    if not any(o is not None and o.dtype is not None and o.dtype.is_floating_point
               for o in call.outs):
        return False
    return any(isinstance(x, torch.Tensor) and x.dtype in _STORED_INTEGERS
               and x.numel() > MAX_INLINE_ELEMENTS for x in _flat(call.values))


def _split(result, multi: bool) -> list:
    return list(result) if multi and isinstance(result, (tuple, list)) else [result]


def _flat_outputs(value) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat_outputs(v)]
    if isinstance(value, dict):
        return [x for k in value for x in _flat_outputs(value[k])]
    return [value]


def _torch_op(schema):
    namespace, op_name = schema.name.split("::", 1)
    op = getattr(getattr(torch.ops, namespace), op_name)
    return getattr(op, schema.overload_name) if schema.overload_name else op


def unmapped_library_op(op: str) -> str:
    """The refusal of an op of another library (a torch.library custom op) without a
    mapping, shared by both captures: what to do about it."""
    if op.startswith("torchao::"):  # torchao's quantize_ configs call these when they run
        return ("a torchao quantization primitive t2n does not map: t2n exports torchao's "
                "weight-only configs (Int8WeightOnlyConfig, IntxWeightOnlyConfig) and pt2e "
                "models, not configs that quantize activations at run time such as "
                "Int8DynamicActivationInt8WeightConfig (docs/quantized.md); or register a "
                f"mapping with @t2n.mapping({op!r})")
    return (f"no mapping for this operator of the {op.split('::')[0]!r} library; register "
            f"one with @t2n.mapping({op!r}) (docs/extensions.md)")


def conform(g: Graph, op: str, r: Tensor, dtype, sizes) -> Tensor:
    """A mapping's result with the dtype (``None``: as it is) and sizes PyTorch recorded for
    the node: symbolic sizes replace the mapping's where PyTorch's shape functions named a
    dynamic axis (a size PyTorch leaves to the data, where the mapping knows it, stays the
    mapping's: a constant mask's count); a rank that differs is a bug in the mapping."""
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
            r.shape = tuple(d if isinstance(d, int) and _data_dependent(s) else
                            s if isinstance(d, int) or _is_symbolic(s) else d
                            for s, d in zip(sizes, r.shape))
    return r


def _data_dependent(size) -> bool:
    """Whether ``size`` holds a size only the data decides (a t2n_data_ symbol)."""
    return _is_symbolic(size) and any(str(x).startswith(DATA_DEPENDENT_PREFIX)
                                      for x in size.free_symbols)


def _pruned_label(name: str, labels: list[str]) -> str | None:
    """The label of a folded tensor: its first labelled input's, except that the product
    ``<p>.<w>_orig * <p>.<w>_mask`` that a torch.nn.utils.prune hook computes is the weight
    ``<p>.<w>`` itself (the archive stores that one tensor under its state_dict name)."""
    if name == "mul" and len(labels) == 2:
        a, b = sorted(labels, key=lambda s: s.endswith("_mask"))
        if a.endswith("_orig") and b.endswith("_mask") and a[:-5] == b[:-5]:
            return a[:-5]
    return labels[0] if labels else None
