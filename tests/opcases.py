"""Many small op cases in one export: each case's outputs are named after the case, so a
mismatch line in the failure names the op and the case (``div_floor_int_negative_0:
MISMATCH ...``), while the suite pays tract's load cost once per group, not once per case.

    assert_cases({"relu": nn.ReLU(), "floor div": lambda x: x // 2}, (x,))

A case is an ``nn.Module`` or a callable taking the shared example inputs; it may return a
tensor or a tuple of tensors.
"""

from __future__ import annotations

import re

import torch
import torch.nn as nn

from t2n.testing import assert_exports


class Fn(nn.Module):
    """Wraps a function of the inputs as a module."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


class Apply(nn.Module):
    """``module(pre(*inputs))``: a layer case fed a view of the shared inputs (the layer is
    a registered submodule, so its weights are exported as weights)."""

    def __init__(self, module, pre):
        super().__init__()
        self.module = module
        self.pre = pre

    def forward(self, *args):
        return self.module(self.pre(*args))


class Cases(nn.Module):
    def __init__(self, cases: dict):
        super().__init__()
        self.names = list(cases)
        self.mods = nn.ModuleList(c if isinstance(c, nn.Module) else Fn(c)
                                  for c in cases.values())

    def forward(self, *args):
        outs = []
        for m in self.mods:
            r = m(*args)
            outs.extend(r if isinstance(r, (tuple, list)) else [r])
        return tuple(outs)


def _ident(index: int, name: str) -> str:
    """``c3_floor_int_negative``: the case number keeps names unique when two case names
    differ only in punctuation (``f32 ** -1`` / ``f32 ** 1``)."""
    s = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").lower()
    return f"c{index}_{s}"


def _count(r) -> int:
    """Tensors in a (nested) output, as the exporter flattens them."""
    if isinstance(r, (tuple, list)):
        return sum(_count(x) for x in r)
    return 1


def output_names(cases: dict, args) -> list[str]:
    names = []
    with torch.no_grad():
        for i, (name, case) in enumerate(cases.items()):
            n = _count(case(*args))
            names += [f"{_ident(i, name)}_out{k}" for k in range(n)]
    return names


def assert_cases(cases: dict, args: tuple, **kwargs):
    """Export every case in one module and compare each output with torch."""
    model = Cases(cases).eval()
    for m in model.mods:
        m.eval()
    return assert_exports(model, args, output_names=output_names(cases, args), **kwargs)
