"""Dynamic axes: which input axes are tract symbols instead of fixed sizes.

Accepts the ``torch.onnx.export`` spelling: ``{"input_ids": {0: "B", 1: "S"}}`` or
``{"x": [0]}`` (symbols then named ``<input>_<axis>``). A symbol is 1 or more at run time
(tract is told so, which lets it pick its same-shape kernels); ``("P", 0)`` in place of
``"P"`` lets it be 0 too (an empty key/value cache). Wrong specs fail with a clear message
naming the input and the axis.
"""

from __future__ import annotations

import contextlib
import logging

import re

from t2n.walk.builder import safe_identifier
from t2n.errors import UsageError

_SYMBOL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def parse_dynamic_axes(dynamic_axes, input_names: list[str], args) -> dict[int, dict[int, str]]:
    if not isinstance(dynamic_axes, dict):
        raise UsageError("dynamic_axes must be a dict {input name: {axis: symbol}}")
    out: dict[int, dict[int, str]] = {}
    for name, axes in dynamic_axes.items():
        if name not in input_names:
            raise UsageError(f"dynamic_axes names {name!r}, which is not an input "
                             f"(inputs: {', '.join(input_names)})")
        i = input_names.index(name)
        rank = args[i].dim()
        if isinstance(axes, (list, tuple)):
            axes = {a: f"{name}_{a % rank if isinstance(a, int) else a}" for a in axes}
        if not isinstance(axes, dict):
            raise UsageError(f"dynamic_axes[{name!r}] must be a dict {{axis: symbol}} or a list")
        spec = {}
        for axis, sym in axes.items():
            sym = _name_and_minimum(sym, name, axis, args[i])[0]
            if not isinstance(axis, int) or not -rank <= axis < rank:
                raise UsageError(f"dynamic axis {axis!r} of input {name!r} is out of range "
                                 f"(the input has rank {rank})")
            if not isinstance(sym, str) or not _SYMBOL_RE.match(sym):
                raise UsageError(f"symbol {sym!r} for axis {axis} of {name!r} must be an "
                                 "identifier (letters, digits, underscore)")
            if not safe_identifier(sym) or sym in ("min", "max"):
                raise UsageError(f"symbol {sym!r} for axis {axis} of {name!r} is reserved in "
                                 "NNEF or read as a literal by tract (it may not start with "
                                 "'inf', 'true', 'false' or 'nan'); pick another name")
            spec[axis % rank] = sym
        out[i] = spec
    check_consistent_symbols(out, input_names, args)
    return out


def _name_and_minimum(sym, name: str, axis, example) -> tuple:
    """(symbol, least size[, most size]) of one axis spec: ``"S"`` (at least 1),
    ``("P", 0)`` or ``("S", 1, 512)``."""
    if not isinstance(sym, tuple):
        return sym, None
    if (len(sym) not in (2, 3) or any(not isinstance(n, int) or isinstance(n, bool)
                                      for n in sym[1:]) or sym[1] < 0):
        raise UsageError(f"dynamic axis {axis} of {name!r}: {sym!r} must be (symbol, least "
                         "size) or (symbol, least size, most size), the sizes integers, the "
                         "least 0 or more")
    size = int(example.shape[axis]) if isinstance(axis, int) and -example.dim() <= axis < \
        example.dim() else None
    if size is not None and sym[1] > size:
        raise UsageError(f"dynamic axis {axis} of {name!r}: the least size {sym[1]} is above "
                         f"the example's {size}")
    if len(sym) == 3 and size is not None and sym[2] <= size:
        # the check runs the archive at the example size + 1 too (t2n.check.fresh_inputs)
        raise UsageError(f"dynamic axis {axis} of {name!r}: the most size {sym[2]} must be "
                         f"above the example's {size} (export with a smaller example)")
    return sym


def symbol_minimums(dynamic_axes, symbols: dict[int, dict[int, str]], args) -> dict[str, int]:
    """The least run-time size of each symbol: the one given as ``(symbol, least)``, else 1
    (0 when the example itself has the axis empty)."""
    given = {}
    for axes in dynamic_axes.values():
        if isinstance(axes, dict):
            for sym in axes.values():
                if isinstance(sym, tuple):
                    given[sym[0]] = min(given.get(sym[0], sym[1]), sym[1])
    out: dict[str, int] = {}
    for i, axes in symbols.items():
        for axis, sym in axes.items():
            least = given.get(sym, min(int(args[i].shape[axis]), 1))
            out[sym] = min(out.get(sym, least), least)
    return out


def symbol_maxima(dynamic_axes) -> dict[str, int]:
    """The most run-time size of each symbol given as ``(symbol, least, most)``. tract bounds
    a product of symbols (``B*S``) only when every factor has an upper bound too: with one,
    it proves a residual add over ``[B, S, C]`` large enough for its same-shape kernel."""
    out: dict[str, int] = {}
    for axes in dynamic_axes.values():
        if isinstance(axes, dict):
            for sym in axes.values():
                if isinstance(sym, tuple) and len(sym) == 3:
                    out[sym[0]] = min(out.get(sym[0], sym[2]), sym[2])
    return out


