"""How a model is called and what its result becomes: one convention for the trace and the
check, so the archive's inputs and outputs line up with PyTorch's.

Inputs: example inputs are a tensor, a tuple of tensors (``forward``'s positional
arguments) or a dict ``{name: tensor}`` (keyword arguments). With a tuple, ``input_names``
that name parameters of ``forward`` bind by keyword (``attention_mask`` reaches
``attention_mask`` whatever its position in the signature); leading names that are not
parameters stay positional.

Outputs: the model's result is flattened to named tensors. Positional containers (tuple,
list) at the top give ``output_0, output_1, ...``; named ones (dicts, and ``transformers``'
``ModelOutput``) give their keys (``logits``, ``last_hidden_state``), a tuple under a key
gives ``key_0, key_1 ...``; ``None`` fields are left out. Key/value cache objects
(``DynamicCache`` and the other ``transformers`` caches, which models return when
``use_cache`` is on) give their tensors per layer: ``present_key_0``, ``present_value_0``,
... (``present_cross_key_0`` ... for the cross-attention half of an encoder-decoder cache).
t2n does not import ``transformers``: caches are recognised by their structure.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

import torch

from t2n.errors import UsageError


@dataclass
class Binding:
    """Which example tensor goes to which ``forward`` argument."""

    tensors: tuple                # every example input, in archive order
    names: list | None            # input names (None: the defaults input_0 ...)
    n_positional: int             # the first n go positionally, the rest by keyword

    @property
    def keywords(self) -> list:
        return list(self.names[self.n_positional:]) if self.names else []

    def call(self, model, tensors=None):
        tensors = self.tensors if tensors is None else tensors
        k = self.n_positional
        return model(*tensors[:k], **dict(zip(self.keywords, tensors[k:])))


def forward_parameters(model) -> list[str] | None:
    """Names of ``model.forward``'s parameters (without self), or None if unknown."""
    fwd = getattr(model, "forward", None)
    schema = getattr(fwd, "schema", None)
    if schema is not None:  # a TorchScript method
        return [a.name for a in schema.arguments][1:]
    try:
        sig = inspect.signature(fwd)
    except (TypeError, ValueError):
        return None
    return [p.name for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def bind(model, args, input_names) -> Binding:
    """Resolve example ``args`` (tensor, tuple or dict) and ``input_names`` into a Binding."""
    if isinstance(args, dict):
        names = list(args)
        if input_names is not None and list(input_names) != names:
            raise UsageError(f"input_names {list(input_names)} differ from the keys of the "
                             f"example inputs {names}; give one or the other")
        for k, v in args.items():
            if not isinstance(k, str):
                raise UsageError(f"example input keys must be strings, not {k!r}")
            if not isinstance(v, torch.Tensor):
                raise UsageError(f"example input {k!r} is a {type(v).__name__}; t2n takes "
                                 "tensors")
        params = forward_parameters(model)
        if params is not None:
            unknown = [n for n in names if n not in params]
            if unknown and not _takes_var_keywords(model):
                raise UsageError(f"example input(s) {', '.join(unknown)} are not parameters "
                                 f"of {type(model).__name__}.forward ({', '.join(params)})")
        return Binding(tuple(args.values()), names, 0)
    if isinstance(args, torch.Tensor):
        args = (args,)
    if not isinstance(args, (list, tuple)):
        raise UsageError(f"args must be a tensor, a tuple of tensors or a dict of tensors, "
                         f"not {type(args).__name__}")
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise UsageError(f"example input {i} is a {type(a).__name__}; t2n takes tensors")
    args = tuple(args)
    if input_names is None or len(list(input_names)) != len(args):
        return Binding(args, None if input_names is None else list(input_names), len(args))
    names = list(input_names)
    params = forward_parameters(model) or []
    k = len(names)
    while k > 0 and names[k - 1] in params:
        k -= 1
    # names[k:] are parameters: bind them by keyword unless one would also be filled
    # positionally (then the whole call stays positional, as before)
    if k < len(names) and any(n in params[:k] for n in names[k:]):
        k = len(names)
    return Binding(args, names, k)


def _takes_var_keywords(model) -> bool:
    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError, AttributeError):
        return False
    return any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())


