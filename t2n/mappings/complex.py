"""Complex tensors inside the graph: construction, parts and arithmetic.

tract has no complex dtype; a complex tensor is held as its (re, im) pairs on a trailing axis
of 2 (``t2n/mappings/helpers/complex.py``). These mappings are the complex table's
(``registry.complex_variant``): the walker gives them every node that takes or returns a
complex tensor. ``view_as_real``/``view_as_complex`` only change the marker; the arithmetic is
written on the parts with the real ops, as PyTorch's kernels compute it.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers import complex as C
from t2n import dtypes
from t2n.walk.registry import complex_variant
from t2n.walk.tensors import Tensor


@complex_variant("view_as_real")
def view_as_real(g, self):
    """The real form itself, as a plain float tensor (a new handle: the marker is per
    handle, and a constant's handle is its weight's)."""
    return g.op("copy", self)


@complex_variant("view_as_complex")
def view_as_complex(g, self):
    if self.complex or self.rank < 1 or self.shape[-1] != 2:
        raise g.error("self: a float tensor with a last axis of size 2 is required")
    return C.marked(g.op("copy", self))


@complex_variant("complex")
def complex_(g, real, imag):
    return C.make(g, real, imag, C.part_dtype(g))


@complex_variant("polar")
def polar(g, abs, angle):
    d = C.part_dtype(g)
    a, t = g.cast(abs, d), g.cast(angle, d)
    return C.make(g, g.binary("mul", a, g.op("cos", t), d),
                  g.binary("mul", a, g.op("sin", t), d), d)


@complex_variant("real")
def real(g, self):
    return C.real_part(g, self)


@complex_variant("imag")
def imag(g, self):
    return C.parts(g, self)[1]


@complex_variant("conj", "_conj", "conj_physical", "_conj_physical")
def conj(g, self):
    """Conjugation, done at once (``resolve_conj`` is then the identity)."""
    if not self.complex:  # conj of a real tensor is the tensor
        return g.op("copy", self)
    re, im = C.parts(g, self)
    return C.make(g, re, g.op("neg", im), self.dtype)


@complex_variant("neg", "negative")
def neg(g, self):
    return C.marked(g.op("neg", self))


def _operands(g, a, b):
    """Both operands of a binary op as complex handles of the node's parts dtype."""
    d = C.part_dtype(g)
    return C.complex_arg(g, a, d), C.complex_arg(g, b, d), d


def _is_real(v) -> bool:
    return not (isinstance(v, Tensor) and v.complex) and not isinstance(v, complex)


def _times_real(g, z: Tensor, r, d) -> Tensor:
    """``z * r`` for a real tensor or number ``r``: both parts scaled (no cross terms, so a
    real inf/nan stays where PyTorch's real-by-complex product puts it)."""
    return C.marked(g.binary("mul", g.cast(z, d), _pair_broadcast(g, r, d), d))


def _pair_broadcast(g, r, d) -> Tensor:
    """A real operand shaped to broadcast over the (re, im) axis."""
    r = g.as_tensor(r, d)
    return g.unsqueeze(r, [r.rank]) if r.rank else r


@complex_variant("add", "sub", "rsub")
def add(g, self, other, alpha=1):
    """``self + alpha * other`` (``-`` for sub; rsub is ``other - alpha * self``)."""
    name = g.node.op.split("::")[-1] if g.node is not None else "add"
    if name == "rsub":
        self, other = other, self
        if alpha != 1:
            other = mul(g, other, alpha)
    elif alpha != 1:
        other = mul(g, other, alpha)
    a, b, d = _operands(g, self, other)
    return C.marked(g.binary("sub" if name in ("sub", "rsub") else "add", a, b, d))


@complex_variant("mul")
def mul(g, self, other):
    d = C.part_dtype(g)
    if _is_real(other):
        return _times_real(g, C.complex_arg(g, self, d), other, d)
    if _is_real(self):
        return _times_real(g, C.complex_arg(g, other, d), self, d)
    a, b, d = _operands(g, self, other)
    (ar, ai), (br, bi) = C.parts(g, a), C.parts(g, b)
    re = g.binary("sub", g.binary("mul", ar, br, d), g.binary("mul", ai, bi, d), d)
    im = g.binary("add", g.binary("mul", ar, bi, d), g.binary("mul", ai, br, d), d)
    return C.make(g, re, im, d)


