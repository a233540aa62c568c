"""Which consumer reads each weight, and in which layout: what a weight format needs to know.

A block-quantized weight (Q4_0) is only usable by tract where the consumer reads it as
blocks along the reduced axis: a ``matmul`` operand (reduced axis: the last one, or the
second-to-last for a non-transposed right operand), a ``conv`` filter (rows of
``C_in/groups * kernel`` values) or the table of a row gather
(``tract_core_gather`` on axis 0, which then needs an explicit output ``datum_type``).
:class:`Uses` indexes the live ops of a built graph by the variables they read (a
variable's same-bytes aliases, declared as reshapes of it, count as the variable), answers
those questions, and makes the consumer adjustments a stored layout needs.
"""

from __future__ import annotations

import torch

from t2n.walk.builder import Graph, Tensor, Variable
from t2n.write.writer import same_bytes_aliases


class Uses:
    def __init__(self, g: Graph):
        self.g = g
        ops = g.live_ops()
        used = g.used_tensors(ops)
        self._aliases = same_bytes_aliases(g, used)
        self._labels = g.final_labels(used)
        self._vars = [v for v in g.variables
                      if id(v.tensor) in used and id(v.tensor) not in self._aliases]
        self._by_id = {id(v.tensor): v for v in self._vars}
        self._members: dict[int, list[Variable]] = {id(v.tensor): [v] for v in self._vars}
        for v in g.variables:
            base = self._aliases.get(id(v.tensor))
            if base is not None:
                self._members[id(base.tensor)].append(v)
        self._consumers: dict[int, list] = {}
        for op in ops:
            for pos, a in enumerate(op.args):
                for t in (a if isinstance(a, (list, tuple)) else [a]):
                    if isinstance(t, Tensor):
                        self._consumers.setdefault(id(t), []).append((op, pos))
            for v in op.attrs.values():
                if isinstance(v, Tensor):
                    self._consumers.setdefault(id(v), []).append((op, "attr"))
        self._outputs = {id(t) for t in g.outputs}

    def variables(self) -> list[Variable]:
        """The variables written to the archive (aliases excluded), in emission order."""
        return list(self._vars)

    def variable(self, vid: int) -> Variable:
        return self._by_id[vid]

    def label(self, v: Variable) -> str:
        return self._labels[id(v.tensor)]

    def _uses(self, v: Variable):
        for m in self._members[id(v.tensor)]:
            if id(m.tensor) in self._outputs:
                yield m, None, "output"
            for op, pos in self._consumers.get(id(m.tensor), []):
                yield m, op, pos

    def _scaled_after(self, conv) -> bool:
        """Whether tract's conv declutter will multiply the filter by what follows: a
        groups=1 convolution whose only consumer is a mul or div (batch norm in eval)."""
        if int(conv.attrs.get("groups", 1)) != 1:
            return False
        after = self._consumers.get(id(conv.outputs[0]), [])
        return len(after) == 1 and after[0][0].kind in ("mul", "div")

    def describe(self, v: Variable) -> str:
        kinds = sorted({"gather" if op.kind == "tract_core_gather" else op.kind
                        for _, op, _ in self._uses(v) if op is not None})
        return "+".join(kinds)

    def reduced_axis(self, v: Variable) -> tuple[int | str | None, str | None]:
        """The axis of ``v`` every consumer reduces over in block form (``CONV_ROWS`` for a
        convolution filter: all trailing axes), or (None, reason)."""
        axes = set()
        n_uses = 0
        for m, op, pos in self._uses(v):
            n_uses += 1
            if op is None:
                return None, "a graph output"
            neg, why = _block_axis(op, pos, m)
            if neg is None:
                return None, why
            if neg == CONV_ROWS and self._scaled_after(op):
                return None, ("a per-channel scale follows it, which tract folds into the "
                              "filter (not possible on Q4_0 blocks in tract 0.23)")
            axes.add(neg)
        if not n_uses:
            return None, "not used"
        if len(axes) != 1:
            return None, "read along different axes by its consumers"
        neg = axes.pop()
        if neg == CONV_ROWS:
            return CONV_ROWS, None
        if neg == -2 and len(self._members[id(v.tensor)]) > 1:
            return None, "read transposed through a reshape"
        return v.data.dim() + neg, None

    def adapt_consumers_to_q4(self, v: Variable, transposed: bool) -> None:
        """Flip the transpose flag of the matmuls reading ``v`` when it is stored transposed,
        and give gathers from it the output type tract needs for block-quantized tables."""
        for m, op, pos in self._uses(v):
            if op.kind == "matmul" and transposed:
                flag = "transposeA" if pos == 0 else "transposeB"
                op.attrs[flag] = not bool(op.attrs.get(flag, False))
            elif op.kind == "tract_core_gather":
                op.attrs["datum_type"] = "f32"

    def conflicting(self, chosen: dict) -> list[int]:
        """Chosen variables whose bytes overlap another variable stored differently (or a
        second block-quantized one): rounding their shared model tensor would then give the
        consumers of the other one values tract does not use."""
        groups: dict[int, list[Variable]] = {}
        for v in self._vars:
            if v.data.numel():
                groups.setdefault(v.data.untyped_storage().data_ptr(), []).append(v)
        out = []
        for vs in groups.values():
            if len(vs) < 2 or not any(id(v.tensor) in chosen for v in vs):
                continue
            bad = False
            for i, a in enumerate(vs):
                for b in vs[i + 1:]:
                    if not _overlap(a.data, b.data):
                        continue
                    ka, kb = _key(chosen.get(id(a.tensor))), _key(chosen.get(id(b.tensor)))
                    if ka != kb or (ka is not None and ka[0] == "q4_0"):
                        bad = True
            if bad:
                out += [id(v.tensor) for v in vs if id(v.tensor) in chosen]
        return out


