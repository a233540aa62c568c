"""What a user types on the command line or in a manifest, turned into models and tensors.

- ``x:1x3x224x224:f32`` -> an :class:`InputSpec` (name, dims, dtype); random example inputs
  are made from specs, integers drawn from ``--int-range``.
- ``x:0=B`` -> a dynamic axis (axis 0 of input ``x`` becomes the tract symbol ``B``).
- ``model.pt`` or ``package.module:callable`` -> a model, loaded safely: TorchScript archives
  with ``torch.jit.load``; a pickled ``nn.Module`` (``torch.save(model)``) only when the user
  says ``trust_pickle``, because unpickling runs arbitrary code.

Every problem is a :class:`~t2n.errors.UsageError` or :class:`~t2n.errors.ModelLoadError`
with a one-line message, so the CLI can print it without a traceback.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import zipfile
from dataclasses import dataclass

from t2n.errors import ModelLoadError, UsageError

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_REF_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@dataclass(frozen=True)
class InputSpec:
    name: str
    dims: tuple[int, ...]
    dtype: str  # user spelling, validated by t2n.dtypes.from_name

    def __str__(self) -> str:
        return f"{self.name}:{'x'.join(map(str, self.dims)) or 'scalar'}:{self.dtype}"


def parse_input_spec(text: str) -> InputSpec:
    """``NAME:DIMS:DTYPE`` with DIMS like ``1x3x224x224`` (``scalar`` for rank 0)."""
    from t2n import dtypes

    parts = text.split(":")
    if len(parts) != 3:
        raise UsageError(f"input spec {text!r} must be NAME:DIMS:DTYPE, e.g. x:1x3x224x224:f32")
    name, dims_text, dtype = (p.strip() for p in parts)
    if not _NAME_RE.match(name):
        raise UsageError(f"input spec {text!r}: name {name!r} must be an identifier "
                         "(letters, digits, underscore)")
    if dims_text in ("", "scalar"):
        dims: tuple[int, ...] = ()
    else:
        try:
            dims = tuple(int(d) for d in dims_text.lower().split("x"))
        except ValueError:
            raise UsageError(f"input spec {text!r}: dims {dims_text!r} must be sizes joined "
                             "by 'x', e.g. 1x3x224x224") from None
        if any(d < 0 for d in dims):
            raise UsageError(f"input spec {text!r}: sizes must be >= 0")
    try:
        dtypes.from_name(dtype)
    except ValueError as e:
        raise UsageError(f"input spec {text!r}: {e}") from None
    return InputSpec(name, dims, dtype)


def parse_dynamic(text: str) -> tuple[str, int, str | tuple]:
    """``NAME:AXIS=SYMBOL`` (or ``NAME:AXIS``, symbol then ``NAME_AXIS``); ``SYMBOL>=0`` lets
    the axis be empty at run time (it is 1 or more otherwise); ``SYMBOL<=512`` (or
    ``SYMBOL>=1<=512``) declares its most size too."""
    m = re.match(r"^([A-Za-z_]\w*):(-?\d+)(?:=([A-Za-z]\w*)(?:>=(\d+))?(?:<=(\d+))?)?$",
                 text.strip())
    if not m:
        raise UsageError(f"dynamic axis {text!r} must be NAME:AXIS=SYMBOL, e.g. x:0=B "
                         "(or x:0=B>=0 for an axis that may be empty, x:0=B<=64 for one of "
                         "at most 64)")
    name, axis, sym = m.group(1), int(m.group(2)), m.group(3) or f"{m.group(1)}_{m.group(2)}"
    if m.group(5):
        return name, axis, (sym, int(m.group(4) or 1), int(m.group(5)))
    return name, axis, (sym, int(m.group(4))) if m.group(4) else sym


def dynamic_axes_from(entries, input_names: list[str]) -> dict | None:
    """ONNX-style ``{name: {axis: symbol}}`` from ``NAME:AXIS=SYM`` strings."""
    out: dict[str, dict[int, str]] = {}
    for text in entries or ():
        name, axis, sym = parse_dynamic(text)
        if name not in input_names:
            raise UsageError(f"dynamic axis {text!r} names {name!r}, which is not an input "
                             f"(inputs: {', '.join(input_names) or 'none'})")
        out.setdefault(name, {})[axis] = sym
    return out or None


def parse_int_range(text: str) -> tuple[int, int]:
    """``LO:HI``: integer example inputs are drawn from [LO, HI)."""
    m = re.match(r"^(-?\d+):(-?\d+)$", text.strip())
    if not m or int(m.group(1)) >= int(m.group(2)):
        raise UsageError(f"--int-range {text!r} must be LO:HI with LO < HI, e.g. 0:100 "
                         "(or NAME=LO:HI for one input)")
    return int(m.group(1)), int(m.group(2))


def parse_int_ranges(entries, input_names=None,
                     default=(0, 10)) -> tuple[tuple[int, int], dict[str, tuple[int, int]]]:
    """``(global range, {input name: range})`` from ``--int-range`` values: ``LO:HI`` for
    every integer input (once at most), ``NAME=LO:HI`` for one input (a 0/1 mask beside
    token ids in [0, vocab)). Names must be among ``input_names`` when given."""
    if isinstance(entries, str):
        entries = [entries]
    whole, per = None, {}
    for text in entries or ():
        name, eq, rng = text.partition("=")
        if not eq:
            if whole is not None:
                raise UsageError(f"--int-range {text!r}: give one LO:HI for all inputs (and "
                                 "NAME=LO:HI for single inputs)")
            whole = parse_int_range(text)
            continue
        name = name.strip()
        if not _NAME_RE.match(name):
            raise UsageError(f"--int-range {text!r} must be NAME=LO:HI with NAME an input")
        if input_names is not None and name not in input_names:
            raise UsageError(f"--int-range {text!r} names {name!r}, which is not an input "
                             f"(inputs: {', '.join(input_names) or 'none'})")
        if name in per:
            raise UsageError(f"--int-range: {name!r} is given twice")
        per[name] = parse_int_range(rng)
    return whole or tuple(default), per


def make_inputs(specs: list[InputSpec], seed: int = 0, int_range=(0, 10),
                per_input: dict[str, tuple[int, int]] | None = None) -> tuple:
    """Random example tensors for the specs: floats ~ N(0, 1), ints in [lo, hi) (the
    input's own range in ``per_input``, else ``int_range``), bools 50/50."""
    import torch

    from t2n import dtypes

    gen = torch.Generator().manual_seed(seed)
    out = []
    for s in specs:
        dt = dtypes.from_name(s.dtype)
        if dt.is_floating_point:
            t = torch.randn(s.dims, generator=gen, dtype=torch.float32).to(dt)
        elif dt == torch.bool:
            t = torch.randint(0, 2, s.dims, generator=gen).bool()
        else:
            lo, hi = (per_input or {}).get(s.name, int_range)
            info = torch.iinfo(dt)
            a, b = max(lo, info.min), min(hi, info.max + 1)
            if a >= b:
                raise UsageError(f"input {s.name}: --int-range {lo}:{hi} holds no {s.dtype} "
                                 "value")
            t = torch.randint(a, b, s.dims, generator=gen, dtype=torch.int64).to(dt)
        out.append(t)
    return tuple(out)


def load_npz(path: str) -> tuple[list[str], tuple]:
    """Named example inputs from an ``.npz`` (``allow_pickle=False``: no code runs)."""
    import numpy as np
    import torch

    if not os.path.isfile(path):
        raise UsageError(f"inputs file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as z:
            names = list(z.files)
            arrays = [z[n] for n in names]
    except ValueError as e:
        raise UsageError(f"{path}: {str(e).splitlines()[0]} (object arrays are refused)") \
            from None
    except (OSError, zipfile.BadZipFile, EOFError) as e:
        raise UsageError(f"{path} is not a readable .npz file ({e})") from None
    return names, tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays)


# ---------------------------------------------------------------------------- models
def is_callable_ref(text: str) -> bool:
    """``package.module:callable`` (and not an existing file whose name has a colon)."""
    return bool(_REF_RE.match(text)) and not os.path.exists(text)


def import_user_module(name: str):
    """Import a module of the user's (a model's, an ``--extension``): the current directory
    is importable, as for ``python -m``."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    return importlib.import_module(name)


def call_ref(ref: str, what: str = "model"):
    """Import ``package.module`` and call ``callable()``; the current directory is importable."""
    mod_name, _, attr = ref.partition(":")
    try:
        mod = import_user_module(mod_name)
    except ImportError as e:
        raise ModelLoadError(f"cannot import {mod_name!r} for {what} {ref!r}: {e}") from None
    except Exception as e:
        raise ModelLoadError(f"importing {mod_name!r} failed: {type(e).__name__}: "
                             f"{first_line(e)}") from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ModelLoadError(f"{mod_name!r} has no attribute {attr!r} ({what} {ref!r})")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ModelLoadError(f"{ref} is a {type(obj).__name__}, not a callable")
    try:
        return obj()
    except Exception as e:
        raise ModelLoadError(f"{ref}() raised {type(e).__name__}: {first_line(e)}") from None


def load_model(ref: str, trust_pickle: bool = False):
    """``(model, example_args or None)`` from a file path or a ``module:callable``; a
    callable may return ``(module, args)``, args a tensor, a tuple of tensors or a dict of
    named tensors."""
    import torch

    if is_callable_ref(ref):
        got = call_ref(ref)
        args = None
        if isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], torch.nn.Module):
            got, args = got
            args = _example_args(ref, args)
        if not isinstance(got, torch.nn.Module):
            raise ModelLoadError(f"{ref}() returned a {type(got).__name__}; t2n needs an "
                                 "nn.Module or (nn.Module, example_args)")
        return got, args
    return load_model_file(ref, trust_pickle), None


def _example_args(ref: str, args):
    """A builder's example inputs as the API takes them: a tuple of tensors, or a dict of
    named tensors (its keys become the input names, as in :func:`t2n.export`)."""
    import torch

    if isinstance(args, torch.Tensor):
        return (args,)
    if isinstance(args, dict):
        bad = [k for k, v in args.items() if not isinstance(k, str) or not _NAME_RE.match(k)
               or not isinstance(v, torch.Tensor)]
        if bad or not args:
            raise ModelLoadError(f"{ref}() returned (module, dict) but the dict must map "
                                 "input names (identifiers) to tensors"
                                 + (f"; {bad[0]!r} does not" if bad else ""))
        return dict(args)
    if not isinstance(args, (tuple, list)) or \
            not all(isinstance(a, torch.Tensor) for a in args):
        raise ModelLoadError(f"{ref}() returned (module, args) but args is not a tensor, a "
                             "tuple of tensors or a dict of named tensors")
    return tuple(args)


def example_names(args) -> list[str] | None:
    """The input names example inputs carry: a dict's keys, else None."""
    return list(args) if isinstance(args, dict) else None


def model_file_kind(path: str) -> str:
    """'torchscript', 'pickle' (torch.save of an object) or 'unknown', from the file itself."""
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except zipfile.BadZipFile:
        with open(path, "rb") as f:
            head = f.read(2)
        return "pickle" if head[:1] == b"\x80" else "unknown"
    tops = {n.split("/", 1)[1] if "/" in n else n for n in names}
    if "constants.pkl" in tops or any(t.startswith("code/") for t in tops):
        return "torchscript"
    if "data.pkl" in tops:
        return "pickle"
    return "unknown"


def load_model_file(path: str, trust_pickle: bool = False):
    import torch

    from t2n.capture.trace import load_torchscript

    if not os.path.exists(path):
        hint = " (for a Python model, write package.module:callable)" if ":" in path else ""
        raise ModelLoadError(f"model file not found: {path}{hint}")
    if os.path.isdir(path):
        raise ModelLoadError(f"model path is a directory, not a TorchScript file: {path}")
    try:
        kind = model_file_kind(path)
    except OSError as e:
        raise ModelLoadError(f"cannot read {path}: {e.strerror or e}") from None
    if kind == "torchscript":
        return load_torchscript(path)
    if kind == "pickle":
        if not trust_pickle:
            raise ModelLoadError(
                f"{path} is a pickled Python object (torch.save), not a TorchScript archive; "
                "loading it runs code from the file. Save the model with torch.jit.save, or "
                "pass --trust-pickle if you trust the file")
        try:
            obj = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e:
            raise ModelLoadError(f"{path}: unpickling failed: {type(e).__name__}: "
                                 f"{first_line(e)}") from None
        if not isinstance(obj, torch.nn.Module):
            raise ModelLoadError(f"{path} holds a {type(obj).__name__}, not an nn.Module "
                                 "(a state_dict needs its model class: use "
                                 "package.module:callable)")
        return obj
    if zipfile.is_zipfile(path):
        raise ModelLoadError(f"{path} is a zip archive but not a TorchScript archive")
    raise ModelLoadError(f"{path} is not a TorchScript archive (corrupt, truncated, or another "
                         "kind of file); save models with torch.jit.save")


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (errors here are one line)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else ""
