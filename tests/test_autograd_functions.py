"""Custom autograd Functions (``prim::PythonOp`` in a trace) export as the aten ops of their
forward: t2n's capture runs ``forward`` inline in eval/no-grad mode."""

import math

import pytest
import torch

import t2n
from t2n.capture import autograd_inline
from t2n.errors import TraceError, UnsupportedOperatorsError
from t2n.testing import assert_exports


class TanhGelu(torch.autograd.Function):  # BLOOM's GeLUFunction shape
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.sigmoid(1.702 * x)


class ScaledClamp(torch.autograd.Function):  # several inputs, a default, non-tensor args
    @staticmethod
    def forward(ctx, x, scale, lo: float, hi: float = 1.0):
        ctx.lo, ctx.hi = lo, hi
        ctx.mark_non_differentiable(scale)
        return (x * scale).clamp(lo, hi), scale.abs().sum()

    @staticmethod
    def backward(ctx, g, _):
        return g, None, None, None


class RoundSTE(torch.autograd.Function):  # straight-through estimator (quantisation)
    @staticmethod
    def forward(ctx, x, step):
        return torch.round(x / step) * step

    @staticmethod
    def backward(ctx, g):
        return g, None


class InPlaceRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.clamp_(min=0)

    @staticmethod
    def backward(ctx, g):
        return g


class SetupContextSoftplus(torch.autograd.Function):  # functorch-style: forward has no ctx
    @staticmethod
    def forward(x, beta):
        return torch.log1p(torch.exp(beta * x)) / beta

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        return g, None


class Outer(torch.autograd.Function):  # a Function whose forward applies another one
    @staticmethod
    def forward(ctx, x):
        return TanhGelu.apply(x) + RoundSTE.apply(x, 0.25)

    @staticmethod
    def backward(ctx, g):
        return g


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 8))

    def forward(self, x):
        y = TanhGelu.apply(self.lin(x))
        z, s = ScaledClamp.apply(y, self.scale, -0.5)
        z = RoundSTE.apply(z, 0.125) + SetupContextSoftplus.apply(y, 2.0)
        return InPlaceRelu.apply(z.clone()) * s + Outer.apply(x)


def test_functions_export_as_their_forward():
    x = torch.randn(3, 8)
    result = assert_exports(Model(), (x,))
    assert not any("PythonOp" in k for k in result.op_histogram)


def test_dynamic_batch_and_the_model_still_trains():
    model = Model()
    assert_exports(model, (torch.randn(3, 8),), input_names=["x"],
                   dynamic_axes={"x": {0: "B"}}, more_args=[(torch.randn(1, 8),),
                                                            (torch.randn(6, 8),)])
    assert torch.autograd.Function.__dict__["apply"] is autograd_inline._ORIGINAL_APPLY
    x = torch.randn(2, 8, requires_grad=True)  # after the export, apply is autograd's again
    TanhGelu.apply(x).sum().backward()
    assert torch.allclose(x.grad, torch.sigmoid(1.702 * x.detach()))


def test_apply_with_grad_on_inside_the_capture_is_autograds():
    """Only a no-grad capture inlines: with grad on, apply is autograd's own (a Python
    classmethod up to torch 2.13, a C descriptor from 2.14) and backward runs."""
    x = torch.randn(2, 8, requires_grad=True)
    with autograd_inline.inline_autograd_functions():
        assert torch.autograd.Function.__dict__["apply"] is not autograd_inline._ORIGINAL_APPLY
        y = TanhGelu.apply(x)
    assert y.grad_fn is not None
    y.sum().backward()
    assert torch.allclose(x.grad, torch.sigmoid(1.702 * x.detach()))


def test_gelu_function_matches_erf_gelu_closely():
    x = torch.linspace(-4, 4, 64).reshape(8, 8)
    fn = type("M", (torch.nn.Module,), {"forward": lambda self, x: TanhGelu.apply(x)})()
    assert_exports(fn, (x,))
    assert torch.allclose(TanhGelu.apply(x), torch.nn.functional.gelu(x), atol=1e-3)
    assert math.isfinite(float(TanhGelu.apply(x).sum()))


class NumpyForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        import numpy as np

        return torch.from_numpy(np.ascontiguousarray(np.sort(x.numpy(), axis=-1)))

    @staticmethod
    def backward(ctx, g):
        return g


class NeedsBackwardState(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * ctx.saved_variables[0]  # not something a forward can do

    @staticmethod
    def backward(ctx, g):
        return g


def test_untraceable_forward_is_refused_naming_the_function(tmp_path):
    fn = type("M", (torch.nn.Module,), {"forward": lambda self, x: NeedsBackwardState.apply(x)})
    with pytest.raises(TraceError, match=r"NeedsBackwardState \(test_autograd_functions.py:\d+"
                                         r"\): its forward cannot be traced"):
        t2n.export(fn(), (torch.randn(2, 3),), str(tmp_path / "m.nnef"), capture="trace")
    assert not (tmp_path / "m.nnef").exists()
    # torch.export runs the model first: PyTorch's own error, at the forward's line
    with pytest.raises(TraceError, match=r"failed on the example inputs: IndexError.* at "
                                         r"test_autograd_functions.py:\d+"):
        t2n.export(fn(), (torch.randn(2, 3),), str(tmp_path / "m.nnef"), capture="export")
    assert not (tmp_path / "m.nnef").exists()


def test_forward_through_numpy_is_not_silently_frozen(tmp_path):
    """A forward that leaves torch (numpy) gives the tracer a constant: t2n warns that the
    export is specialised to the example, and the graph has no PythonOp. torch.export
    refuses it, naming the line and the other captures."""
    fn = type("M", (torch.nn.Module,), {"forward": lambda self, x: NumpyForward.apply(x) + x})
    with pytest.warns(UserWarning, match="data-dependent|traced path"):
        t2n.export(fn(), (torch.randn(2, 3),), str(tmp_path / "m.nnef"), capture="trace")
    with pytest.raises(TraceError, match=r"numpy.* at test_autograd_functions.py:\d+") as e:
        t2n.export(fn(), (torch.randn(2, 3),), str(tmp_path / "n.nnef"))
    assert any("capture='trace'" in n for n in getattr(e.value, "__notes__", [])), e.value
    assert not (tmp_path / "n.nnef").exists()


def test_already_traced_python_op_is_refused_with_advice(tmp_path):
    fn = type("M", (torch.nn.Module,), {"forward": lambda self, x: TanhGelu.apply(x) * 2})()
    traced = torch.jit.trace(fn, torch.randn(2, 3), check_trace=False)
    with pytest.raises(UnsupportedOperatorsError, match="TanhGelu in an already traced graph"):
        t2n.export(traced, (torch.randn(2, 3),), str(tmp_path / "m.nnef"))
