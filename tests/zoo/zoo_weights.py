"""Random weights that make a zoo check meaningful.

Constructors initialise many parameters so that a block is close to the identity or silent:
zero-initialised classifier heads, layer scales of 1e-6, zero-initialised last BN gamma of
each residual branch, zero biases, position embeddings with std 0.02. A model exported with
those weights can hide a wrong lowering of the very block that is switched off. This module
re-draws every parameter so that every block contributes to the output, and then calibrates
batch-norm running statistics on random data so that activations stay O(1) through deep
networks (an untrained stack of conv + BN with made-up statistics drifts to zero or infinity,
and then atol decides the check, not the graph).

Used by both halves of the zoo (vision and transformers models).
"""

from __future__ import annotations

import torch

_NORM_TYPES = (torch.nn.modules.batchnorm._NormBase, torch.nn.LayerNorm, torch.nn.GroupNorm,
               torch.nn.LocalResponseNorm)


def _is_norm(module) -> bool:
    return isinstance(module, _NORM_TYPES) or "norm" in type(module).__name__.lower()


def _fan_in(p: torch.Tensor) -> int:
    n = 1
    for d in p.shape[1:]:
        n *= d
    return max(n, 1)


def _is_constant_init(p: torch.Tensor) -> bool:
    """All values equal or all tiny: a layer scale, a zeroed head, a zero token."""
    if p.numel() == 0:
        return False
    flat = p.detach().reshape(-1).float()
    return bool((flat == flat[0]).all() or flat.abs().max() <= 1e-4)


@torch.no_grad()
def redraw(model: torch.nn.Module, seed: int = 0, calibrate_input=None,
           passes: int = 1) -> torch.nn.Module:
    """Re-draw the parameters of ``model`` in place (and return it, in eval mode).

    * norm layers: scale ~ U(0.5, 1.5), shift ~ N(0, 0.1);
    * weights of convolutions / linear maps (dim >= 2): N(0, 1/fan_in), so each layer keeps
      the scale of its input;
    * other parameters initialised to a constant or to almost zero (layer scales, gammas,
      temperatures, cls/distillation tokens): ~ U(0.5, 1.5) when named like a scale,
      N(0, 0.5) when named like a bias/token/embedding;
    * other parameters (position embeddings, relative-position tables, biases): N(0, 0.5)
      for tables, N(0, 0.1) for 1-d biases;
    * batch-norm running statistics: measured on ``calibrate_input`` (a callable giving
      example inputs, or a tuple of them) in training mode with cumulative averaging, so
      that every BN really normalises.
    """
    gen = torch.Generator().manual_seed(seed)

    def normal(p, std):
        p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype) * std)

    def uniform(p, lo, hi):
        p.copy_((torch.rand(p.shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo)
                .to(p.dtype))

    for mname, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if not p.dtype.is_floating_point:
                continue
            lname = pname.lower()
            if _is_norm(module):
                if "bias" in lname or "beta" in lname:
                    normal(p, 0.1)
                else:
                    uniform(p, 0.5, 1.5)
            elif p.dim() >= 2 and "weight" in lname:
                normal(p, _fan_in(p) ** -0.5)
            elif _is_constant_init(p) and not any(k in lname for k in (
                    "bias", "token", "embed", "pos", "table", "beta")):
                uniform(p, 0.5, 1.5)  # layer scales, gammas, temperatures, alphas
            elif p.dim() <= 1:
                normal(p, 0.1)
            else:
                normal(p, 0.5)
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
           and m.track_running_stats]
    if bns:
        if calibrate_input is None:
            raise ValueError("the model has batch norms: give calibrate_input")
        saved = [m.momentum for m in bns]
        for m in bns:
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the calibration passes
        model.train(True)
        try:
            for _ in range(passes):
                args = calibrate_input() if callable(calibrate_input) else calibrate_input
                model(*args)
        finally:
            for m, mom in zip(bns, saved):
                m.momentum = mom
        for m in bns:  # keep variances away from zero (constant channels)
            m.running_var.clamp_(min=1e-2)
    return model.eval()
