"""Shape and layout ops: reshape, view, flatten, permute, transpose, squeeze, unsqueeze,
expand, cat, stack, split, chunk, contiguous, casts.

Output shapes come from the trace; where a target shape is given by the model it may hold
symbolic sizes (dynamic axes), which are written as tract dim expressions.
"""

from __future__ import annotations

from t2n.walk.registry import aten, stores_integers
from t2n.walk.tensors import known_equal


def _reshape_target(g, self, shape):
    shape = list(shape)
    if sum(1 for d in shape if isinstance(d, int) and d == -1) > 1:
        raise g.error("more than one -1 in the target shape")
    traced = g.out_shape() if g.node is not None else None
    if traced is not None and all(isinstance(d, int) for d in self.shape):
        return list(traced)
    return _symbolic_target(g, self, shape)


def _symbolic_target(g, self, shape):
    """A target shape for an input with symbolic axes: the -1 (if any) must be a whole
    expression of the symbols for every size, else the model only works for some sizes."""
    import sympy

    from t2n.walk.builder import DATA_DEPENDENT_PREFIX

    if any(str(sym).startswith(DATA_DEPENDENT_PREFIX)
           for d in list(self.shape) + list(shape) if isinstance(d, sympy.Basic)
           for sym in d.free_symbols):
        return shape  # a size read from the data: the writer refuses it by name
    numel = sympy.Integer(1)
    for d in self.shape:
        numel = numel * d
    known = sympy.Integer(1)
    for d in shape:
        if not (isinstance(d, int) and d == -1):
            known = known * d
    if -1 in [d for d in shape if isinstance(d, int)]:
        rest = sympy.simplify(numel / known)
        num, den = sympy.fraction(sympy.together(rest))
        if not den.is_number or den != 1:
            raise g.error(f"size: the -1 in {list(shape)} would be {rest}, a whole number only "
                          "for some sizes of the dynamic axes (the model only works for "
                          "those): remove the axis from dynamic_axes or reshape with sizes "
                          "computed from x.size()")
        # the -1 as the expression it stands for: the traced size would drop the symbols
        # (view(-1, 7, 7, C) of [B, 3, 3, 7, 7, C] is [9*B, 7, 7, C], not [9, ...])
        shape[shape.index(-1)] = int(rest) if rest.is_number else rest
    elif not known_equal(numel, known):
        raise g.error(f"size: {list(shape)} holds {known} elements where the input holds "
                      f"{numel}: the model only works for the example sizes")
    return shape


@aten("view", "reshape", "_unsafe_view", "_reshape_alias")
def view(g, self, size, *_):
    return g.reshape(self, _reshape_target(g, self, size))


@aten("view_as", "reshape_as")
def view_as(g, self, other):
    return g.reshape(self, list(other.shape))


@aten("flatten")
def flatten(g, self, start_dim=0, end_dim=-1):
    if self.rank == 0:
        return g.reshape(self, [1])
    s, e = start_dim % self.rank, end_dim % self.rank
    n = 1
    for d in self.shape[s:e + 1]:
        n = n * d
    return g.reshape(self, list(self.shape[:s]) + [n] + list(self.shape[e + 1:]))


@aten("unflatten")
def unflatten(g, self, dim, sizes):
    dim = dim % self.rank
    sizes = list(sizes)
    if -1 in sizes:
        known = 1
        for d in sizes:
            if d != -1:
                known = known * d
        sizes[sizes.index(-1)] = self.shape[dim] // known
    return g.reshape(self, list(self.shape[:dim]) + sizes + list(self.shape[dim + 1:]))


@aten("permute")
def permute(g, self, dims):
    return g.transpose(self, [d % self.rank for d in dims]) if self.rank else self


@aten("transpose", "swapaxes", "swapdims")
def transpose(g, self, dim0, dim1):
    if self.rank < 2:
        return self
    perm = list(range(self.rank))
    a, b = dim0 % self.rank, dim1 % self.rank
    perm[a], perm[b] = perm[b], perm[a]
    return g.transpose(self, perm)


@aten("t", "numpy_T")
def t(g, self):
    return g.transpose(self, list(range(self.rank))[::-1]) if self.rank >= 2 else self


@aten("movedim", "moveaxis")
def movedim(g, self, source, destination):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [s % self.rank for s in src]
    dst = [d % self.rank for d in dst]
    perm = [None] * self.rank
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(i for i in range(self.rank) if i not in src)
    perm = [p if p is not None else next(rest) for p in perm]
    return g.transpose(self, perm)


@aten("unsqueeze")
def unsqueeze(g, self, dim):
    return g.unsqueeze(self, [dim % (self.rank + 1)])


