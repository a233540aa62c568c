"""View tracking for in-place writes: which ops return views of their input, and how a write
into a view reaches its base (the inverse of each view op: reshape back, transpose back, or
the ``*_scatter`` mapping of slice/select/diagonal/narrow).

:class:`ViewWrites` does it for the TorchScript reader (a ``torch.export`` program is
functionalised: it has no in-place ops). Values are TorchScript values; a view records its
base value, the chain of view ops from the base, and the base's version it was derived from,
so that reading a view after a write into its base derives it again."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from t2n.walk import bf16_values, registry
from t2n.walk.builder import Graph, Tensor
from t2n.walk.core import OpCall
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


class ViewWrites:
    """The TorchScript reader's views and in-place writes (its ``env``, ``views``,
    ``list_views`` and ``version`` tables), and the walker core's hooks that use them."""

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

    # ------------------------------------------------------------------ the core's hooks
    def _in_place(self, call: OpCall, fn):
        if registry.is_inplace(call.name):
            return self._inplace(call.node, call.name, fn, call.args)
        return None

    def _after_fold(self, call: OpCall, results: list) -> None:
        node, name, inputs = call.node, call.name, call.values
        if name in ("detach", "alias"):  # weight.detach() then an in-place op on it
            # (embedding max_norm renorms the table): the write must reach the weight
            self._register_view_of(node.inputsAt(0), node.output(), (name, []))
        elif name in VIEW_OPS and isinstance(inputs[0], torch.Tensor):
            # a view of a folded tensor (z = zeros(...); z[:, 0] = x): a write of a
            # run-time value into it must reach z (RWKV's per-layer states)
            self._register_view_of(node.inputsAt(0), node.output(), (name, inputs[1:]))

    def _after_mapping(self, call: OpCall, results: list) -> None:
        node, name, args = call.node, call.name, call.args
        if name in VIEW_OPS and isinstance(args[0], Tensor):
            self._register_view(node, name, args)
        if name in LIST_VIEW_OPS and isinstance(args[0], Tensor) and \
                isinstance(results[0], list):
            self.list_views[node.output()] = (node.inputsAt(0),
                                              _list_view_chain(name, args, results[0]))

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
