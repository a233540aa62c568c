"""Pulse an NNEF archive in tract and run it chunk by chunk, in a separate process.

tract's ``Pulse`` transform turns a model with a symbolic streaming axis into one that
consumes fixed-size chunks and keeps its own state (convolution buffers, recurrent states).
Like :mod:`t2n.check.tract_runner`, this module runs in a child (tract aborts the process on a
Rust panic) and imports neither torch nor t2n's engine.

``python -m t2n.check.pulse_runner REQUEST.json RESULT.json`` reads a request::

    {"archive": path, "symbol": "S", "pulse": 8,
     "inputs": path.npz or null, "stream_axes": [2, -1, ...] or null}

pulses the archive and writes the pulsed model's facts (``delays``, ``input_axes``,
``output_axes``, input and output pulse shapes). With ``inputs``, it also feeds them chunk by
chunk through ONE state of the pulsed model: the streamed inputs (those whose
``stream_axes`` entry is >= 0) are cut into chunks of ``pulse`` steps, zero-padded to whole
chunks, followed by zero chunks until every output has produced its ``delay`` steps plus one
step per streamed output step of the data; the other inputs are passed whole to every
chunk. The outputs of the chunks are concatenated along each output's streaming axis, and
the first ``delay`` steps dropped, into ``outputs.npz`` next to RESULT.json.

Exit codes: 0 result written; 3 tract refused to pulse, load or run (``error`` and
``stage`` in RESULT.json); anything else is a crash.
"""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np

REFUSED = 3


def _message(e: Exception) -> str:
    """tract's error chain without the backtrace: one cause per line."""
    text = str(e).split("\n\nStack backtrace")[0]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return "\n".join(ln for ln in lines if ln not in ("Caused by:",))


def _facts(model, n_in: int, n_out: int) -> dict:
    def prop(name):
        return [int(v) for v in np.asarray(model.property(name).to_numpy()).reshape(-1)]

    return {"delays": prop("pulse.delay"), "input_axes": prop("pulse.input_axes"),
            "output_axes": prop("pulse.output_axes"),
            "input_facts": [str(model.input_fact(i)) for i in range(n_in)],
            "output_facts": [str(model.output_fact(i)) for i in range(n_out)]}


def pulse_size(fact: str, axis: int) -> int:
    """The steps per chunk on ``axis`` of a pulsed fact (``B,4,8,f32`` -> 8 on axis 2): the
    streaming axis is concrete, other axes may stay symbolic."""
    return int(fact.split(",")[axis])


def _run(req: dict, facts: dict, runnable, out_dir: str) -> dict:
    pulse = int(req["pulse"])
    with np.load(req["inputs"], allow_pickle=False) as z:
        inputs = [z[f"arr_{i}"] for i in range(len(z.files))]
    axes = req["stream_axes"]
    lengths = {x.shape[a] for x, a in zip(inputs, axes) if a >= 0}
    if len(lengths) != 1:
        raise ValueError(f"streamed inputs must share one length, got {sorted(lengths)}")
    length = lengths.pop()
    out_pulses = [pulse_size(f, a) for f, a in zip(facts["output_facts"],
                                                   facts["output_axes"])]
    data_chunks = max(1, math.ceil(length / pulse))
    # enough zero chunks after the data for every output to emit its delayed steps
    flush = max(math.ceil(d / p) for d, p in zip(facts["delays"], out_pulses))
    n_chunks = data_chunks + flush
    padded = []
    for x, a in zip(inputs, axes):
        if a < 0:
            padded.append(x)
            continue
        pad = [(0, 0)] * x.ndim
        pad[a] = (0, n_chunks * pulse - x.shape[a])
        padded.append(np.pad(x, pad))
    state = runnable.spawn_state()
    pieces: list[list[np.ndarray]] = [[] for _ in out_pulses]
    for c in range(n_chunks):
        chunk = []
        for x, a in zip(padded, axes):
            if a < 0:
                chunk.append(x)
            else:
                index = [slice(None)] * x.ndim
                index[a] = slice(c * pulse, (c + 1) * pulse)
                chunk.append(np.ascontiguousarray(x[tuple(index)]))
        outs = state.run(chunk)
        for i, o in enumerate(outs):
            pieces[i].append(o.to_numpy())
    results = []
    for i, (parts, a, d) in enumerate(zip(pieces, facts["output_axes"], facts["delays"])):
        y = np.concatenate(parts, axis=a)
        index = [slice(None)] * y.ndim
        index[a] = slice(d, None)
        results.append(y[tuple(index)])
    np.savez(os.path.join(out_dir, "outputs.npz"), *results)
    return {"chunks": n_chunks, "data_chunks": data_chunks, "stream_length": n_chunks * pulse}


def _main(request_path: str, result_path: str) -> int:
    import tract

    with open(request_path) as f:
        req = json.load(f)
    result: dict = {}
    stage = "load"
    code = 0
    try:
        model = tract.nnef().with_pulse().load(req["archive"])
        n_in, n_out = model.input_count(), model.output_count()
        stage = "pulse"
        model.transform(tract.Pulse(str(req["pulse"]), symbol=req["symbol"]))
        result.update(_facts(model, n_in, n_out))
        stage = "optimise"
        runnable = model.into_runnable()
        if req.get("inputs") and min(result["output_axes"]) >= 0:
            stage = "run"
            result.update(_run(req, result, runnable, os.path.dirname(result_path)))
    except Exception as e:  # tract.TractError and friends: tract's refusal, reported
        result.update(error=_message(e), stage=stage)
        code = REFUSED
    with open(result_path, "w") as f:
        json.dump(result, f)
    return code


if __name__ == "__main__":
    sys.exit(_main(*sys.argv[1:]))
