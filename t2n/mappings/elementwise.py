"""Element-wise arithmetic, comparisons, logic and unary math.

Binary ops follow torch's type promotion: the walker tells the result dtype of the node
(``g.out_dtype()``), operands are cast to it and brought to equal rank (tract broadcasts
from the end otherwise).
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import nan_propagating, where_
from t2n.mappings.helpers.exact_division import exact_fmod, rounded_div
from t2n.mappings.helpers.integer import int_pow
from t2n.walk.registry import aten


def _promoted(g, a, b):
    """The dtype the operands are computed in: the node's result dtype for arithmetic."""
    return g.out_dtype()


@aten("add")
def add(g, self, other, alpha=1):
    dtype = _promoted(g, self, other)
    if dtype == torch.bool:  # bool + bool is logical or in torch
        return g.binary("or", self, other, torch.bool)
    if alpha != 1:
        other = mul_scalar(g, other, alpha, dtype)
    return g.binary("add", self, other, dtype)


@aten("sub")
def sub(g, self, other, alpha=1):
    dtype = _promoted(g, self, other)
    if alpha != 1:
        other = mul_scalar(g, other, alpha, dtype)
    return g.binary("sub", self, other, dtype)


@aten("rsub")
def rsub(g, self, other, alpha=1):
    dtype = _promoted(g, self, other)
    if alpha != 1:
        self = mul_scalar(g, self, alpha, dtype)
    return g.binary("sub", other, self, dtype)


def mul_scalar(g, x, k, dtype):
    if not hasattr(x, "rank"):
        return x * k
    return g.binary("mul", x, k, dtype)


@aten("mul")
def mul(g, self, other):
    dtype = _promoted(g, self, other)
    if dtype == torch.bool:
        return g.binary("and", self, other, torch.bool)
    if self is other and not dtype.is_floating_point:
        return int_power(g, g.cast(self, dtype), 2)
    return g.binary("mul", self, other, dtype)


def int_power(g, x, n: int):
    """x ** n for an integer tensor and a static n >= 0, exact (wrapping like torch).

    tract rewrites ``mul(x, x)`` into ``Square``, which has no integer kernel, so the
    product is a ``tract_core_product_reduce`` over n broadcast copies instead (three ops
    whatever n is).
    """
    if n == 0:
        return g.broadcast_to(g.scalar(1, x.dtype), x.shape)
    if n == 1:
        return x
    stacked = g.broadcast_to(g.unsqueeze(x, [0]), [n] + list(x.shape))
    return g.reduce("tract_core_product_reduce", stacked, [0], keepdim=False)


@aten("div")
def div(g, self, other, rounding_mode=None):
    dtype = g.out_dtype()
    if rounding_mode is None:
        return g.binary("div", self, other, dtype)
    if dtype.is_floating_point and rounding_mode == "trunc":
        # PyTorch: trunc of the correctly rounded quotient (tract's is not)
        return trunc_float(g, rounded_div(g, self, other, dtype))
    if dtype.is_floating_point:
        return _floor_div_float(g, self, other, dtype)
    # integer division: tract's integer div truncates toward zero
    q = g.binary("div", self, other, dtype)
    if rounding_mode == "trunc":
        return q
    # floor: subtract one where the remainder is non-zero and signs differ
    a = g.as_tensor(self, dtype)
    b = g.as_tensor(other, dtype)
    prod = g.binary("mul", q, b, dtype)
    rem_nz = g.binary("ne", prod, a, dtype, out_dtype=torch.bool)
    zero = g.scalar(0, dtype)
    neg_a = g.binary("lt", a, zero, dtype, out_dtype=torch.bool)
    neg_b = g.binary("lt", b, zero, dtype, out_dtype=torch.bool)
    diff_sign = g.binary("ne", neg_a, neg_b, torch.bool)
    fix = g.binary("and", rem_nz, diff_sign, torch.bool)
    one = g.scalar(1, dtype)
    q_minus = g.binary("sub", q, one, dtype)
    return where_(g, fix, q_minus, q)


