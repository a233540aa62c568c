"""The ``t2n check`` manifest: a TOML file listing the models a CI job must convert.

    pythonpath = [".."]          # optional: folders (relative to this file) made importable
    extensions = ["mylib.t2n_ext"]  # optional: modules of user mappings (t2n.mapping),
                                 # imported before every model (a model may add its own)

    [[model]]
    name = "resnet18"                        # required, unique
    model = "tests.fixtures.models:make_resnet18"  # TorchScript file (relative to this file) or
                                             # package.module:callable -> nn.Module
                                             # (or (nn.Module, example_args), args a
                                             # tuple or a dict of named tensors)
    inputs = ["x:1x3x224x224:f32"]           # specs; or "pkg.mod:fn" returning tensors;
                                             # or "inputs.npz" (loaded with allow_pickle=False);
                                             # omit when the callable returns example args
    dynamic = ["x:0=B"]                      # optional dynamic axes
    stream = "S"                             # optional: a streaming export over a dynamic
    pulse = 8                                # symbol, checked chunk by chunk (pulse optional)
    rtol = 1e-4                              # optional; also atol, seed, int_range = "0:10"
                                             # (or ["0:1000", "mask=0:2"]: per input),
                                             # output_names = [...], timeout (seconds)
    capture = "trace"                        # optional: export, trace or auto (default:
                                             # t2n's, torch.export for a Python module)

Parsing validates every field and rejects unknown keys (a typo must not silently turn a
check off), so a bad manifest fails with exit code 2 before any model runs.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, field

from t2n import specs
from t2n.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib

_TOP_KEYS = {"model", "pythonpath", "extensions"}
_MODEL_KEYS = {"name", "model", "inputs", "dynamic", "rtol", "atol", "seed", "int_range",
               "output_names", "timeout", "trust_pickle", "stream", "pulse",
               "constant_outputs", "extensions", "capture"}


@dataclass
class ModelEntry:
    name: str
    model: str  # absolute file path, or package.module:callable
    inputs: list | str | None = None  # specs, "pkg.mod:fn", or an absolute .npz path
    dynamic: list[str] = field(default_factory=list)
    rtol: float = 1e-4
    atol: float = 1e-5
    seed: int = 0
    int_range: list[str] = field(default_factory=lambda: ["0:10"])  # [NAME=]LO:HI each
    output_names: list[str] | None = None
    timeout: float = 900.0
    trust_pickle: bool = False
    pythonpath: list[str] = field(default_factory=list)
    stream: str | None = None  # streaming symbol (t2n.streaming), checked pulse by pulse
    pulse: int | None = None
    constant_outputs: list[str] = field(default_factory=list)  # outputs meant to be constant
    extensions: list[str] = field(default_factory=list)  # modules of t2n.mapping functions
    capture: str | None = None  # export's capture= (None: t2n's default)

    def to_json(self) -> dict:
        return asdict(self)


def load_manifest(path: str) -> list[ModelEntry]:
    if not os.path.isfile(path):
        raise UsageError(f"manifest not found: {path}")
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: invalid TOML: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read manifest {path}: {e}") from None
    base = os.path.dirname(os.path.abspath(path))
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise UsageError(f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))} "
                         "(expected [[model]] tables, pythonpath and extensions)")
    extensions = _module_list(data.get("extensions", []), f"{path}: extensions")
    pythonpath = data.get("pythonpath", [])
    if not isinstance(pythonpath, list) or not all(isinstance(p, str) for p in pythonpath):
        raise UsageError(f"{path}: pythonpath must be a list of folders")
    pythonpath = [os.path.normpath(os.path.join(base, p)) for p in pythonpath]
    models = data.get("model")
    if not isinstance(models, list) or not models:
        raise UsageError(f"{path}: no [[model]] tables")
    entries = [_entry(m, i, base, pythonpath, path) for i, m in enumerate(models)]
    for e in entries:
        e.extensions = extensions + [x for x in e.extensions if x not in extensions]
    names = [e.name for e in entries]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UsageError(f"{path}: model names must be unique (repeated: {', '.join(dup)})")
    return entries


def _entry(m: dict, i: int, base: str, pythonpath: list[str], path: str) -> ModelEntry:
    where = f"{path}: [[model]] #{i + 1}"
    if not isinstance(m, dict):
        raise UsageError(f"{where} must be a table")
    if isinstance(m.get("name"), str):
        where = f"{path}: model {m['name']!r}"
    unknown = set(m) - _MODEL_KEYS
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
                         f"(known: {', '.join(sorted(_MODEL_KEYS))})")
    for key in ("name", "model"):
        if not isinstance(m.get(key), str) or not m[key]:
            raise UsageError(f"{where}: '{key}' must be a non-empty string")
    model = m["model"]
    if not specs.is_callable_ref(model) or os.path.exists(os.path.join(base, model)):
        model = os.path.normpath(os.path.join(base, model))
    inputs = m.get("inputs")
    if isinstance(inputs, list):
        if not all(isinstance(s, str) for s in inputs):
            raise UsageError(f"{where}: inputs must be a list of NAME:DIMS:DTYPE strings")
        try:
            parsed = [specs.parse_input_spec(s) for s in inputs]
        except UsageError as e:
            raise UsageError(f"{where}: {e}") from None
        names = [p.name for p in parsed]
        if len(set(names)) != len(names):
            raise UsageError(f"{where}: input names must be unique")
    elif isinstance(inputs, str):
        if inputs.lower().endswith(".npz"):
            inputs = os.path.normpath(os.path.join(base, inputs))
        elif not specs.is_callable_ref(inputs):
            raise UsageError(f"{where}: inputs {inputs!r} must be a list of specs, a "
                             "package.module:callable, or an .npz file")
    elif inputs is not None:
        raise UsageError(f"{where}: inputs must be a list of specs or a string")
    dynamic = m.get("dynamic", [])
    if not isinstance(dynamic, list) or not all(isinstance(d, str) for d in dynamic):
        raise UsageError(f"{where}: dynamic must be a list of NAME:AXIS=SYM strings")
    try:
        for d in dynamic:
            specs.parse_dynamic(d)
        int_range = m.get("int_range", "0:10")
        if isinstance(int_range, list) and len(int_range) == 2 and \
                all(isinstance(v, int) and not isinstance(v, bool) for v in int_range):
            int_range = f"{int_range[0]}:{int_range[1]}"
        if isinstance(int_range, str):
            int_range = [int_range]
        if not isinstance(int_range, list) or not all(isinstance(r, str) for r in int_range):
            raise UsageError("int_range must be \"LO:HI\", [LO, HI] or a list of "
                             "\"LO:HI\" / \"NAME=LO:HI\" strings")
        specs.parse_int_ranges(int_range, names if isinstance(inputs, list) else None)
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None
    nums = {}
    for key, default in (("rtol", 1e-4), ("atol", 1e-5), ("timeout", 900.0)):
        v = m.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise UsageError(f"{where}: {key} must be a number >= 0")
        nums[key] = float(v)
    seed = m.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise UsageError(f"{where}: seed must be an integer")
    out_names = m.get("output_names")
    if out_names is not None and (not isinstance(out_names, list)
                                  or not all(isinstance(n, str) for n in out_names)):
        raise UsageError(f"{where}: output_names must be a list of strings")
    constant = m.get("constant_outputs", [])
    if not isinstance(constant, list) or not all(isinstance(n, str) for n in constant):
        raise UsageError(f"{where}: constant_outputs must be a list of output names")
    trust = m.get("trust_pickle", False)
    if not isinstance(trust, bool):
        raise UsageError(f"{where}: trust_pickle must be true or false")
    stream, pulse = m.get("stream"), m.get("pulse")
    if stream is not None:
        symbols = {specs.parse_dynamic(d)[2] for d in dynamic}
        if not isinstance(stream, str) or stream not in symbols:
            raise UsageError(f"{where}: stream must name one of the dynamic symbols "
                             f"({', '.join(sorted(symbols)) or 'none given'})")
    if pulse is not None and (stream is None or isinstance(pulse, bool)
                              or not isinstance(pulse, int) or pulse < 1):
        raise UsageError(f"{where}: pulse must be a positive integer, with stream set")
    capture = m.get("capture")
    if capture is not None:
        from t2n.capture.strategies import check_capture

        try:
            check_capture(capture)
        except UsageError as e:
            raise UsageError(f"{where}: {e}") from None
    return ModelEntry(name=m["name"], model=model, inputs=inputs, dynamic=dynamic,
                      seed=seed, int_range=int_range, output_names=out_names,
                      trust_pickle=trust, pythonpath=pythonpath, stream=stream, pulse=pulse,
                      constant_outputs=constant, capture=capture,
                      extensions=_module_list(m.get("extensions", []), f"{where}: extensions"),
                      **nums)


def _module_list(value, where: str) -> list[str]:
    """A list of importable module names (``extensions``)."""
    if not isinstance(value, list) or not all(
            isinstance(v, str) and v and all(p.isidentifier() for p in v.split("."))
            for v in value):
        raise UsageError(f"{where} must be a list of module names (package.module)")
    return list(value)