# the "axis" of a convolution filter: its trailing axes flattened (rows of C_in/g * k...)
CONV_ROWS = "rows"


def _key(st):
    return None if st is None else (st.kind, getattr(st, "transposed", False))


def _block_axis(op, pos, m: Variable) -> tuple[int | None, str | None]:
    """The reduced axis (negative) of operand ``pos`` of ``op`` in block form, or a reason."""
    rank = m.data.dim()
    if op.kind == "matmul" and pos in (0, 1):
        other = op.args[1 - pos]
        if not isinstance(other, Tensor) or other.dtype != torch.float32:
            return None, "multiplied with a non-float32 operand"
        if any(int(d) != 1 for d in m.data.shape[:-2]):
            return None, "a batched matrix (leading axes other than 1)"
        if pos == 0:
            return (-2 if op.attrs.get("transposeA") else -1), None
        return (-1 if op.attrs.get("transposeB") else -2), None
    if op.kind == "linear" and pos == 1:
        # NNEF linear(x, W, b) is matmul(x, W, transposeB = true) + b: reduced along W's rows
        other = op.args[0]
        if not isinstance(other, Tensor) or other.dtype != torch.float32:
            return None, "multiplied with a non-float32 operand"
        if any(int(d) != 1 for d in m.data.shape[:-2]):
            return None, "a batched matrix (leading axes other than 1)"
        return -1, None
    if op.kind == "conv" and pos == 1:
        # tract's block-quantized conv kernel reads [C_out, C_in/g * k...] rows: blocks
        # along all the trailing axes (verified 1x1, 3x3, strided, dilated, grouped)
        other = op.args[0]
        if not isinstance(other, Tensor) or other.dtype != torch.float32:
            return None, "convolved with a non-float32 input"
        return CONV_ROWS, None
    if op.kind == "tract_core_gather" and pos == 0:
        if rank != 2 or int(op.attrs.get("axis", 0)) != 0:
            return None, "gathered along an axis other than the rows of a matrix"
        return -1, None
    return None, f"read by {op.kind}, which needs plain values"


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    def span(t):
        start = t.storage_offset() * t.element_size()
        extent = sum((s - 1) * st for s, st in zip(t.shape, t.stride())) + 1
        return start, start + extent * t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1
