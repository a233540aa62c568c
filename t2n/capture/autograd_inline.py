"""Custom autograd Functions traced as the aten ops of their ``forward``.

``torch.jit.trace`` records a call to ``torch.autograd.Function.apply`` as one opaque
``prim::PythonOp`` node (BLOOM's GeLU, fused activations, straight-through estimators,
quantisation helpers), which no NNEF op can run. An export computes values only: capture
runs in eval mode without grad, where ``apply`` computes exactly what ``forward`` computes
and only adds the bookkeeping ``backward`` needs. So, while t2n traces, ``apply`` calls
``forward`` directly and the tracer records its aten ops, as torch.onnx does for Functions
without a symbolic.

``forward`` gets a stand-in ``ctx`` that accepts what forwards do with it
(``save_for_backward``, ``mark_dirty``, ``mark_non_differentiable``,
``set_materialize_grads``, attributes for backward); Functions written with
``setup_context`` get no ctx, as with ``apply``. A forward that fails when traced inline is
refused, naming the Function and its error, instead of being exported as something else.
"""

from __future__ import annotations

import contextlib
import inspect

import torch
from torch.autograd import function as _function

from t2n.errors import TraceError


class InlineContext:
    """What ``forward`` may use of ``ctx`` when no backward will ever run."""

    def __init__(self, n_inputs: int):
        self.needs_input_grad = (False,) * n_inputs
        self.materialize_grads = True
        self.saved_tensors = ()
        self.to_save = ()

    def save_for_backward(self, *tensors):
        self.to_save = tensors
        self.saved_tensors = tensors

    def save_for_forward(self, *tensors):
        pass

    def mark_dirty(self, *tensors):
        pass

    def mark_non_differentiable(self, *tensors):
        pass

    def set_materialize_grads(self, value: bool):
        self.materialize_grads = value


def _where(cls) -> str:
    try:
        path = inspect.getsourcefile(cls.forward) or "?"
        line = inspect.getsourcelines(cls.forward)[1]
        return f"{path.rsplit('/', 1)[-1]}:{line}"
    except (OSError, TypeError):
        return "?"


def _inline_apply(cls, *args, **kwargs):
    if torch.is_grad_enabled():  # only t2n's own no-grad capture inlines
        # bound through the descriptor protocol: a Python classmethod up to torch 2.13, a
        # C classmethod_descriptor (no __func__) from 2.14
        return _ORIGINAL_APPLY.__get__(None, cls)(*args, **kwargs)
    try:
        if _function._is_setup_context_defined(cls.setup_context):
            return cls.forward(*args, **kwargs)
        return cls.forward(InlineContext(len(args)), *args, **kwargs)
    except TraceError:
        raise
    except Exception as e:
        raise TraceError(f"custom autograd Function {cls.__qualname__} ({_where(cls)}): its "
                         f"forward cannot be traced into aten ops: {type(e).__name__}: "
                         f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}") from e


_ORIGINAL_APPLY = _function.Function.__dict__["apply"]


@contextlib.contextmanager
def inline_autograd_functions():
    """While active (and grad is off), ``Function.apply`` runs ``forward`` inline."""
    if _function.Function.__dict__.get("apply") is not _ORIGINAL_APPLY:
        yield  # already inlining (nested capture)
        return
    _function.Function.apply = classmethod(_inline_apply)
    try:
        yield
    finally:
        _function.Function.apply = _ORIGINAL_APPLY
