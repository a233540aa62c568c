"""How an export proves its archive: the check strategy, chosen once per export.

After the archive is written beside its path (:mod:`t2n.write.staging`), :func:`verify`
runs the steps :func:`plan` picks from the session, in order:

* the stream (``streaming=``): tract pulses the archive and runs it chunk by chunk (always:
  the pulse gives the output delay), compared with PyTorch on the whole stream when
  ``check=True`` (:mod:`t2n.streaming`);
* the whole-archive check (``check=True``): the target's engine (tract, or nnef-tools'
  interpreter for ``khronos``) on the example and fresh inputs against PyTorch
  (:mod:`t2n.check.input_sets`); with compressed weights against a copy of the model that
  holds the same rounded weights, the error against the original reported beside
  (:mod:`t2n.check.compressed`); with ``dtype=`` against a converted copy;
* otherwise the load proof: the engine loads the archive (:mod:`t2n.check.load`;
  ``verify_load=False`` skips it).

A comparison that fails raises :class:`CheckFailedError` carrying the report; an engine
that refuses the archive names the op (:func:`t2n.check.load.with_op_named`).
"""

from __future__ import annotations

from t2n.errors import CheckFailedError, TractError
from t2n.stopwatch import phase, timed


def plan(session) -> list:
    """The steps that prove this export's archive, in order."""
    steps = []
    if session.streaming is not None:
        steps.append(pulse_stream)
    if session.check.run:
        steps.append(compare_rounded if session.storage else compare_in_engine)
    elif session.streaming is None and session.check.verify_load:
        steps.append(prove_load)
    return steps


def start_engine(session) -> None:
    """Start the engine child that :func:`plan`'s proof will load the archive in, before
    the model is captured: its interpreter and engine import (0.3 s for tract, 2-3 s for
    nnef-tools) then overlap the capture, the walk and the write."""
    if not any(step in (prove_load, compare_in_engine, compare_rounded)
               for step in plan(session)):
        return
    from t2n.check import nnef_tools_runner, tract_runner

    (nnef_tools_runner if session.target.checker == "nnef-tools" else tract_runner).prestart()


def verify(work: str, session, built, result, constant: list[str]) -> None:
    """Run :func:`plan`'s steps on the archive at ``work``, recording into ``result``."""
    for step in plan(session):
        step(work, session, built, result, constant)
    if session.check.run:
        result.extras["checked_with"] = session.target.checker
        if not result.passed:
            raise CheckFailedError(failure_text(result, session.target.checker), report=result)


# ---------------------------------------------------------------------------- the steps
def prove_load(work, session, built, result, constant) -> None:
    from t2n.check.load import prove_loads

    with phase("load"):
        prove_loads(work, built.graph, session.target.checker)


def pulse_stream(work, session, built, result, constant) -> None:
    from t2n.check.eager import torch_outputs
    from t2n.streaming import pulse_and_check

    reference = built.caller
    if session.check.run and session.storage:  # compressed: the stream runs on the rounded
        from t2n.check.compressed import rounded_copy

        reference = rounded_copy(reference, built.graph)
    result.stream = pulse_and_check(
        work, built.graph, session.streaming, model=reference, args=session.args,
        axes=built.stream_axes, out_names=built.output_names, check=session.check.run,
        rtol=session.check.rtol, atol=session.check.atol, run_torch=torch_outputs)


def compare_rounded(work, session, built, result, constant) -> None:
    """Compressed weights: compare on the same rounded weights; report the original's error."""
    from t2n.check.compressed import check_compressed, cost_lines

    c = session.check
    done, cost = check_compressed(work, built.caller, built.graph, session.args,
                                  built.output_names, c.rtol, c.atol,
                                  fresh=fresh_sets(session, session.args, built.inputs,
                                                   built.graph.symbol_maxima),
                                  constant=constant)
    result.checks = done.checks
    result.extras["input_sets"] = [s.to_json() for s in done.sets]
    result.extras["weights_error"] = {x.name: {"max_abs_err": x.max_abs_err,
                                               "max_rel_err": x.max_rel_err} for x in cost}
    result.extras.setdefault("report_lines", []).extend(cost_lines(cost))


