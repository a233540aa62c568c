"""Shared test set-up: deterministic seeds; tract always runs in a child process
(``t2n.testing.assert_exports``), so a tract abort fails one test only."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
