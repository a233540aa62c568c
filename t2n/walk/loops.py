"""Fragments and loops: a body graph run once per step by ``tract_core_scan``.

A mapping that needs a loop (a recurrent layer, later the streaming helpers) asks for a
:class:`Loop` and never writes NNEF text::

    loop = Loop(g, "lstm")
    x_t = loop.scan(xw, axis=0)            # one time step of xw per iteration
    r = loop.full(w_hh)                    # the whole tensor, every iteration
    h = loop.state(h0)                     # the previous value (h0 at the first step)
    h_new = ...                            # body ops: loop.body is a Graph like g
    loop.update(h, h_new)
    ys, h_last = loop.outputs([loop.scan_output(h_new, axis=0), loop.last_output(h_new)])

``loop.body`` is a :class:`Body`, a :class:`~t2n.walk.builder.Graph` whose inputs are the
fragment's parameters: every builder helper works on it. A weight the body creates (a
``.dat`` constant) is stored in the outer graph and passed in as a ``full`` input
automatically, since a fragment cannot declare variables. Names come from the outer graph's
counter, so they are unique in the whole file and the same on every export.

:meth:`Loop.outputs` adds the body to ``g.fragments`` as a :class:`Fragment` (rendered
before the graph by the writer) and emits one ``tract_core_scan`` op whose tensor arguments
are ordinary attributes, so dead-code elimination and weight bookkeeping see them.

tract's semantics (nnef/src/ops/core/scan.rs, probed on 0.23.9): a ``scan`` input of
``step`` k gives the body a slice of ``|k|`` along its axis, walking from the end when k is
negative; a ``full`` output concatenates the body's per-step values along its axis (written
from the end for a negative step); a ``last`` output is the value at the final step; a state
starts at its initializer and takes its result's value after every step. Without
``reset_every_turn = 1`` a state would start where the previous run of the same tract
``State`` left it; that carry is what a streaming export needs (the pulsed model keeps its
recurrent state from chunk to chunk), every other export resets it on every run, as each
call of the PyTorch model starts afresh.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from t2n.walk.builder import Graph, Tensor, _flatten, format_value
from t2n.write.nnef_text import nnef_type
from t2n.errors import ConversionError
from t2n.write.stdlib_defaults import explicit_attrs


@dataclass
class Fragment:
    """A fragment definition: parameters, results and the body ops computing them."""

    name: str
    params: list  # [Tensor] (body inputs)
    results: list  # [Tensor] (body outputs, distinct tensors produced in the body)
    body: Graph

    def render(self) -> list[str]:
        ps = ", ".join(f"{p.name}: tensor<{nnef_type(p.dtype)}>" for p in self.params)
        rs = ", ".join(f"{r.name}: tensor<{nnef_type(r.dtype)}>" for r in self.results)
        lines = [f"fragment {self.name}({ps}) -> ({rs})", "{"]
        for op in self.body.live_ops():
            lines.append("  " + op_line(op) + ";")
        lines.append("}")
        return lines


def render_fragments(g: Graph) -> list[str]:
    """The definitions of the fragments ``g`` uses (directly or from another fragment's
    body), in creation order."""
    frags = {f.name: f for f in g.fragments}
    used: set[str] = set()
    todo = [g]
    while todo:
        graph = todo.pop()
        for op in graph.live_ops():
            # a scan names its body; a composed op (t2n.passes.compose) is its fragment
            name = op.attrs.get("body") if op.kind == "tract_core_scan" else op.kind
            if name in frags and name not in used:
                used.add(name)
                todo.append(frags[name].body)
    out = []
    for f in g.fragments:
        if f.name in used:
            out.extend(f.render())
            out.append("")
    return out


def op_line(op) -> str:
    """One NNEF assignment for an op (the graph's ops and fragment bodies alike)."""
    args = [format_value(a) for a in op.args]
    args += [f"{k} = {format_value(v)}"
             for k, v in explicit_attrs(op.kind, op.attrs).items()]
    call = f"{op.kind}({', '.join(args)})"
    if len(op.outputs) == 1:
        return f"{op.outputs[0].name} = {call}"
    return f"({', '.join(o.name for o in op.outputs)}) = {call}"


class Body(Graph):
    """The graph of a loop body: names from the outer graph, weights stored there."""

    def __init__(self, outer: Graph, loop: "Loop"):
        super().__init__(outer.session)
        self.outer = outer
        self._loop = loop
        self.node = outer.node
        self.symbols = outer.symbols

    def fresh_name(self, hint: str) -> str:
        return self.outer.fresh_name(hint)

    def reserve_name(self, name: str) -> None:
        self.outer.reserve_name(name)

    def add_symbol(self, name: str, minimum: int = 1) -> None:
        self.outer.add_symbol(name, minimum)

    def variable(self, data: torch.Tensor, label: str | None = None) -> Tensor:
        return self._loop.full(self.outer.variable(data, label))


class Loop:
    """One ``tract_core_scan``: declare inputs, build ``body``, then call :meth:`outputs`."""

    def __init__(self, g: Graph, hint: str = "loop"):
        self.g = g
        self.hint = hint
        self.body = Body(g, self)
        self._scan: list = []  # (param, outer, axis, step)
        self._full: list = []  # (param, outer)
        self._full_of: dict[int, Tensor] = {}
        self._state: list = []  # [param, initializer, result or None]
        self._outs: list = []  # (body tensor, 'full'|'last', axis, step)
        self._count = None  # iteration count (dim) from the first scan input
        self._done = False

    # ------------------------------------------------------------------ inputs
    def _param(self, outer: Tensor, shape, hint: str) -> Tensor:
        p = Tensor(self.g.fresh_name(hint), shape, outer.dtype)
        self.body.inputs.append(p)
        return p

    def scan(self, x: Tensor, axis: int, step: int = 1) -> Tensor:
        """A slice of ``|step|`` along ``axis`` per iteration (from the end when negative)."""
        if step == 0:
            raise ValueError("scan step must not be 0")
        x = self._outer_tensor(x)
        axis %= x.rank
        shape = list(x.shape)
        n = shape[axis]
        count = n if abs(step) == 1 else _ceil_div(n, abs(step))
        if self._count is None:
            self._count = count
        shape[axis] = abs(step)
        p = self._param(x, shape, f"{self.hint}_in")
        self._scan.append((p, x, axis, step))
        return p

    def full(self, x: Tensor) -> Tensor:
        """The whole of ``x`` at every iteration (weights, masks, constants)."""
        x = self._outer_tensor(x)
        got = self._full_of.get(id(x))
        if got is not None:
            return got
        p = self._param(x, x.shape, f"{self.hint}_full")
        self._full.append((p, x))
        self._full_of[id(x)] = p
        return p

    def state(self, init: Tensor) -> Tensor:
        """A value carried from one iteration to the next, ``init`` before the first; set
        its next value with :meth:`update`."""
        init = self._outer_tensor(init)
        p = self._param(init, init.shape, f"{self.hint}_state")
        self._state.append([p, init, None])
        return p

    def update(self, state: Tensor, new: Tensor) -> None:
        for s in self._state:
            if s[0] is state:
                if tuple(new.shape) != tuple(state.shape) or new.dtype != state.dtype:
                    raise ConversionError(self.g.node.op if self.g.node else "loop",
                                          f"internal: loop state {list(state.shape)} "
                                          f"{state.dtype} updated with {list(new.shape)} "
                                          f"{new.dtype}")
                s[2] = new
                return
        raise ValueError("update() of a tensor that is not a state of this loop")

    # ------------------------------------------------------------------ outputs
    def scan_output(self, y: Tensor, axis: int, step: int = 1):
        """The per-iteration values of ``y`` stacked along ``axis`` (from the end when
        ``step`` is negative)."""
        return (y, "full", axis % y.rank, step)

    def last_output(self, y: Tensor):
        """The value of ``y`` at the last iteration."""
        return (y, "last", 0, 1)

    def outputs(self, specs: list) -> list[Tensor]:
        """Emit the fragment and the scan; the outer tensors of ``specs``, in order."""
        if self._done:
            raise ValueError("a Loop emits once")
        self._done = True
        if not self._scan:
            raise ValueError("a Loop needs at least one scan input")
        if any(s[2] is None for s in self._state):
            raise ValueError("every loop state needs update()")
        results: list[Tensor] = []
        result_of: dict[int, Tensor] = {}

        def as_result(t: Tensor) -> Tensor:
            r = result_of.get(id(t))
            if r is None:
                if t.literal is not None or any(t is p for p in self.body.inputs) \
                        or t.is_const:
                    r = self.body.op("copy", t)  # a result must be produced in the body
                else:
                    r = t
                result_of[id(t)] = r
                results.append(r)
            return r

        states = [(p, init, as_result(new)) for p, init, new in self._state]
        outs = [(as_result(t), kind, axis, step) for t, kind, axis, step in specs]
        self.body.set_outputs(results, [r.name for r in results])
        self._check_closed()
        root = self.g
        while isinstance(root, Body):
            root = root.outer
        frags = root.fragments
        name = f"t2n_{self.hint}_body_{len(frags) + 1}"
        frags.append(Fragment(name, list(self.body.inputs), results, self.body))
        out_shapes, out_dtypes = [], []
        for r, kind, axis, step in outs:
            shape = list(r.shape)
            if kind == "full":
                shape[axis] = self._count * abs(step) if abs(step) != 1 else self._count
            out_shapes.append(shape)
            out_dtypes.append(r.dtype)
        res = self.g.op(
            "tract_core_scan",
            body=name,
            scan=[(p.name, x, axis, step) for p, x, axis, step in self._scan],
            full=[(p.name, x) for p, x in self._full],
            state=[(p.name, init, r.name) for p, init, r in states],
            output=[(r.name, kind, axis, step) for r, kind, axis, step in outs],
            **({} if root.session.streaming is not None else {"reset_every_turn": 1}),
            outputs=len(outs), out_shapes=out_shapes, out_dtypes=out_dtypes)
        return [res] if len(outs) == 1 else list(res)

    # ------------------------------------------------------------------ checks
    def _outer_tensor(self, x: Tensor) -> Tensor:
        if self._done:
            raise ValueError("the loop was already emitted")
        if any(x is p for p in self.body.inputs):
            raise ValueError("a loop input must be a tensor of the outer graph")
        if x.literal is not None:  # inline literals need no parameter, but keep it uniform
            return self.g.op("copy", x)
        return x

    def _check_closed(self) -> None:
        """Every tensor a body op reads is a parameter, a literal or made in the body: an
        outer tensor used directly would be an unbound name in the fragment."""
        params = {id(p) for p in self.body.inputs}
        ops = self.body.live_ops()
        made = {id(o) for op in ops for o in op.outputs}
        for op in ops:
            for a in _flatten(op.args) + _flatten(list(op.attrs.values())):
                if isinstance(a, Tensor) and a.literal is None and id(a) not in params \
                        and id(a) not in made:
                    raise ConversionError(self.g.node.op if self.g.node else "loop",
                                          f"internal: loop body reads outer tensor {a.name} "
                                          "without declaring it (Loop.full)")



def _ceil_div(n, k):
    if isinstance(n, int):
        return -(-n // k)
    import sympy

    return sympy.ceiling(sympy.sympify(n) / k)


__all__ = ["Body", "Fragment", "Loop", "render_fragments", "op_line"]
