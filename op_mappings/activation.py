"""Activations and softmax."""

from __future__ import annotations

from t2n.registry import aten


@aten("relu")
def relu(g, self):
    return g.unary("relu", self)
