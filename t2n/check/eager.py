"""Eager PyTorch outputs of the user's model, the reference every check compares tract with
(export checks, streaming checks, compressed-weight checks)."""

from __future__ import annotations

import numpy as np
import torch

from t2n.capture import model_io
from t2n.capture.model_mode import eval_mode


def torch_outputs(model, args, input_names=None) -> list[np.ndarray]:
    """Eager PyTorch outputs, flattened as the export flattens them (``model_io``), without
    changing the model's mode for good."""
    binding = model_io.bind(model, args, input_names)
    with eval_mode(model), torch.no_grad():
        out = binding.call(model)
    flat = []
    for t in model_io.flatten(out)[1]:
        t = t.detach()
        if t.dtype == torch.bfloat16:
            t = t.float()
        flat.append(t.numpy().copy())
    return flat