def check_consistent_symbols(symbols: dict[int, dict[int, str]], input_names: list[str],
                             args) -> None:
    """One symbol names one size: the same symbol on axes of different traced sizes is a
    mistake in the spec (tract would bind it to one value at run time)."""
    seen: dict[str, tuple[str, int, int]] = {}
    for i, axes in symbols.items():
        for axis, sym in axes.items():
            size = int(args[i].shape[axis])
            if sym in seen and seen[sym][2] != size:
                other, oaxis, osize = seen[sym]
                raise UsageError(f"symbol {sym!r} is used for axis {oaxis} of {other!r} (size "
                                 f"{osize} in the example) and axis {axis} of "
                                 f"{input_names[i]!r} (size {size}): one symbol must name one "
                                 "size")
            seen.setdefault(sym, (input_names[i], axis, size))
            if sym in input_names:
                raise UsageError(f"symbol {sym!r} has the name of an input; pick another name")


def symbol(name: str, minimum: int = 1):
    """The sympy symbol of a tract dimension symbol: a positive integer, or a nonnegative
    one when the axis may be empty (``("P", 0)``). Proofs about sizes (a slice bound below
    the length, a floor division of a nonnegative numerator) read these assumptions: a
    ``P - 1 >= 0`` proven for a positive P would write a slice tract cannot run at P = 0."""
    import sympy

    if minimum < 1:
        return sympy.Symbol(name, integer=True, nonnegative=True)
    return sympy.Symbol(name, integer=True, positive=True)


def is_symbolic(x) -> bool:
    import sympy

    return isinstance(x, sympy.Basic) and not x.is_number


class SymbolicShapes:
    """Output shapes of aten ops whose inputs have symbolic axes, from PyTorch's own shape
    functions.

    The trace records concrete sizes only; for a node that reads a dynamic axis, t2n calls
    the aten overload on fake tensors whose sizes are SymInts of a fresh ``ShapeEnv`` (one
    ``ShapeEnv`` symbol per tract symbol, with the example size as hint). PyTorch's meta
    functions then give every output size as an expression of the symbols, which is
    converted back to t2n's sympy symbols. A static graph never comes here.

    Each node gets its own ``ShapeEnv``, so what PyTorch assumes for one node never leaks
    into the next. When the shape function records a condition that ties sizes to numbers
    and fails for other sizes (``x.reshape(16, 4)`` on ``[B, S, 4]`` needs ``4*B*S == 64``)
    :meth:`out_shapes` raises: a dynamic axis is never frozen silently. When PyTorch has no
    symbolic shape function (it falls back to running the op on the example sizes and
    pins every symbol), the result is None and the mapping's own shape is used.
    """

    def __init__(self, hints: dict):
        self.hints: dict = {s: int(h) for s, h in hints.items()}
        self.unknown: set[str] = set()  # ops whose symbolic shapes PyTorch could not compute
        self._cache: dict = {}  # transformer layers repeat the same node signatures
        from t2n.walk.shape_points import PointShapes

        self.points = PointShapes(self.hints)  # the common ops' sizes, without a ShapeEnv

    def _fresh(self):
        from torch._dynamo.source import ConstantSource
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

        self.env = ShapeEnv(duck_shape=False, specialize_zero_one=False,
                            assume_static_by_default=False)
        self.mode = FakeTensorMode(shape_env=self.env, allow_non_fake_inputs=True)
        self.to_env, self.from_env = {}, {}
        for sym, hint in self.hints.items():
            s = self.env.create_symbol(hint, ConstantSource(sym.name),
                                       dynamic_dim=DimDynamic.DYNAMIC)
            self.to_env[sym] = s
            self.from_env[s] = sym

    # ---------------------------------------------------------------- conversions
    def symint(self, expr):
        import sympy

        if not is_symbolic(expr):
            return int(expr)
        e = _floor_to_floordiv(sympy.sympify(expr).xreplace(self.to_env))
        hint = int(sympy.sympify(expr).subs(self.hints))
        return self.env.create_symintnode(e, hint=hint)

    def from_torch(self, d):
        """A PyTorch size (int or SymInt) as an int or a sympy expression of t2n symbols."""
        import torch

        if isinstance(d, torch.SymInt):
            expr = self.env.replace(d.node.expr)
            expr = _torch_functions_to_sympy(expr.xreplace(self.from_env))
            if expr.is_number:
                return int(expr)
            return expr
        return int(d)

    def _constraint(self, expr):
        """(text, relates symbols only) for a guard that holds at the example sizes but not
        at other sizes, else None (bounds such as ``S >= 5`` or ``S != 1`` and conditions
        that hold for many sizes are fine)."""
        import sympy

        if not isinstance(expr, sympy.Eq):
            return None
        e = _torch_functions_to_sympy(expr.xreplace(self.from_env))
        syms = sorted(e.free_symbols & set(self.hints), key=lambda x: x.name)
        if not syms:
            return None
        trials = [{x: self.hints[x] + k for x in syms} for k in (1, 2, 7, 13)]
        trials += [{x: self.hints[x] + (k if i == j else 0) for i, x in enumerate(syms)}
                   for j in range(len(syms)) for k in (1, 5)]
        for values in trials:
            if not bool(e.subs(values)):
                diff = sympy.expand(e.lhs - e.rhs)
                only_symbols = len(diff.free_symbols) > 1 and diff.as_coeff_Add()[0] == 0
                return f"{e.lhs} == {e.rhs}", only_symbols
        return None

    def _fake_arg(self, x):
        import torch

        from t2n.walk.builder import Tensor

        if isinstance(x, Tensor):
            if x.is_const and x.static_shape() is not None:
                return x.value
            return torch.empty([self.symint(d) for d in x.shape], dtype=x.dtype)
        if isinstance(x, (list, tuple)):
            return type(x)(self._fake_arg(v) for v in x)
        if is_symbolic(x):
            return self.symint(x)
        return x

    # ---------------------------------------------------------------- propagation
    def out_shapes(self, schema, inputs: list, op_name: str):
        """Output shapes (one per tensor output, None elsewhere), or None when PyTorch cannot
        compute them symbolically."""
        key = (str(schema), _key(inputs))
        if key in self._cache:
            return self._cache[key]
        out = self.points.out_shapes(schema, inputs)
        if out is None:
            out = self._compute(schema, inputs, op_name)
        self._cache[key] = out
        return out

    def _compute(self, schema, inputs: list, op_name: str):
        import torch

        from t2n.errors import ConversionError

        ns, name = schema.name.split("::", 1)  # aten, or quantized (torch.ao kernels)
        op = getattr(getattr(torch.ops, ns), name)
        op = getattr(op, schema.overload_name or "default")
        self._fresh()
        args, kwargs = [], {}
        try:
            with self.mode, _quiet_fake_tensor_log():
                for arg, value in zip(schema.arguments, inputs):
                    v = self._fake_arg(value)
                    if arg.kwarg_only:
                        kwargs[arg.name] = v
                    else:
                        args.append(v)
                result = op(*args, **kwargs)
        except Exception:
            return None
        if any(getattr(r, "is_number", False) for r in self.env.replacements.values()):
            return None  # PyTorch ran the op on the example sizes: no symbolic answer
        for guard in self.env.guards:
            found = self._constraint(guard.expr)
            if found is None:
                continue
            text, ties_symbols = found
            if ties_symbols:
                raise ConversionError(op_name, f"the model only works when {text}: give "
                                      "those axes the same symbol in dynamic_axes")
            raise ConversionError(op_name, f"the model only works when {text} (true for "
                                  "the example sizes): a dynamic axis would be frozen; "
                                  "remove it from dynamic_axes or make the code "
                                  "size-generic")
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        out = []
        for r in results:
            if isinstance(r, torch.Tensor):
                out.append(tuple(self.from_torch(d) for d in r.shape))
            else:
                out.append(None)
        known = set(self.hints)
        if any(getattr(d, "free_symbols", known) - known for s in out if s for d in s):
            # a size PyTorch makes up for a data-dependent answer (``u0``: repeat_interleave
            # by a repeats tensor, even a constant one): not a size tract knows
            return None
        return out