def compare_in_engine(work, session, built, result, constant) -> None:
    from t2n.walk import compute_dtype

    c, chosen = session.check, session.compute_dtype
    reference = session.model if chosen is None else \
        compute_dtype.reference_model(session.model, chosen)
    fed = compute_dtype.converted_inputs(session.args, chosen)
    try:
        done = check_archive_sets(
            work, reference, fed, built.output_names, rtol=c.rtol, atol=c.atol,
            target=session.target.name, input_names=built.binding.names,
            atol_for=quantization_steps(session, built.output_names, built.outputs),
            fresh=fresh_sets(session, fed, built.inputs, built.graph.symbol_maxima),
            constant=constant)
    except TractError as e:  # the check loads the archive: name the op it refuses
        from t2n.check.load import with_op_named

        raise with_op_named(e, built.graph) from None
    result.checks = done.checks
    result.extras["input_sets"] = [s.to_json() for s in done.sets]


# ---------------------------------------------------------------------------- shared
@timed("check")
def check_archive_sets(path: str, model, args, out_names: list[str], *, rtol: float, atol: float,
                       target: str = "tract", input_names=None, atol_for=None, fresh=None,
                       constant=(), more=()):
    """``model`` (a module or a TorchScript path) against the archive at ``path`` run by
    ``target``'s engine, on the example ``args`` ("example"; None: none), the named input
    sets ``more`` ([(name, args)]) and the fresh sets of ``fresh``
    (:mod:`t2n.check.fresh_inputs`), the engine loading the archive once: a
    :class:`t2n.check.input_sets.SetsCheck`."""
    from t2n.capture.trace import load_model
    from t2n.check import nnef_tools_runner, tract_runner
    from t2n.check.input_sets import InputSet, check_sets
    from t2n.targets import get_target

    engine = get_target(target).checker
    run = nnef_tools_runner.run_sets_in_nnef_tools if engine == "nnef-tools" \
        else tract_runner.run_sets_in_tract
    sets = ([InputSet("example", args)] if args is not None else []) + \
        [InputSet(n, a) for n, a in more]
    return check_sets(path, load_model(model), sets, out_names, run_sets=run, engine=engine,
                      rtol=rtol, atol=atol, input_names=input_names, atol_for=atol_for,
                      fresh=fresh, constant=tuple(constant))


def fresh_sets(session, args, inputs, most=None):
    """The check's fresh input sets (:mod:`t2n.check.fresh_inputs`), unless
    ``fresh_inputs=False``; ``most``: the symbols' most sizes."""
    from t2n.check.fresh_inputs import FreshInputs

    return FreshInputs.of_export(args, inputs, session.check, most) \
        if session.check.fresh_inputs else None


def quantization_steps(session, out_names, handles) -> dict[str, float]:
    """{output name: its quantization step} for outputs dequantized from int8 tensors
    (t2n/mappings/quantized.py): tract and PyTorch requantize with their own rounding, so
    such an output may differ by one step, which the check accepts."""
    steps = session.quantized.steps
    return {n: steps[id(h)] * (1 + 1e-5) for n, h in zip(out_names, handles) if id(h) in steps}


def failure_text(result, checker: str) -> str:
    bad = [c for c in result.checks + (result.stream.checks if result.stream else [])
           if not c.ok]
    from t2n.result import compared_sets

    compared = compared_sets(result.extras.get("input_sets"))
    return f"{checker}'s outputs differ from PyTorch's:\n" + "\n".join(
        "  " + c.line() for c in bad) + (f"\n  input sets compared: {', '.join(compared)}"
                                         if compared else "")
