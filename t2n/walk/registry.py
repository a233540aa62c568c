"""The table of mapping functions, keyed by aten op name (ops of other libraries, met by the
export capture, by their qualified name: ``torch_nn::...``).

Built-in mappings are registered with ``@aten("name", "alias", ...)``, a user's with
``t2n.mapping("namespace::op")`` (:mod:`t2n.extensions`, kept apart in ``_USER`` and looked up
first, so an explicit override of a built-in aten mapping wins). A mapping is called as
``fn(g, *args)`` with the node's arguments in schema order, already resolved (tensor handles
for tensors, Python values for everything static). In-place variants (``add_``) need no entry:
the walker runs the functional mapping and writes the result back into the mutated tensor
(and into the tensor it is a view of).
"""

from __future__ import annotations

import importlib
from typing import Callable

_MAPPINGS: dict[str, Callable] = {}
# users' mappings (t2n.extensions), by the same keys: aten ops bare, others qualified
_USER: dict[str, Callable] = {}


def aten(*names: str):
    """Register a mapping function for one or more aten op names (without ``aten::``)."""

    def register(fn: Callable) -> Callable:
        for name in names:
            old = _MAPPINGS.get(name)
            if old is not None and (old.__module__, old.__qualname__) != \
                    (fn.__module__, fn.__qualname__):
                raise RuntimeError(f"aten::{name} registered twice ({_MAPPINGS[name].__module__}"
                                   f" and {fn.__module__})")
            _MAPPINGS[name] = fn
        return fn

    return register


def own_shapes(fn: Callable) -> Callable:
    """Mark a mapping whose output shapes are exact for dynamic axes too (it derives them
    from its inputs' symbolic shapes): the walker does not ask PyTorch's shape functions,
    which for ops like ``aten::lstm`` have no symbolic answer and are slow to find that."""
    fn.t2n_own_shapes = True
    return fn


def stores_integers(fn: Callable) -> Callable:
    """Mark a mapping that widens integer weights to float itself (a dequantization, a cast):
    the walker hands it a large constant int8/uint8 tensor as a stored weight instead of
    folding the op in torch, so the archive keeps the integers (a quarter of float32) and
    tract widens them when it loads the model (:func:`t2n.walk.core.widens_stored_integers`)."""
    fn.t2n_stores_integers = True
    return fn


# Mappings of aten ops for quantized tensor arguments (t2n/mappings/quantized.py): the walker
# uses them instead of the float mapping when an argument has a quantized dtype.
_QUANTIZED: dict[str, Callable] = {}


def quantized_variant(*names: str):
    """Register the mapping an aten op takes when one of its tensors is quantized."""

    def register(fn: Callable) -> Callable:
        for name in names:
            _QUANTIZED[name] = fn
        return fn

    return register


def lookup_quantized(name: str) -> Callable | None:
    _load()
    return _QUANTIZED.get(name) or (_QUANTIZED.get(name[:-1]) if is_inplace(name) else None)


# aten ops whose float mapping is right for a quantized tensor too: they move, select or
# compare its integers without computing on them, and keep its scale and zero point (the
# quantized ops of t2n/mappings/quantized.py follow them back). Any other aten op given a
# quantized tensor and no quantized variant is refused: its float mapping would compute on
# the integers as if they were values (a pad would pad with 0, not the zero point).
_QUANTIZED_PASS_THROUGH = frozenset({
    "dequantize", "size", "dim", "numel", "view", "reshape", "_reshape_alias", "flatten",
    "unflatten", "view_as", "reshape_as", "contiguous", "clone", "detach", "alias",
    "transpose", "t", "permute", "squeeze", "unsqueeze", "select", "slice", "narrow",
    "expand", "expand_as", "repeat", "cat", "stack", "chunk", "split", "split_with_sizes",
    "unbind", "index_select", "flip", "channel_shuffle", "native_channel_shuffle",
    "pixel_shuffle", "pixel_unshuffle", "dropout", "feature_dropout", "max_pool1d",
    "max_pool2d", "max_pool3d", "max_pool2d_with_indices"})


def moves_quantized(name: str) -> bool:
    """Whether op ``name``, given a quantized tensor and no quantized variant, is right as
    it is: a ``quantized::`` op of its own, or an aten op that only moves the integers."""
    return name.startswith("quantized::") or \
        (name[:-1] if is_inplace(name) else name) in _QUANTIZED_PASS_THROUGH


# Mappings of aten ops on complex tensors (t2n/mappings/complex*.py): a node that takes or
# returns a complex tensor is converted by its entry here, never by the real mapping (which
# would read the trailing (re, im) axis as data); with no entry it is refused.
_COMPLEX: dict[str, Callable] = {}


def complex_variant(*names: str):
    """Register the mapping an aten op takes when a tensor it takes or returns is complex.
    Such a mapping derives its shapes itself (``own_shapes``): PyTorch's shape functions
    know the complex shapes, not their real (re, im) form."""

    def register(fn: Callable) -> Callable:
        own_shapes(fn)
        for name in names:
            _COMPLEX[name] = fn
        return fn

    return register