@complex_variant("div")
def div(g, self, other, rounding_mode=None):
    if rounding_mode is not None:
        raise g.error("rounding_mode: not defined for complex tensors")
    d = C.part_dtype(g)
    if _is_real(other):
        z = C.complex_arg(g, self, d)
        return C.marked(g.binary("div", z, _pair_broadcast(g, other, d), d))
    a, b, d = _operands(g, self, other)
    (ar, ai), (br, bi) = C.parts(g, a), C.parts(g, b)
    den = g.binary("add", g.binary("mul", br, br, d), g.binary("mul", bi, bi, d), d)
    re = g.binary("add", g.binary("mul", ar, br, d), g.binary("mul", ai, bi, d), d)
    im = g.binary("sub", g.binary("mul", ai, br, d), g.binary("mul", ar, bi, d), d)
    return C.make(g, g.binary("div", re, den, d), g.binary("div", im, den, d), d)


def _abs(g, z: Tensor) -> Tensor:
    sq = g.binary("mul", z, z, z.dtype)
    return g.op("sqrt", g.reduce("sum_reduce", sq, [z.rank - 1], keepdim=False))


@complex_variant("abs", "absolute")
def abs_(g, self):
    return _abs(g, self)


@complex_variant("angle")
def angle(g, self):
    re, im = C.parts(g, self)
    return C.real_mapping(g, "atan2", im, re)


@complex_variant("exp")
def exp(g, self):
    re, im = C.parts(g, self)
    m = g.op("exp", re)
    d = self.dtype
    return C.make(g, g.binary("mul", m, g.op("cos", im), d),
                  g.binary("mul", m, g.op("sin", im), d), d)


@complex_variant("pow")
def pow_(g, self, exponent):
    """``z ** 2`` (and 1) exactly as products; another real exponent ``p`` in polar form,
    ``|z|^p e^{i p angle(z)}`` (PyTorch's ``exp(p log z)``)."""
    if not isinstance(exponent, (int, float)) or isinstance(exponent, bool):
        raise g.error("exponent: only a real Python number is supported for complex tensors")
    if exponent == 1:
        return C.marked(g.op("copy", self))
    if exponent == 2:
        return mul(g, self, self)
    d = self.dtype
    r = g.op("pow", _abs(g, self), g.scalar(float(exponent), d))
    re, im = C.parts(g, self)
    t = g.binary("mul", C.real_mapping(g, "atan2", im, re), g.scalar(float(exponent), d), d)
    return C.make(g, g.binary("mul", r, g.op("cos", t), d),
                  g.binary("mul", r, g.op("sin", t), d), d)


@complex_variant("to", "_to_copy", "type_as")
def to(g, self, *args, **kwargs):
    """Dtype changes into, out of and between complex dtypes: a real tensor gets a zero
    imaginary part; a complex one made real keeps its real part (PyTorch warns and drops
    the imaginary part)."""
    out = g.out_dtype()
    if out.is_complex:
        return C.complex_arg(g, self, C.part_dtype(g))
    if not dtypes.supported(out):
        raise g.error(f"dtype {out} is not supported by tract")
    return g.cast(C.real_part(g, self), out)


@complex_variant("sum", "mean")
def sum_(g, self, dim=None, keepdim=False, dtype=None):
    """Sums and means of the parts over PyTorch dims (the pair axis is never reduced)."""
    name = g.node.op.split("::")[-1] if g.node is not None else "sum"
    r = C.rank(self)
    if isinstance(dim, torch.dtype):  # sum(self, dtype): the overload without dims
        dim = None
    dims = range(r) if dim is None or (isinstance(dim, (list, tuple)) and not dim) else \
        ([dim] if isinstance(dim, int) else dim)
    axes = sorted({C.axis(r, d) for d in dims})
    kind = "sum_reduce" if name == "sum" else "mean_reduce"
    z = g.cast(self, C.part_dtype(g))
    return C.marked(g.reduce(kind, z, axes, keepdim=bool(keepdim)))

