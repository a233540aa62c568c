"""Layout ops on complex tensors: reshape, flatten, transpose, slice, cat, ...

A complex tensor's real form has its (re, im) pair on a trailing axis
(``t2n/mappings/helpers/complex.py``), so each layout op is the real table's mapping run on the
real form with its dims mapped to real-form axes and its shapes given the pair axis (``+ [2]``);
the pair axis is never moved, split or merged.
"""

from __future__ import annotations

from t2n.mappings.helpers import complex as C
from t2n.walk.registry import complex_variant
from t2n.walk.tensors import Tensor


def _ax(z: Tensor, d: int, extra: int = 0) -> int:
    return C.axis(C.rank(z) + extra, d)


@complex_variant("view", "reshape", "_unsafe_view", "_reshape_alias")
def view(g, self, shape, *_strides):
    return C.on_real_form(g, "reshape", self, list(shape) + [2])


@complex_variant("flatten")
def flatten(g, self, start_dim=0, end_dim=-1):
    if C.rank(self) == 0:
        return C.on_real_form(g, "reshape", self, [1, 2])
    return C.on_real_form(g, "flatten", self, _ax(self, start_dim), _ax(self, end_dim))


@complex_variant("unflatten")
def unflatten(g, self, dim, sizes):
    return C.on_real_form(g, "unflatten", self, _ax(self, dim), sizes)


@complex_variant("permute")
def permute(g, self, dims):
    return C.on_real_form(g, "permute", self, [_ax(self, d) for d in dims] + [C.rank(self)])


@complex_variant("transpose", "swapaxes", "swapdims")
def transpose(g, self, dim0, dim1):
    return C.on_real_form(g, "transpose", self, _ax(self, dim0), _ax(self, dim1))


@complex_variant("t")
def t(g, self):
    if C.rank(self) < 2:
        return C.on_real_form(g, "contiguous", self)
    return C.on_real_form(g, "transpose", self, 0, 1)


@complex_variant("unsqueeze")
def unsqueeze(g, self, dim):
    return C.on_real_form(g, "unsqueeze", self, _ax(self, dim, 1))


@complex_variant("squeeze")
def squeeze(g, self, dim=None):
    r = C.rank(self)
    dims = [dim] if isinstance(dim, int) else list(range(r)) if dim is None else list(dim)
    axes = [a for a in (C.axis(r, d) for d in dims) if self.shape[a] == 1]
    return C.marked(g.squeeze(self, axes)) if axes else C.on_real_form(g, "contiguous", self)


@complex_variant("contiguous", "alias", "detach", "clone", "lift_fresh", "resolve_neg",
                 "resolve_conj")
def contiguous(g, self, *_):
    return self


@complex_variant("expand")
def expand(g, self, size, implicit=False):
    return C.on_real_form(g, "expand", self, list(size) + [2])


@complex_variant("expand_as")
def expand_as(g, self, other):
    shape = list(other.shape[:-1] if other.complex else other.shape)
    return C.on_real_form(g, "expand", self, shape + [2])


@complex_variant("slice")
def slice_(g, self, dim=0, start=None, end=None, step=1):
    return C.on_real_form(g, "slice", self, _ax(self, dim), start, end, step)


@complex_variant("narrow")
def narrow(g, self, dim, start, length):
    return C.on_real_form(g, "narrow", self, _ax(self, dim), start, length)


@complex_variant("select")
def select(g, self, dim, index):
    return C.on_real_form(g, "select", self, _ax(self, dim), index)


@complex_variant("flip")
def flip(g, self, dims):
    return C.on_real_form(g, "flip", self, [_ax(self, d) for d in dims])


@complex_variant("roll")
def roll(g, self, shifts, dims=()):
    if not dims:
        raise g.error("dims: rolling a complex tensor flattened is not supported")
    return C.on_real_form(g, "roll", self, shifts, [_ax(self, d) for d in dims])


@complex_variant("fft_fftshift", "fft_ifftshift")
def fftshift(g, self, dim=None):
    name = g.node.op.split("::")[-1] if g.node is not None else "fft_fftshift"
    dims = range(C.rank(self)) if dim is None else [dim] if isinstance(dim, int) else dim
    return C.on_real_form(g, name, self, [_ax(self, d) for d in dims])


@complex_variant("repeat")
def repeat(g, self, repeats):
    return C.on_real_form(g, "repeat", self, list(repeats) + [1])


def _all_complex(g, tensors):
    d = C.part_dtype(g)
    return [C.complex_arg(g, x, d) for x in tensors]


@complex_variant("cat", "concat", "concatenate")
def cat(g, tensors, dim=0):
    zs = _all_complex(g, tensors)
    return C.on_real_form(g, "cat", zs, _ax(zs[0], dim))


@complex_variant("stack")
def stack(g, tensors, dim=0):
    zs = _all_complex(g, tensors)
    return C.on_real_form(g, "stack", zs, _ax(zs[0], dim, 1))


@complex_variant("split", "split_with_sizes")
def split(g, self, split_size, dim=0):
    return C.on_real_form(g, "split", self, split_size, _ax(self, dim))


@complex_variant("chunk")
def chunk(g, self, chunks, dim=0):
    return C.on_real_form(g, "chunk", self, chunks, _ax(self, dim))


@complex_variant("unbind")
def unbind(g, self, dim=0):
    return C.on_real_form(g, "unbind", self, _ax(self, dim))


@complex_variant("pad", "constant_pad_nd")
def pad(g, self, pad, mode="constant", value=None):
    """Padding of the PyTorch axes (``pad`` lists them from the last); the pair axis gets
    none. A constant pads both parts with ``value`` real (PyTorch's complex pad value)."""
    if g.node is not None and g.node.op.endswith("constant_pad_nd"):
        mode, value = "constant", (0 if mode == "constant" else mode)
    if isinstance(value, complex):
        if value.imag != 0:
            raise g.error("value: a complex padding value with an imaginary part is not "
                          "supported")
        value = value.real
    if mode == "constant" and value not in (None, 0, 0.0):
        raise g.error("value: only zero padding is supported for complex tensors")
    return C.on_real_form(g, "pad", self, [0, 0] + list(pad), mode, value)


@complex_variant("reflection_pad1d", "reflection_pad2d", "reflection_pad3d",
                 "replication_pad1d", "replication_pad2d", "replication_pad3d")
def pad_border(g, self, padding):
    name = g.node.op.split("::")[-1]
    return C.on_real_form(g, "pad", self, [0, 0] + list(padding),
                          "reflect" if name.startswith("reflection") else "replicate", None)