@aten("squeeze")
def squeeze(g, self, dim=None):
    if self.rank == 0:
        return self
    if dim is None:
        axes = [i for i, d in enumerate(self.shape) if isinstance(d, int) and d == 1]
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        axes = [d % self.rank for d in dims]
        axes = [a for a in axes if isinstance(self.shape[a], int) and self.shape[a] == 1]
    return g.squeeze(self, axes)


@aten("contiguous", "alias", "detach", "clone", "lift_fresh", "resolve_conj", "resolve_neg")
def identity(g, self, *_):
    return self


@aten("dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout")
def dropout(g, input, p, train):
    """The identity at inference; dropout forced on (``training=True``) is random."""
    if train and p > 0:
        raise g.error(f"train=True with p={p}: dropout in training mode is random and "
                      "cannot be exported (call it with training=False)")
    return input


@aten("expand")
def expand(g, self, size, implicit=False):
    size = list(size)
    lead = len(size) - self.rank
    target = []
    for i, d in enumerate(size):
        if isinstance(d, int) and d == -1:
            target.append(self.shape[i - lead])
        else:
            target.append(d)
    return g.broadcast_to(self, target)


@aten("expand_as")
def expand_as(g, self, other):
    return g.broadcast_to(self, list(other.shape))


@aten("broadcast_to")
def broadcast_to(g, self, size):
    return expand(g, self, size)


@aten("cat", "concat", "concatenate")
def cat(g, tensors, dim=0):
    dtype = g.out_dtype()
    parts = [g.cast(t, dtype) for t in tensors
             if not (t.rank == 1 and isinstance(t.shape[0], int) and t.shape[0] == 0)]
    if not parts:
        return g.cast(tensors[0], dtype)
    axis = dim % parts[0].rank
    return g.concat(parts, axis)


@aten("stack")
def stack(g, tensors, dim=0):
    dtype = g.out_dtype()
    axis = dim % (tensors[0].rank + 1)
    return g.concat([g.unsqueeze(g.cast(t, dtype), [axis]) for t in tensors], axis)


@aten("split", "split_with_sizes")
def split(g, self, split_size, dim=0):
    axis = dim % self.rank
    n = self.shape[axis]
    if not isinstance(n, int):
        raise g.error(f"dim={dim}: splitting a dynamic axis gives a number of pieces that "
                      "depends on its size, which the exported graph cannot follow")
    if isinstance(split_size, int):
        sizes = [min(split_size, n - s) for s in range(0, n, split_size)] if split_size else [n]
    else:
        sizes = list(split_size)
    outs, start = [], 0
    for s in sizes:
        outs.append(g.slice(self, axis, start, start + s))
        start += s
    return outs


@aten("chunk")
def chunk(g, self, chunks, dim=0):
    axis = dim % self.rank
    n = self.shape[axis]
    if not isinstance(n, int):
        raise g.error(f"dim={dim}: chunking a dynamic axis gives a number of pieces that "
                      "depends on its size, which the exported graph cannot follow")
    size = -(-n // chunks)
    return split(g, self, size, axis)


@aten("unbind")
def unbind(g, self, dim=0):
    axis = dim % self.rank
    n = self.shape[axis]
    if not isinstance(n, int):
        from t2n.walk.tensors import DATA_DEPENDENT_PREFIX

        if any(str(x).startswith(DATA_DEPENDENT_PREFIX) for x in n.free_symbols):
            raise g.error(f"dim={dim}: the number of rows depends on the data (nonzero, "
                          "a boolean mask): a Python loop over them (`for e in "
                          "x.nonzero()`, a mixture-of-experts loop over the experts hit) "
                          "was unrolled by the trace for the example's count, so the graph "
                          "would be wrong for any other; compute every row densely instead "
                          "(`t2n llm` exports the experts of transformers' decoders so)")
        raise g.error(f"dim={dim}: unbinding a dynamic axis gives one output per element")
    return [g.squeeze(g.slice(self, axis, i, i + 1), [axis]) for i in range(self.shape[axis])]


def _cast_to(g, self, dtype):
    """A cast to the node's output dtype as the graph holds it: a bfloat16 result is float32
    there, rounded to bf16 by the walker (t2n.walk.bf16_values) or computed in the export's
    ``dtype=`` (t2n.walk.compute_dtype)."""
    if dtype is None:
        return self
    return g.cast(self, dtype)


@aten("to", "_to_copy", "type_as")
@stores_integers
def to(g, self, *args):
    """Every overload of ``Tensor.to``: the traced output dtype says the target. A large
    int8/uint8 weight cast to float is cast in the graph, not folded (torchao's weight-only
    int8 layers: the archive stores the integers)."""
    return _cast_to(g, self, g.out_dtype())


@aten("type")
def type_(g, self, *args):
    return _cast_to(g, self, g.out_dtype())
