"""The line of the user's model an error of a capture points to: the innermost frame that
belongs to none of the frameworks (t2n, torch, transformers) nor to generated code."""

from __future__ import annotations


def user_line(text: str, e: BaseException | None = None) -> str:
    """`` at file.py:LINE`` of the innermost frame of the user's code: named in ``text``
    (torch.export's message quotes the user's stack when it has recorded one), else in the
    traceback of ``e`` and its causes (non-strict export runs the model's own Python, so the
    failing line is a frame there whatever torch's message holds)."""
    import os
    import re
    import sys
    import traceback

    # frameworks' own frames, by their package directories (a user's checkout may well sit
    # in a directory named t2n or torch), and generated code (<string>, <eval_with_key>)
    libs = tuple(os.path.dirname(m.__file__) + os.sep for m in
                 (sys.modules.get(n) for n in ("t2n", "torch", "transformers"))
                 if m is not None and getattr(m, "__file__", None))

    def users(frames):
        return [(p, n) for p, n in frames if not p.startswith(libs) and not p.startswith("<")]

    frames = users(re.findall(r'File "([^"]+)", line (\d+)', text))
    seen = set()
    while not frames and e is not None and id(e) not in seen:
        seen.add(id(e))
        frames = users([(f.filename, f.lineno) for f in traceback.extract_tb(e.__traceback__)])
        e = e.__cause__ or e.__context__
    return f" at {os.path.basename(frames[-1][0])}:{frames[-1][1]}" if frames else ""