# ---------------------------------------------------------------------------- outputs
def flatten(result) -> tuple[list[str], list[torch.Tensor]]:
    """The model's result as (names, tensors), in a fixed order (see the module doc)."""
    names: list[str] = []
    tensors: list[torch.Tensor] = []
    counter = [0]

    def add(name, t):
        names.append(name)
        tensors.append(t)

    def walk(o, key, where):
        if o is None:
            return
        if isinstance(o, torch.Tensor):
            if key is None:
                add(f"output_{counter[0]}", o)
                counter[0] += 1
            else:
                add(key, o)
            return
        if _is_cache(o):
            _walk_cache(o, add, where)
            return
        if isinstance(o, dict):
            for k in list(o.keys()):
                walk(o[k], _identifier(str(k)), f"{where}[{k!r}]")
            return
        if isinstance(o, (list, tuple)):
            if key is not None and where.endswith("past_key_values']") and _legacy_cache(o):
                for i, layer in enumerate(o):
                    add(f"present_key_{i}", layer[0])
                    add(f"present_value_{i}", layer[1])
                return
            for i, x in enumerate(o):
                walk(x, None if key is None else f"{key}_{i}", f"{where}[{i}]")
            return
        raise UsageError(f"the model's output {where or 'value'} is a {type(o).__name__}; "
                         "t2n exports tensor outputs only (tensors, or tuples, lists, dicts, "
                         "ModelOutputs and key/value caches of tensors)")

    walk(result, None, "")
    return _unique(names), tensors


def _is_cache(o) -> bool:
    return any(c.__name__.endswith("Cache") for c in type(o).__mro__) and (
        hasattr(o, "layers") or hasattr(o, "self_attention_cache"))


def _legacy_cache(o) -> bool:
    return all(isinstance(layer, (list, tuple)) and len(layer) >= 2
               and all(isinstance(t, torch.Tensor) for t in layer[:2]) for layer in o)


_LAYER_STATES = (("keys", "key"), ("values", "value"), ("conv_states", "conv_state"),
                 ("recurrent_states", "recurrent_state"))


def _walk_cache(cache, add, where: str) -> None:
    if hasattr(cache, "self_attention_cache"):
        _walk_layers(cache.self_attention_cache, "present", add, where)
        _walk_layers(cache.cross_attention_cache, "present_cross", add, where)
    else:
        _walk_layers(cache, "present", add, where)


def _walk_layers(cache, prefix: str, add, where: str) -> None:
    for i, layer in enumerate(getattr(cache, "layers", None) or []):
        for attr, short in _LAYER_STATES:
            value = getattr(layer, attr, None)
            if isinstance(value, torch.Tensor):
                if value.numel() == 0 and value.dim() == 1:
                    continue  # a layer that never received a state
                add(f"{prefix}_{short}_{i}", value)
            elif isinstance(value, (list, tuple, dict)):
                items = list(value.items() if isinstance(value, dict) else enumerate(value))
                for j, t in items:
                    if isinstance(t, torch.Tensor):  # one state: no index of its own
                        add(f"{prefix}_{short}_{i}" if len(items) == 1
                            else f"{prefix}_{short}_{i}_{j}", t)
            elif value is not None:
                raise UsageError(f"the model's output {where} holds a {type(layer).__name__} "
                                 f"whose {attr} is a {type(value).__name__}, not a tensor")


def _identifier(key: str) -> str:
    s = re.sub(r"\W", "_", key, flags=re.ASCII) or "output"
    if s[0].isdigit() or re.match(r"(inf|nan|true|false)", s, re.IGNORECASE):
        s = "o_" + s
    return s


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    taken = set(names)
    for n in names:
        if n in seen:
            k = seen[n]
            while f"{n}_{k}" in taken:
                k += 1
            seen[n] = k + 1
            taken.add(f"{n}_{k}")
            out.append(f"{n}_{k}")
        else:
            seen[n] = 1
            out.append(n)
    return out


class Adapter(torch.nn.Module):
    """What t2n traces: ``model`` called with the binding, its result flattened to a tuple
    of tensors. The user's model is only called, never changed; the names of the flattened
    outputs are kept in ``output_names`` after the first call."""

    PREFIX = "model"

    def __init__(self, model, binding: Binding):
        super().__init__()
        self.model = model
        self._binding = binding
        self.output_names: list[str] | None = None

    def forward(self, *tensors):
        names, flat = flatten(self._binding.call(self.model, tensors))
        self.output_names = names
        return tuple(flat)
