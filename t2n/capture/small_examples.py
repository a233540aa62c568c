"""Dynamic axes whose example size is 0 or 1 under ``capture="export"``.

torch.export specialises a size of 0 or 1 whatever the model does (PyTorch's broadcasting
rules treat 1 apart), so a dynamic batch exported from a batch-of-one example, the most
common example there is, would be refused. For those captures t2n turns on PyTorch's
``backed_size_oblivious`` mode: such a size is then reasoned about as "any size", as if the
example were larger.

The price is that a branch of the model's Python on ``size == 1`` is taken as false even
at the example, so the captured program could compute another path than the model does at
that very size. :func:`confirm_on_example` runs the captured program on the example and
compares it with the model's own outputs; a difference refuses the capture, asking for an
example of size 2 or more (the sizes the archive is then checked on are those of the
branch the model takes there).
"""

from __future__ import annotations

import contextlib

import torch

from t2n.errors import UsageError


def small_axes(symbols: dict[int, dict[int, str]], tensors, input_names) -> list[str]:
    """``"x axis 0 (B) is 1"`` for each dynamic axis whose example size is 0 or 1."""
    return [f"{input_names[i]} axis {a} ({s}) is {tensors[i].shape[a]}"
            for i, axes in symbols.items() for a, s in axes.items()
            if i < len(tensors) and tensors[i].shape[a] in (0, 1)]


def size_oblivious(active: bool):
    """The context torch.export runs in: size-oblivious when ``active``."""
    if not active:
        return contextlib.nullcontext()
    import torch.fx.experimental._config as fx_config

    return fx_config.patch(backed_size_oblivious=True)


def confirm_on_example(ep, expected: list, tensors, small: list[str]) -> None:
    """Refuse a size-oblivious capture whose program, run on the example, does not give
    every node the shape its recorded symbolic shape has at the example's sizes (a
    ``squeeze`` of an axis of 1 recorded as a no-op, the other side of a branch on a
    size of 1), or not the model's outputs."""
    with torch.no_grad():  # ``expected``: the model's own flattened outputs on the example
        checker = _ShapesAtTheExample(ep.module())
        got = checker.run(*tensors)
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    if checker.differs is None and len(expected) == len(got) \
            and all(_same(e, g) for e, g in zip(expected, got)):
        return
    where = f" ({checker.differs})" if checker.differs else ""
    raise UsageError("a dynamic axis has size 0 or 1 in the example inputs ("
                     + ", ".join(small) + ") and the model takes another path at that "
                     f"size than at larger ones{where}: give examples of size >= 2 on "
                     "dynamic axes (or use capture='trace')")


class _ShapesAtTheExample(torch.fx.Interpreter):
    """Runs the captured program, noting the first node whose real shape is not its
    recorded shape evaluated at the example's sizes."""

    differs: str | None = None

    def run_node(self, n):
        out = super().run_node(n)
        if self.differs is None:
            for meta, real in zip(_flat(n.meta.get("val")), _flat(out)):
                if isinstance(meta, torch.Tensor) and isinstance(real, torch.Tensor) \
                        and not _fits(meta.shape, real.shape):
                    self.differs = (f"{n.target} gives {list(real.shape)}, recorded as "
                                    f"{list(meta.shape)}")
                    break
        return out


def _flat(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _fits(recorded, real) -> bool:
    if len(recorded) != len(real):
        return False
    for d, n in zip(recorded, real):
        hint = d.node.hint if isinstance(d, torch.SymInt) else d
        if hint is not None and int(hint) != n:
            return False
    return True


def _same(expected, got) -> bool:
    if not (isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor)):
        return expected == got
    if expected.shape != got.shape or expected.dtype != got.dtype:
        return False
    if expected.is_floating_point() or expected.is_complex():
        return torch.allclose(expected, got, rtol=1e-5, atol=1e-6, equal_nan=True)
    return torch.equal(expected, got)
