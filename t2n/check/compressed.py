"""The check of a compressed export: tract against PyTorch on the same rounded weights.

With ``weights="f16"`` or ``"q4_0"`` tract computes with rounded weights, so comparing it
with the original model would mix two things: whether the graph is right, and what the
compression costs. The check keeps them apart:

* the pass/fail comparison runs PyTorch on a copy of the model whose parameters hold
  exactly the values tract computes with (:func:`rounded_copy`), with the usual tolerances,
  so it proves the graph as it does for a float32 export;
* the error against the original model is measured too and reported
  (``ExportResult.extras["weights_error"]``), never judged.

The copy is built parameter by parameter: a parameter or buffer no compressed weight lives
in is shared with the user's model (not copied), the others get fresh storage that receives
the rounded values. The user's model is never modified.
"""

from __future__ import annotations

import copy

import torch

from t2n.errors import UsageError
from t2n.stopwatch import timed


def _over(storage, like: torch.Tensor) -> torch.Tensor:
    """A tensor over ``storage`` with the offset, shape and strides of ``like``."""
    return torch.empty(0, dtype=like.dtype).set_(storage, like.storage_offset(), like.shape,
                                                 like.stride())


def rounded_storages(g) -> dict[int, object]:
    """{model storage data pointer: a fresh storage holding the rounded values}."""
    fresh: dict[int, object] = {}
    for st in g.session.storage.values():
        data = st.data if st.source is None else st.source
        ptr = data.untyped_storage().data_ptr()
        if ptr not in fresh:
            fresh[ptr] = data.untyped_storage().clone()
        with torch.no_grad():
            _over(fresh[ptr], data).copy_(st.rounded() if st.source is None
                                          else _unscaled(st))
    return fresh


def _unscaled(st) -> torch.Tensor:
    """The model weight ``st.source`` of a folded weight ``st.data`` (= source x factor),
    rescaled by rounded / folded element by element: the model's own fold of it then gives
    the rounded values (to float32 precision). A folded 0 rounds to 0 (both formats)."""
    src = st.source.double()
    folded = st.data.double()
    rounded = st.rounded().double()
    ratio = torch.where(folded == 0, torch.ones_like(folded), rounded / folded)
    return (src * ratio).to(st.source.dtype)


def rounded_copy(model, g):
    """A copy of ``model`` computing with the weights tract computes with."""
    fresh = rounded_storages(g)
    if isinstance(model, torch.jit.ScriptModule):
        clone = copy.deepcopy(model)
        with torch.no_grad():
            for (_, p), (_, c) in zip(_tensors(model), _tensors(clone)):
                if p.numel() and p.untyped_storage().data_ptr() in fresh:
                    c.copy_(_over(fresh[p.untyped_storage().data_ptr()], p))
        return clone
    memo = {}
    for _, t in _tensors(model):
        ptr = t.untyped_storage().data_ptr() if t.numel() else None
        if ptr not in fresh:
            memo[id(t)] = t  # shared with the user's model, never written
            continue
        new = _over(fresh[ptr], t)
        memo[id(t)] = torch.nn.Parameter(new, requires_grad=t.requires_grad) \
            if isinstance(t, torch.nn.Parameter) else new
    try:
        return copy.deepcopy(model, memo)
    except Exception as e:
        raise UsageError(f"check with compressed weights: the model cannot be copied to run "
                         f"it on the rounded weights ({type(e).__name__}: {e}); export "
                         "without check=True, or with weights='f32'") from None


def _tensors(model):
    seen = set()
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            yield name, t


@timed("check")
def check_compressed(path: str, model, g, args, out_names, rtol: float, atol: float,
                     fresh=None, constant=()):
    """(a :class:`t2n.check.input_sets.SetsCheck` against the rounded-weight model, on the
    example and the ``fresh`` sets; the errors against the original model, on the
    example)."""
    from t2n.check.compare import compare
    from t2n.check.input_sets import InputSet, check_sets, preserved_state
    from t2n.check.eager import torch_outputs
    from t2n.check.tract_runner import run_sets_in_tract

    ref = rounded_copy(model, g)
    done = check_sets(path, ref, [InputSet("example", tuple(args))], out_names,
                      run_sets=run_sets_in_tract, rtol=rtol, atol=atol, fresh=fresh,
                      constant=tuple(constant))
    del ref
    with preserved_state(model):
        original = torch_outputs(model, args)
    cost = [compare(n, e, a, rtol=rtol, atol=atol)
            for n, e, a in zip(out_names, original, done.example_outputs)]
    return done, cost


def cost_lines(cost) -> list[str]:
    return ["error against the original (uncompressed) model: " + "; ".join(
        f"{c.name} max_abs_err={c.max_abs_err:.3g} max_rel_err={c.max_rel_err:.3g}"
        for c in cost)]
