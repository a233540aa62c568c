"""Every error t2n raises on purpose.

All derive from :class:`T2NError`, so an export script can catch one type; the CLI maps
them to exit codes (2 for bad input or unsupported models, 1 for a failed check).
"""

from __future__ import annotations


class T2NError(Exception):
    """Base of every error t2n raises deliberately (never a bug in t2n itself)."""

    exit_code = 2


class UsageError(T2NError):
    """Bad arguments: names, input specs, dynamic axes, output paths."""


class OutputPathError(UsageError):
    """The output path holds something t2n may not replace (a user's folder or file, a
    symbolic link), or names no archive kind t2n writes (:mod:`t2n.write.output_paths`)."""

    def __init__(self, path: str, message: str):
        self.path = path
        super().__init__(message)


class ModelLoadError(T2NError):
    """The model file is missing, corrupt, or of a kind t2n refuses to load."""


class TraceError(T2NError):
    """torch.jit.trace could not run the model on the example inputs."""


class ConversionError(T2NError):
    """One node cannot be converted in the form it has.

    ``op`` names the aten op, ``where`` the source line of the user's model that emitted it.
    """

    def __init__(self, op: str, message: str, where: str | None = None):
        self.op = op
        self.message = message
        self.where = where
        super().__init__(self._text())

    def _text(self) -> str:
        loc = f" (at {self.where})" if self.where else ""
        return f"{self.op}: {self.message}{loc}"


class UnsupportedOperatorsError(T2NError):
    """Every op of the model that t2n cannot convert, listed once with counts and locations.

    ``problems`` maps an op name to a list of ``(reason, location)`` pairs; ``target`` names
    the export target when it, not the converter, is what cannot express them.
    """

    def __init__(self, problems: dict[str, list[tuple[str, str | None]]],
                 target: str | None = None, hint: str | None = None):
        self.problems = problems
        self.target = target
        self.hint = hint
        who = f"target {target!r} cannot express" if target else "t2n cannot convert"
        lines = [f"the model uses {len(problems)} operator(s) that {who}:"]
        for op in sorted(problems):
            entries = problems[op]
            lines.append(f"  {op} ({len(entries)} use{'s' if len(entries) != 1 else ''})")
            seen = set()
            for reason, where in entries:
                key = (reason, where)
                if key in seen:
                    continue
                seen.add(key)
                lines.append(f"    - {reason}" + (f" at {where}" if where else ""))
        if hint:
            lines.append(hint)
        super().__init__("\n".join(lines))

    @property
    def ops(self) -> list[str]:
        return sorted(self.problems)


class CheckFailedError(T2NError):
    """tract's outputs differ from PyTorch's beyond tolerance."""

    exit_code = 1

    def __init__(self, message: str, report=None):
        self.report = report
        super().__init__(message)


class TractError(T2NError):
    """tract refused the archive (load or run error) or crashed while running it."""

    exit_code = 1

    def __init__(self, message: str, crashed: bool = False):
        self.crashed = crashed
        super().__init__(message)
