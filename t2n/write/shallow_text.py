"""graph.nnef lines tract parses quickly: literal lists move into shared fragments.

tract reads graph.nnef with a backtracking parser (nnef/src/ast/parse.rs, 0.23.9) that
reads every atom of an expression at least twice (once hoping for a subscript after it) and
copies each partial result once per precedence level; so the work for one literal grows
with its nesting depth several times over. A number inside ``padding = [(1, 1), (1, 1)]``
of a ``conv(...)`` line sits four levels deep and costs about as much as a whole line of
plain identifiers; the shape list of every ``variable`` line three levels deep. Parsing was
the largest part of the time tract took to load a convolutional archive (MobileNetV2:
130 M instructions of parse against the ONNX route's 31 M for the whole protobuf).

So, for the tract target only, the writer spells the graph body shallower, with the same
meaning:

* an op whose arguments include a literal list (``padding``, ``stride``, ``axes``,
  ``shape``...) becomes a call of a fragment that holds those literals in its body, once for
  every op of the same kind with the same literal lists; its other arguments (tensors,
  scalars) are the fragment's parameters. ``conv(x, w, b, padding = [(1, 1), (1, 1)],
  groups = 32)`` becomes ``t2n_conv_1(x, w, b, groups = 32)``;
* a weight's declaration ``variable<scalar>(shape = [96, 16, 1, 1], label = 'w')`` becomes
  ``t2n_variable_scalar4_0('w', 96, 16, 1, 1)``, one fragment per element type and rank, its
  dims passed as scalar arguments (one level shallower).

tract inlines a fragment's body where it is called, so the model it builds is the one the
plain lines describe (node for node; only node names gain the fragment's name). Left as
they are: ops writing a graph output (their node keeps the output's name), ops with several
results, calls of other fragments, loops, and weights with a storage format
(t2n.write.weight_formats declares and casts those itself). ``t2n inspect`` counts a hoisted call
as the op inside it (t2n.archive_info).
"""

from __future__ import annotations

import re

import torch

from t2n.write.nnef_text import format_value, nnef_type
from t2n.write.stdlib_defaults import explicit_attrs
from t2n.walk.tensors import Op, Tensor

HOIST_PREFIX = "t2n_"
VARIABLE_STEM = "variable"  # t2n_variable_<type><rank>_<n>

# text made only of numbers, strings, logicals, brackets and commas (no identifier)
_LITERAL_TOKEN = re.compile(r"\s*(?:-?(?:\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|inf)"
                            r"|'(?:[^'\\]|\\.)*'|true|false|[\[\](),])")


def _pure_literal_list(text: str) -> bool:
    """Whether ``text`` is a list or tuple literal with no identifier inside."""
    if not text or text[0] not in "[(":
        return False
    pos = 0
    while pos < len(text):
        m = _LITERAL_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            return text[pos:].strip() == ""
        pos = m.end()
    return True


def _param_type(value) -> str | None:
    """The NNEF type of a value passed to a fragment parameter, or None (not passable)."""
    if isinstance(value, Tensor):
        kind = nnef_type(value.dtype)
        plain = value.literal is not None and _LITERAL_TOKEN.fullmatch(value.literal)
        return kind if plain else f"tensor<{kind}>"  # a number, or a tensor expression
    if isinstance(value, bool):
        return "logical"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "scalar"
    if isinstance(value, str):
        return "string"
    return None


class ShallowText:
    """The fragments and call lines of one graph body, shared across its ops."""

    def __init__(self, reserved: set[str]):
        self._reserved = reserved
        self._fragments: dict[tuple, tuple[str, list[str]]] = {}  # key -> (name, text lines)
        self._per_kind: dict[str, int] = {}

    def _fragment_name(self, stem: str) -> str:
        """``t2n_<stem>_<n>``, numbered per stem in order of first use, never a name the
        graph already has."""
        while True:
            n = self._per_kind.get(stem, 0)
            self._per_kind[stem] = n + 1
            name = f"{HOIST_PREFIX}{stem}_{n}"
            if name not in self._reserved:
                self._reserved.add(name)
                return name

    def op_line(self, op: Op) -> str | None:
        """The op as a call of a shared fragment, or None when it has no literal list."""
        if len(op.outputs) != 1 or "<" in op.kind or op.kind.startswith(HOIST_PREFIX) \
                or "body" in op.attrs:
            return None
        key: list = [op.kind]
        params: list[str] = []
        body_args: list[str] = []
        call_args: list[str] = []
        hoisted = False
        # positional arguments (no name: parameters a0, a1...), then named ones
        arguments = [(None, a) for a in op.args] + \
            list(explicit_attrs(op.kind, op.attrs).items())
        for i, (k, v) in enumerate(arguments):
            text = format_value(v)
            spelled = text if k is None else f"{k} = {text}"
            if _pure_literal_list(text):
                key.append((k, text))
                body_args.append(spelled)
                hoisted = True
                continue
            kind = _param_type(v)
            if kind is None or k is not None and (re.match(r"a\d+$", k) or k == "output"):
                return None
            param = f"a{i}" if k is None else k
            key.append((k, kind))
            params.append(f"{param}: {kind}")
            body_args.append(param if k is None else f"{k} = {k}")
            call_args.append(spelled)
        if not hoisted:
            return None
        out = op.outputs[0]
        key.append(("out", nnef_type(out.dtype)))
        frozen = tuple(key)
        if frozen not in self._fragments:
            name = self._fragment_name(op.kind)
            result = f"output: tensor<{nnef_type(out.dtype)}>"
            head = f"fragment {name}({', '.join(params)}) -> ({result})"
            body = f"  output = {op.kind}({', '.join(body_args)});"
            self._fragments[frozen] = (name, [head, "{", body, "}", ""])
        name = self._fragments[frozen][0]
        return f"{out.name} = {name}({', '.join(call_args)})"

    def variable_line(self, name: str, dtype: torch.dtype, shape, label: str) -> str | None:
        """A plain weight declaration as a call of the variable fragment of its rank."""
        dims = [int(d) for d in shape]
        if not dims:
            return None
        kind = nnef_type(dtype)
        frozen = ("variable", kind, len(dims))
        if frozen not in self._fragments:
            fname = self._fragment_name(f"{VARIABLE_STEM}_{kind}{len(dims)}")
            ps = ", ".join(f"d{i}: integer" for i in range(len(dims)))
            ds = ", ".join(f"d{i}" for i in range(len(dims)))
            head = f"fragment {fname}(label: string, {ps}) -> (output: tensor<{kind}>)"
            body = f"  output = variable<{kind}>(shape = [{ds}], label = label);"
            self._fragments[frozen] = (fname, [head, "{", body, "}", ""])
        fname = self._fragments[frozen][0]
        return f"{name} = {fname}({format_value(label)}, {', '.join(map(str, dims))})"

    def fragment_lines(self) -> list[str]:
        """The definitions of every fragment handed out, in the order they were made."""
        out: list[str] = []
        for _, lines in self._fragments.values():
            out.extend(lines)
        return out
