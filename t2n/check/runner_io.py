"""The files a runner child exchanges with t2n, and the error it reports.

Every engine runner (:mod:`t2n.check.tract_runner`, :mod:`t2n.check.nnef_tools_runner`),
started per call or served by a long-lived child (:mod:`t2n.check.served`), takes input sets
as ``inputsK.npz`` files and answers per set with ``outputsK.npz`` (its outputs) or
``outputsK.npz.err`` (the engine's refusal of those inputs). This module writes the former
and reads the latter, so both forms of both runners read results one way. It imports numpy
only (the parent never imports an engine).
"""

from __future__ import annotations

import os

import numpy as np


class TractRunError(Exception):
    """An engine refused (``crashed=False``: its own message) or crashed on an archive.
    Named after tract, the first engine; the nnef-tools runner raises it too."""

    def __init__(self, message: str, crashed: bool):
        self.crashed = crashed
        super().__init__(message)


def write_sets(folder: str, sets) -> list[tuple[str, str]]:
    """Each input set as ``folder/inputsK.npz``; the ``(IN, OUT)`` path pairs of the request."""
    pairs = []
    for k, inputs in enumerate(sets):
        inp, out = os.path.join(folder, f"inputs{k}.npz"), os.path.join(folder, f"outputs{k}.npz")
        np.savez(inp, *[np.asarray(a) for a in inputs])
        pairs.append((inp, out))
    return pairs


def read_sets(pairs, engine: str, crash: str | None) -> list:
    """Each set's outputs or refusal; the first set with neither is where the child
    crashed (``crash``: its message), and a crash is raised naming that set. A crash
    with no set at all (a load) is raised too: the load did not finish."""
    if crash is not None and not pairs:
        raise TractRunError(crash, crashed=True)
    results = []
    for k, (_, out) in enumerate(pairs):
        if os.path.exists(out):
            with np.load(out, allow_pickle=False) as z:
                results.append([z[f"arr_{i}"] for i in range(len(z.files))])
        elif os.path.exists(out + ".err"):
            with open(out + ".err") as f:
                results.append(TractRunError(f.read().strip(), crashed=False))
        else:
            e = TractRunError(crash or f"{engine} wrote no outputs", crashed=True)
            e.set_index = k
            raise e
    return results


def only(results: list) -> list[np.ndarray]:
    """The outputs of a one-set request, or its refusal raised."""
    if isinstance(results[0], TractRunError):
        raise results[0]
    return results[0]
