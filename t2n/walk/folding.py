"""Values for the walker's constant folding (aten ops whose inputs are all known run in
torch at export time).

Two things make folding match eager PyTorch beyond "call the op":

* Python numbers where the schema wants a Tensor: the walker keeps ``prim::NumToTensor``
  results (sizes read in Python, e.g. Swin's ``W % window``) as plain numbers so that shape
  arithmetic stays symbolic; a folded op gets the tensor the trace had there back.
* In-place ops on folded values: ``b = bias.clone(); b[16:32].zero_()`` (Swin v2's qkv
  bias) must change ``b`` through the view, as in eager. A tensor that folding itself
  created is written in place (its views and base see the write); anything else (the
  user's parameters and buffers, TorchScript constants) is never mutated: the op runs on a
  copy.
"""

from __future__ import annotations

import torch


def number_as_tensor(arg_type, value, ts_value):
    """``value`` as a tensor when it is a Python number in a Tensor (or Tensor[]) argument,
    with the dtype the trace recorded (scalar_to_tensor's: int64, float64 or bool, if none)."""
    kind = arg_type.kind()
    if kind == "OptionalType":
        arg_type = arg_type.getElementType()
        kind = arg_type.kind()
    if kind == "ListType" and arg_type.getElementType().kind() == "TensorType" \
            and isinstance(value, (list, tuple)):
        return [number_as_tensor(arg_type.getElementType(), v, None) for v in value]
    if kind != "TensorType" or not isinstance(value, (bool, int, float)):
        return value
    t = ts_value.type() if ts_value is not None else None
    dtype = t.dtype() if t is not None and t.kind() == "TensorType" else None
    if dtype is None:
        dtype = torch.bool if isinstance(value, bool) else \
            torch.int64 if isinstance(value, int) else torch.float64
    return torch.tensor(value, dtype=dtype)


def _storage(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr() if t.numel() else None
    except RuntimeError:
        return None


def _tensors(xs):
    for x in xs:
        if isinstance(x, torch.Tensor):
            yield x
        elif isinstance(x, (list, tuple)):
            yield from _tensors(x)


class FoldedStorage:
    """The storages of tensors that folding created (safe to write in place)."""

    def __init__(self):
        self._fresh: set[int] = set()

    def note(self, args: list, results: list) -> None:
        """Record the storages of ``results`` that no argument shares (new tensors)."""
        used = {_storage(t) for t in _tensors(args)}
        for r in _tensors(results):
            s = _storage(r)
            if s is not None and s not in used:
                self._fresh.add(s)

    def writable(self, t: torch.Tensor) -> bool:
        return _storage(t) in self._fresh

    @staticmethod
    def before_write(g, t: torch.Tensor, const_handles: dict) -> None:
        """Graph constants already made from ``t``'s storage keep the values they had: their
        data is copied before the write (and they are no longer reused for new uses)."""
        s = _storage(t)
        for key in [k for k, h in const_handles.items()
                    if isinstance(h.value, torch.Tensor) and _storage(h.value) == s]:
            h = const_handles.pop(key)
            if h.literal is not None:
                h.value = h.value.clone()
        for v in g.variables:
            if isinstance(v.data, torch.Tensor) and _storage(v.data) == s:
                v.data = v.data.clone()
                v.tensor.value = v.data
                for key in [k for k, h in g._var_cache.items() if h is v.tensor]:
                    del g._var_cache[key]