def touches_complex(inputs, out_dtypes) -> bool:
    """Whether a node takes a complex tensor handle or PyTorch gave it a complex output."""
    def flat(v):
        if isinstance(v, (list, tuple)):
            for x in v:
                yield from flat(x)
        else:
            yield v

    def is_complex(x):
        if getattr(x, "complex", None) is True:  # a builder handle
            return True
        probe = getattr(x, "is_complex", None)  # a folded torch tensor
        return isinstance(x, complex) or (callable(probe) and probe() is True)

    return any(is_complex(x) for x in flat(list(inputs))) or \
        any(d is not None and d.is_complex for d in out_dtypes)


def lookup_complex(name: str) -> Callable | None:
    _load()
    fn = _COMPLEX.get(name) or _COMPLEX.get(TORCH_ALIASES.get(name, ""))
    if fn is None and is_inplace(name):
        return None  # in-place writes into complex tensors are not lowered
    return fn


def _load() -> None:
    # Importing the mapping package registers every family. Loaded by name: the families
    # import this module (for ``@aten``), the registry never imports them.
    importlib.import_module("t2n.mappings")


# PyTorch's own op aliases (the table of TorchScript's NormalizeOps pass): the tracer rewrites
# them to the canonical op only in the graph of the traced module itself, so an alias called
# inside a submodule (every real model, and t2n's own output adapter) reaches the walker
# under its alias name. Each alias has the canonical op's schema.
TORCH_ALIASES = {
    "absolute": "abs", "clip": "clamp", "det": "linalg_det",
    "matrix_power": "linalg_matrix_power", "ger": "outer", "arccos": "acos",
    "arcsin": "asin", "arctan": "atan", "arctan2": "atan2", "arccosh": "acosh",
    "arcsinh": "asinh", "arctanh": "atanh", "fix": "trunc", "negative": "neg",
    "subtract": "sub", "greater_equal": "ge", "greater": "gt", "less_equal": "le",
    "less": "lt", "not_equal": "ne", "divide": "div", "multiply": "mul",
    "true_divide": "div", "linalg_matmul": "matmul", "inverse": "linalg_inv",
    "concatenate": "cat", "concat": "cat", "row_stack": "vstack", "swapdims": "transpose",
    "swapaxes": "transpose", "moveaxis": "movedim", "orgqr": "linalg_householder_product",
    "special_erf": "erf", "special_erfc": "erfc", "special_erfinv": "erfinv",
    "special_expit": "sigmoid", "special_exp2": "exp2", "special_expm1": "expm1",
    "special_logit": "logit", "special_logsumexp": "logsumexp", "special_round": "round",
    "special_log1p": "log1p", "special_sinc": "sinc", "special_digamma": "digamma",
    "special_psi": "digamma", "special_i0": "i0", "special_xlogy": "xlogy",
    "special_log_softmax": "log_softmax", "special_softmax": "softmax",
    "special_multigammaln": "mvlgamma", "special_polygamma": "polygamma",
    "special_gammainc": "igamma", "special_gammaincc": "igammac",
    "special_gammaln": "lgamma",
}


def _named(name: str) -> Callable | None:
    fn = _USER.get(name) or _MAPPINGS.get(name)
    if fn is None and name in TORCH_ALIASES:
        fn = _USER.get(TORCH_ALIASES[name]) or _MAPPINGS.get(TORCH_ALIASES[name])
    return fn


def register_user(qualified: str, fn: Callable, override: bool) -> None:
    """Register a user's mapping for ``qualified`` (``mylib::op``, ``aten::gelu``).

    Replacing a mapping (t2n's own or another user's) takes ``override=True``; registering
    the same function again (its module imported twice) is no replacement."""
    from t2n.errors import UsageError

    _load()
    key = qualified.removeprefix("aten::")
    old = _USER.get(key) or _MAPPINGS.get(key)
    if old is not None and _same(old, fn):
        _USER[key] = fn
        return
    if old is not None and not override:
        whose = "t2n's built-in" if key not in _USER else f"{_origin(old)}'s"
        raise UsageError(f"{qualified} already has {whose} mapping; replacing it must be "
                         f"explicit: t2n.mapping({qualified!r}, override=True)")
    if old is None and override:
        raise UsageError(f"{qualified}: override=True, but there is no mapping of "
                         f"{qualified} to override (check the op's name)")
    _USER[key] = fn


def _origin(fn: Callable) -> str:
    fn = getattr(fn, "__wrapped__", fn)
    return f"{fn.__module__}.{fn.__qualname__}"


def _same(a: Callable, b: Callable) -> bool:
    return _origin(a) == _origin(b)


def lookup(name: str) -> Callable | None:
    """The mapping for an aten op name (``index_add`` for ``index_add_`` too; PyTorch's
    aliases such as ``true_divide`` or ``arccos`` use their canonical op's mapping)."""
    _load()
    fn = _named(name)
    if fn is None and is_inplace(name):
        fn = _named(name[:-1])
    return fn


def is_inplace(name: str) -> bool:
    """An aten in-place variant (``add_``); an op of another library (``mylib::op_``) is
    what its schema says, never in-place by its name."""
    return "::" not in name and name.endswith("_") and not name.endswith("__")


def supported_ops() -> list[str]:
    """Every aten name t2n converts (in-place variants of these are converted too)."""
    _load()
    return sorted(_MAPPINGS)


def mapping_module(name: str) -> str:
    _load()
    fn = _MAPPINGS[name]
    return fn.__module__
