"""View tracking for in-place writes: which ops return views of their input, and how a write
into a view reaches its base (the inverse of each view op: reshape back, transpose back, or
the ``*_scatter`` mapping of slice/select/diagonal/narrow)."""

from __future__ import annotations

from dataclasses import dataclass

from t2n.walk import registry
from t2n.walk.builder import Graph, Tensor
from t2n.walk.torchscript import _Unsupported

# View ops whose result aliases their input: writes into the result must reach the base.
VIEW_OPS = {"slice", "select", "narrow", "view", "reshape", "_unsafe_view", "transpose",
            "permute", "t", "unsqueeze", "squeeze", "alias", "detach", "diagonal", "expand",
            "as_strided", "unflatten", "flatten", "view_as", "reshape_as", "expand_as",
            "unfold", "movedim", "swapaxes", "swapdims", "numpy_T", "contiguous"}


# Ops returning a list of views of their input (registered when the list is unpacked).
LIST_VIEW_OPS = {"split", "split_with_sizes", "chunk", "unbind", "unsafe_split",
                 "unsafe_chunk", "tensor_split"}


@dataclass
class _View:
    base: object  # the TorchScript value of the root tensor
    chain: list  # [(op name, resolved args after self)]
    version: int


def _scatter_view(g: Graph, name: str, base: Tensor, src: Tensor, args: list) -> Tensor:
    """The inverse of a view op: ``base`` with the viewed part replaced by ``src``."""
    if name in ("alias", "detach", "contiguous"):
        return src
    if name in ("view", "reshape", "_unsafe_view", "unflatten", "flatten", "view_as",
                "reshape_as", "squeeze", "unsqueeze"):
        return g.reshape(src, base.shape)
    if name in ("transpose", "swapaxes", "swapdims"):
        d0, d1 = args[0] % base.rank, args[1] % base.rank
        perm = list(range(base.rank))
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return g.transpose(src, perm)
    if name in ("t", "numpy_T"):
        return g.transpose(src, list(range(base.rank))[::-1])
    if name in ("movedim", "moveaxis"):
        moved = [d % base.rank for d in _as_list(args[0])]
        perm = [None] * base.rank
        for s, d in zip(moved, (d % base.rank for d in _as_list(args[1]))):
            perm[d] = s
        rest = iter(i for i in range(base.rank) if i not in moved)
        perm = [p if p is not None else next(rest) for p in perm]
        return g.transpose(src, [perm.index(i) for i in range(base.rank)])
    if name == "permute":
        perm = [d % base.rank for d in args[0]]
        inv = [0] * len(perm)
        for i, p in enumerate(perm):
            inv[p] = i
        return g.transpose(src, inv)
    if name in ("slice", "select", "diagonal", "narrow"):
        scatter = {"slice": "slice_scatter", "select": "select_scatter",
                   "diagonal": "diagonal_scatter", "narrow": "slice_scatter"}[name]
        fn = registry.lookup(scatter)
        if fn is None:
            raise _Unsupported(f"writing into a {name} view needs aten::{scatter}")
        if name == "narrow":
            dim, start, length = args
            dim = dim % base.rank
            start = start % base.shape[dim] if isinstance(start, int) and start < 0 else start
            return fn(g, base, src, dim, start, start + length, 1)
        return fn(g, base, src, *args)
    raise _Unsupported(f"writing into the result of aten::{name} is not supported")


def _as_list(x) -> list:
    return [x] if isinstance(x, int) else list(x)


def _list_view_chain(name: str, args: list, parts: list) -> list:
    """For each tensor a split/chunk/unbind returns, the view op that gives it from the
    input: ``("select", [dim, k])`` for unbind, ``("slice", [dim, start, end, 1])`` else."""
    at = 1 if name == "unbind" else 2  # position of ``dim`` in the schema
    dim = args[at] if len(args) > at else 0
    axis = dim % args[0].rank
    if name == "unbind":
        return [("select", [axis, k]) for k in range(len(parts))]
    links, start = [], 0
    for p in parts:
        links.append(("slice", [axis, start, start + p.shape[axis], 1]))
        start = start + p.shape[axis]
    return links
