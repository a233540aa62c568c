"""Test helper for channel compaction: export a model without and with ``compact=True``,
run both in tract (in a child process) and compare: compacted == uncompacted == torch."""

import os

import numpy as np
import torch

import t2n
from t2n.check import tract_runner


def layers(result):
    return {s.name: s for s in result.extras["layers"]}


def differential(tmp_path, model, x):
    """(uncompacted result, compacted result), both run in tract and compared."""
    paths = [str(tmp_path / "full.nnef.tar"), str(tmp_path / "small.nnef.tar")]
    full = t2n.export(model, (x,), paths[0], quiet=True)
    small = t2n.export(model, (x,), paths[1], quiet=True, compact=True)
    with torch.no_grad():
        expected = model(x).numpy()
    a, b = (tract_runner.run_in_tract(p, [x.numpy()])[0] for p in paths)
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b, expected, rtol=1e-4, atol=1e-4)
    assert os.path.getsize(paths[1]) == small.archive_bytes
    return full, small
