"""Every export proves that its engine loads the archive before the archive is accepted.

A converter that writes an archive tract refuses at load ships nothing usable, and the user
finds out far from the export (in the application that loads it). So after writing, still
in the staging folder (:mod:`t2n.write.staging`), the archive is loaded as a user would load it:
tract parses it, runs its rewrites and optimises it into a runnable plan (a child process,
since tract can abort); a Khronos archive is parsed and shape-checked by the Khronos parser
(``nnef.load_graph``, also in a child). A refusal raises :class:`LoadRefusedError`, naming
the op and the user's source line that emitted the node the engine names, when its message
names one; the archive never reaches the user's path.

``check=True`` (and a streaming export, which pulses the archive) load it anyway: the load
is not repeated then. ``verify_load=False`` (CLI ``--no-load-check``) skips it.
"""

from __future__ import annotations

import re

from t2n.errors import TractError

OPTION = "verify_load"


class LoadRefusedError(TractError):
    """The engine the archive targets refused to load it: the export is refused (exit 2,
    like any model t2n cannot export). ``op``/``where``: the aten op and source line of the
    node the engine's message names, when found."""

    exit_code = 2

    def __init__(self, message: str, op: str | None = None, where: str | None = None,
                 crashed: bool = False):
        self.op = op
        self.where = where
        super().__init__(message, crashed=crashed)


def prove_loads(path: str, g, engine: str) -> None:
    """Load the archive at ``path`` in ``engine`` ("tract" or "nnef-tools"); raise
    :class:`LoadRefusedError` when it refuses (the module attribute is looked up at call
    time, so a test session can route it through its long-lived tract child)."""
    from t2n.check import nnef_tools_runner, tract_runner

    load = nnef_tools_runner.parse_in_nnef_tools if engine == "nnef-tools" \
        else tract_runner.load_in_tract
    try:
        load(path)
    except tract_runner.TractRunError as e:
        raise refusal(g, engine, str(e), crashed=e.crashed) from None


def refusal(g, engine: str, message: str, crashed: bool = False) -> LoadRefusedError:
    """The error of a refused archive, naming the op behind the engine's message."""
    op, where, kind = locate(g, message)
    what = f"{op} ({kind})" if op and kind else op or kind
    head = f"{engine} refuses to load the archive"
    if what:
        head += f" at {what}" + (f", {where}" if where else "")
    return LoadRefusedError(f"{head}; the export is refused, nothing was written: "
                            f"{_short(message)}", op=op, where=where, crashed=crashed)


def _short(message: str, limit: int = 1500) -> str:
    """tract's message without the dump of the patch it could not apply (whole weights)."""
    message = message.split(" | ModelPatch {")[0].split(" ModelPatch {")[0]
    return message if len(message) <= limit else message[:limit] + " ..."


def with_op_named(error: TractError, g) -> TractError:
    """``error`` (a check's failed tract run) naming the op and source line of the node
    tract's message names, when it names one of the graph's."""
    op, where, kind = locate(g, str(error))
    if not (op or kind):
        return error
    what = f"{op} ({kind})" if op and kind else op or kind
    return TractError(f"{_short(str(error))} [at {what}" + (f", {where}]" if where else "]"),
                      crashed=error.crashed)


# tract names nodes after the tensor they compute ("add_441"), a fragment's inner tensors
# after the call's output and the fragment ("add_441_t2n_linear3_f32_t"), and the nodes its
# rewrites make after the node they replace plus a dotted suffix ("add_441.concat-einsum-k")
_QUOTED = re.compile(r'"([A-Za-z_][A-Za-z0-9_.\-]*)"|\'([A-Za-z_][A-Za-z0-9_]*)\'')


def locate(g, message: str) -> tuple[str | None, str | None, str | None]:
    """``(aten op, source line, NNEF op kind)`` of the first node named in ``message`` that
    is a tensor of ``g`` (or a node derived from one), else Nones."""
    producers = {}
    for op in g.ops:
        for t in op.outputs:
            producers.setdefault(getattr(t, "name", None), op)
    by_id = {id(t): op for op in g.ops for t in op.outputs}
    for t, name in zip(g.outputs, getattr(g, "output_names", [])):
        if id(t) in by_id:  # the writer gives outputs the user's names
            producers[name] = by_id[id(t)]
    for m in _QUOTED.finditer(message):
        name = (m.group(1) or m.group(2)).split(".")[0]
        parts = name.split("_")
        for n in range(len(parts), 0, -1):
            op = producers.get("_".join(parts[:n]))
            if op is not None:
                origin = op.origin
                return (getattr(origin, "op", None), getattr(origin, "where", None), op.kind)
    return None, None, None