def _floor_div_float(g, self, other, dtype):
    """PyTorch's ``div_floor_floating``, each step in ``dtype``: ``mod = fmod(a, b)``
    (exact), ``div = (a - mod) / b`` (correctly rounded), one less where ``mod`` and ``b``
    differ in sign, then ``floor(div)``, rounded up where ``div - floor(div) > 0.5``;
    ``a / b`` for ``b = 0``."""
    a, b = g.as_tensor(self, dtype), g.as_tensor(other, dtype)
    mod = g.cast(exact_fmod(g, a, b, dtype), dtype)
    div = rounded_div(g, g.binary("sub", a, mod, dtype), b, dtype)

    def test(kind, x, y):
        return g.binary(kind, x, y, dtype, out_dtype=torch.bool)

    fix = g.binary("and", test("ne", mod, 0.0),
                   g.binary("tract_core_xor", test("lt", b, 0.0), test("lt", mod, 0.0),
                            torch.bool), torch.bool)
    div = where_(g, fix, g.binary("sub", div, 1.0, dtype), div)
    fl = g.unary("floor", div)
    fl = where_(g, test("gt", g.binary("sub", div, fl, dtype), 0.5),
                g.binary("add", fl, 1.0, dtype), fl)
    return where_(g, test("eq", b, 0.0), g.binary("div", a, b, dtype), fl)


@aten("floor_divide")
def floor_divide(g, self, other):
    return div(g, self, other, "floor")


def trunc_float(g, x):
    """Round toward zero: floor for positives, ceil for negatives."""
    zero = g.scalar(0.0, x.dtype)
    neg = g.binary("lt", x, zero, x.dtype, out_dtype=torch.bool)
    return where_(g, neg, g.unary("ceil", x), g.unary("floor", x))


@aten("where")
def where(g, condition, self=None, other=None):
    if self is None:
        raise g.error("where(condition) with one argument has a data-dependent output size")
    dtype = g.out_dtype()
    cond = g.cast(g.as_tensor(condition, torch.bool), torch.bool)
    a = g.as_tensor(self, dtype)
    b = g.as_tensor(other, dtype)
    return where_(g, cond, a, b)


@aten("pow")
def pow_(g, self, exponent):
    dtype = g.out_dtype()
    if not isinstance(exponent, (int, float)) or not hasattr(self, "rank"):
        if dtype == torch.bool:
            raise g.error("pow of torch.bool tensors is not defined")
        if not dtype.is_floating_point:
            return int_pow(g, self, exponent, dtype)
        return g.binary("pow", self, exponent, dtype)
    x = g.cast(self, dtype)
    if exponent == 2 and dtype.is_floating_point:
        return g.unary("sqr", x)
    if exponent in (3, -2) and dtype in (torch.float32, torch.float64):
        # PyTorch's CPU kernel computes these two as products, (x * x) * x and
        # 1 / (x * x), so the products are its numbers (and -0.5 as 1 / sqrt(x), below);
        # tract would run pow(x, 3.0) as a per-element powf, six times slower than the
        # products (GPT-2's NewGELUActivation spends a fifth of the model's run time in it)
        square = g.unary("sqr", x)
        return g.binary("mul", square, x, dtype) if exponent == 3 else g.unary("recip", square)
    if exponent == 1:
        return x
    if exponent == 0.5 and dtype.is_floating_point:
        return g.unary("sqrt", x)
    if exponent == -1 and dtype.is_floating_point:
        return g.unary("recip", x)
    if exponent == -0.5 and dtype in (torch.float32, torch.float64):
        return g.unary("rsqrt", x)  # PyTorch's 1 / sqrt(x), as tract computes it
    if not dtype.is_floating_point:
        if isinstance(exponent, int) and 0 <= exponent <= 64:
            return int_power(g, x, exponent)
        raise g.error(f"integer pow with exponent {exponent} is not supported by tract")
    return g.binary("pow", x, float(exponent), dtype)


def _float_unary(kind):
    def fn(g, self):
        x = g.cast(self, g.out_dtype())
        return g.unary(kind, x)

    fn.__name__ = kind
    return fn


for _aten_name, _kind in {
    "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos",
    "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh",
    "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
    "reciprocal": "recip",
}.items():
    aten(_aten_name)(_float_unary(_kind))


@aten("neg")
def neg(g, self):
    return g.unary("neg", self)


@aten("abs")
def abs_(g, self):
    return g.unary("abs", self)


@aten("sign")
def sign(g, self):
    from t2n.mappings.helpers.elementwise import sign_of

    return sign_of(g, self)


@aten("floor")
def floor(g, self):
    return self if not self.dtype.is_floating_point else g.unary("floor", self)