@contextlib.contextmanager
def _quiet_fake_tensor_log():
    """A failed fake-tensor run is an expected answer here (no symbolic shape): keep
    PyTorch from logging it as an error on the user's terminal."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    was = log.disabled
    log.disabled = True
    try:
        yield
    finally:
        log.disabled = was


def _key(x):
    """A hashable summary of a node's inputs that determines its output shapes."""
    import torch

    from t2n.walk.builder import Tensor

    if isinstance(x, Tensor):
        return ("T", x.shape, x.dtype, id(x.value) if x.is_const else None)
    if isinstance(x, (list, tuple)):
        return (type(x).__name__,) + tuple(_key(v) for v in x)
    if isinstance(x, torch.Tensor):
        return ("C", id(x))
    try:
        hash(x)
        return x
    except TypeError:
        return ("?", id(x))


def _floor_to_floordiv(expr):
    import sympy
    from torch.utils._sympy.functions import FloorDiv

    def conv(e):
        num, den = e.as_numer_denom()
        return FloorDiv(num, den)

    return expr.replace(lambda e: isinstance(e, sympy.floor), lambda e: conv(e.args[0]))


def _torch_functions_to_sympy(expr):
    """PyTorch's sympy helper functions (FloorDiv, CeilDiv, Max ...) as plain sympy."""
    import sympy
    from torch.utils._sympy import functions as F

    table = {
        F.FloorDiv: lambda a, b: sympy.floor(a / b),
        F.CleanDiv: lambda a, b: a / b,
        F.CeilDiv: lambda a, b: sympy.ceiling(a / b),
        F.Max: sympy.Max, F.Min: sympy.Min,
        F.PythonMod: lambda a, b: a - b * sympy.floor(a / b),
        F.Mod: lambda a, b: a - b * sympy.floor(a / b),
    }
    for fn, repl in table.items():
        expr = expr.replace(lambda e, fn=fn: isinstance(e, fn), lambda e, r=repl: r(*e.args))
    return expr
