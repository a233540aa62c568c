"""Per layer: does each quantized op of an FX-quantized torchvision model give PyTorch's
integers in tract?

    python -m bench.int8_layers [--model resnet50] [--engine x86] [--scale 1.0] [--differ]

The model is issue #34's recipe on any torchvision classifier (``--model``: the
constructor's name): weights re-drawn as ``bench.weights_bench._redrawn`` does, FX-mode
quantization (``--engine`` x86 or qnnpack, 8 calibration batches of 2x3x224x224,
``bench.weights_bench._int8``). One 1x3x224x224 input (times
``--scale``: above 1 it leaves the calibrated range) runs through PyTorch, which records
every quantized tensor; then each quantized op (conv, linear, add, pools) is exported
alone, fed PyTorch's own input integers, run in tract, and its output integers compared
with PyTorch's. A difference here is the op's lowering (or PyTorch's kernel doing something
else), not one carried from earlier layers. Prints per op: integers that differ and the
largest difference in quantization steps (``--differ``: only the ops that differ).
"""

from __future__ import annotations

import argparse
import sys


class _One:
    """A torch module running one quantized op on float inputs quantized with the op's
    input parameters (exact: the inputs are PyTorch's dequantized integers)."""

    @staticmethod
    def build(fn, qparams, layouts):
        """``layouts``: per input, whether PyTorch held it channels-last in the model (its
        quantized convolutions return channels-last tensors), which picks the kernel of the
        op after it; the model's inputs are plain, so the layout is made inside."""
        import torch

        class One(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fn = fn

            def forward(self, *xs):
                qs = [torch.quantize_per_tensor(a, s, z, d) for a, (s, z, d) in zip(xs, qparams)]
                qs = [q.contiguous(memory_format=torch.channels_last) if last else q
                      for q, last in zip(qs, layouts)]
                return torch.dequantize(self.fn(*qs))

        return One().eval()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50", help="a torchvision constructor's name")
    ap.add_argument("--engine", default="x86", choices=["x86", "qnnpack"])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--differ", action="store_true", help="print only the ops that differ")
    a = ap.parse_args(argv)
    import os
    import tempfile

    import numpy as np
    import torch

    import t2n
    from bench import weights_bench
    from t2n.check.tract_runner import run_in_tract

    model = weights_bench.torchvision_redrawn(a.model)
    q = weights_bench.fx_int8(model, a.engine)
    torch.manual_seed(5)
    x = torch.randn(1, 3, 224, 224) * a.scale
    vals, last = {}, {}

    class Record(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            # a copy: an in-place op after it (torchvision's ReLU6(inplace=True), quantized
            # too) would otherwise change the recorded output of the op before; a quantized
            # clone is contiguous, so the layout is recorded apart
            vals[n.name] = out.clone() if isinstance(out, torch.Tensor) else out
            last[n.name] = isinstance(out, torch.Tensor) and out.dim() == 4 \
                and not out.is_contiguous() \
                and out.is_contiguous(memory_format=torch.channels_last)
            return out

    Record(q).run(x)
    mods = dict(q.named_modules())
    path = os.path.join(tempfile.mkdtemp(prefix="t2n-int8-layers-"), "one.nnef.tar")
    for n in q.graph.nodes:
        out = vals.get(n.name)
        if n.op == "placeholder" or not (isinstance(out, torch.Tensor) and out.is_quantized):
            continue
        args = [v for v in n.args if isinstance(v, torch.fx.Node)
                and isinstance(vals[v.name], torch.Tensor) and vals[v.name].is_quantized]
        ins = [vals[v.name] for v in args]
        if not ins:
            continue
        if n.op == "call_module":
            fn, kind = mods[n.target], type(mods[n.target]).__name__
        elif n.op == "call_function" and "quantized" in str(n.target):
            rest = [vals[v.name] if isinstance(v, torch.fx.Node) else v
                    for v in n.args[len(ins):]]
            fn = (lambda t, r: lambda *qs: t(*qs, *r))(n.target, rest)
            kind = str(n.target)
        else:
            continue
        qparams = [(t.q_scale(), t.q_zero_point(), t.dtype) for t in ins]
        floats = [torch.dequantize(t).contiguous() for t in ins]
        layouts = [last[v.name] for v in args]
        # the trace: the wrapper calls quantized ops (``quantized::add``) that have no fake
        # kernel for torch.export, and holds no module t2n's default capture would see
        t2n.export(_One.build(fn, qparams, layouts), tuple(floats), path, capture="trace")
        got = run_in_tract(path, [f.numpy() for f in floats])[0]
        steps = np.abs(got - torch.dequantize(out).numpy()) / out.q_scale()
        if a.differ and not (steps > 0.5).any():
            continue
        print(f"{n.name:26s} {kind[:24]:24s} differ {int((steps > 0.5).sum()):7d} / "
              f"{out.numel():8d}  max steps {steps.max():.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