@aten("ceil")
def ceil(g, self):
    return self if not self.dtype.is_floating_point else g.unary("ceil", self)


@aten("round")
def round_(g, self, decimals=0):
    if not self.dtype.is_floating_point:
        return self
    if decimals:
        k = 10.0 ** decimals
        scaled = g.binary("mul", self, k, self.dtype)
        return g.binary("div", g.unary("tract_core_round_even", scaled), k, self.dtype)
    return g.unary("tract_core_round_even", self)


@aten("trunc", "fix")
def trunc(g, self):
    return self if not self.dtype.is_floating_point else trunc_float(g, self)


@aten("square")
def square(g, self):
    dtype = g.out_dtype()
    x = g.cast(self, dtype)
    if not dtype.is_floating_point:
        return int_power(g, x, 2)
    return g.binary("mul", x, x, dtype)


@aten("clamp", "clip")
def clamp(g, self, min=None, max=None):
    dtype = g.out_dtype()
    x = g.cast(self, dtype)
    if min is not None:
        x = nan_propagating(g, "max", x, min, dtype)
    if max is not None:
        x = nan_propagating(g, "min", x, max, dtype)
    return x


@aten("clamp_min")
def clamp_min(g, self, min):
    return clamp(g, self, min, None)


@aten("clamp_max")
def clamp_max(g, self, max):
    return clamp(g, self, None, max)


@aten("minimum")
def minimum(g, self, other):
    return nan_propagating(g, "min", self, other, g.out_dtype())


@aten("maximum")
def maximum(g, self, other):
    return nan_propagating(g, "max", self, other, g.out_dtype())


@aten("fmin")
def fmin(g, self, other):
    """NaN-ignoring minimum: tract's own ``min``."""
    return g.binary("min", self, other, g.out_dtype())


@aten("fmax")
def fmax(g, self, other):
    return g.binary("max", self, other, g.out_dtype())


def _comparison(kind):
    def fn(g, self, other):
        dtype = _compare_dtype(self, other)
        return g.binary(kind, self, other, dtype, out_dtype=torch.bool)

    fn.__name__ = kind
    return fn


def _compare_dtype(a, b):
    da = getattr(a, "dtype", None)
    db = getattr(b, "dtype", None)
    if da is not None and db is not None:
        return torch.promote_types(da, db)
    d = da or db
    other = b if da is not None else a
    if isinstance(other, float) and not d.is_floating_point:
        return torch.float32
    return d


for _aten_name, _kind in {"eq": "eq", "ne": "ne", "lt": "lt", "gt": "gt", "le": "le",
                          "ge": "ge", "less": "lt", "greater": "gt", "less_equal": "le",
                          "greater_equal": "ge", "not_equal": "ne"}.items():
    aten(_aten_name)(_comparison(_kind))


def _logical(kind):
    def fn(g, self, other):
        a = g.cast(g.as_tensor(self, torch.bool), torch.bool)
        b = g.cast(g.as_tensor(other, torch.bool), torch.bool)
        return g.binary("tract_core_xor" if kind == "xor" else kind, a, b, torch.bool)

    fn.__name__ = f"logical_{kind}"
    return fn


aten("logical_and")(_logical("and"))
aten("logical_or")(_logical("or"))
aten("logical_xor")(_logical("xor"))


@aten("logical_not")
def logical_not(g, self):
    return g.unary("not", g.cast(self, torch.bool))


@aten("__and__", "bitwise_and")
def bitwise_and(g, self, other):
    if g.out_dtype() == torch.bool:
        return g.binary("and", self, other, torch.bool)
    return g.binary("tract_core_bitand", self, other, g.out_dtype())


@aten("__or__", "bitwise_or")
def bitwise_or(g, self, other):
    if g.out_dtype() == torch.bool:
        return g.binary("or", self, other, torch.bool)
    return g.binary("tract_core_bitor", self, other, g.out_dtype())


@aten("__xor__", "bitwise_xor")
def bitwise_xor(g, self, other):
    if g.out_dtype() == torch.bool:
        return g.binary("tract_core_xor", self, other, torch.bool)
    return g.binary("tract_core_bitxor", self, other, g.out_dtype())


@aten("bitwise_not")
def bitwise_not(g, self):
    if self.dtype == torch.bool:
        return g.unary("not", self)
    return g.unary("tract_core_bitnot", self)
