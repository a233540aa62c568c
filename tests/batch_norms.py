"""Test helper: batch norms with the statistics training leaves (random running mean and
variance, random shift), so that pruned channels carry nonzero constants as in a trained
network instead of the fresh module's identity."""

import torch
import torch.nn as nn


def random_batch_norms(model, seed: int | None = None):
    if seed is not None:
        torch.manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            m.bias.data.uniform_(-1, 1)
    return model
