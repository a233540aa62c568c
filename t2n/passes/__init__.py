"""Graph passes: graph-to-graph rewrites run on the NNEF graph after the walk.

The walk (capture -> walker -> op mappings) builds a :class:`t2n.walk.builder.Graph`; the passes
then rewrite it in place, in the order of :data:`PIPELINE`, before the writer serialises it.
Passes are where work that needs the whole graph goes (channel compaction for pruned models,
batch-norm folding, fusions into tract's fused ops, streaming forms, target lowering), so
that op mappings stay one-op-at-a-time and schema-shaped.

The pass interface
------------------
A pass is one module of this package that defines a module-level ``PASS``, a
:class:`GraphPass`:

* ``name``: the pass's name (the module's name), used in errors and reports;
* ``run(g, session) -> None``: rewrites ``g`` in place. ``session`` is the export's
  :class:`t2n.session.ExportSession`: the user's ``model`` (never modified), the example
  ``args``, the export ``options``, the target and weight format (asked through their own
  tables: ``session.target.can(...)``, ``session.weights.compresses``) and the tables the
  stages share. A pass decides itself whether it has work to do (e.g. only when its option
  is set);
* ``options``: the names of the ``t2n.export(**options)`` keywords the pass reads. ``export``
  accepts exactly the union of these and its own options, and refuses any other name once,
  before the trace starts.

Every pass must preserve the outputs of the graph exactly (or within the float tolerance of
the rewrite it documents), and must leave a graph the writer can serialise: tensors it
removes are no longer used by any op, tensors it adds are made with the builder API.

Adding a pass: write ``t2n/passes/<name>.py`` defining ``PASS``, and add ``"<name>"`` to
:data:`PIPELINE` at the place where it must run. Nothing else registers it. A module of this
package that is not named in :data:`PIPELINE` is a helper of a pass (``channels`` for
``compact``) and defines no ``PASS``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

# The passes, in the order they run: module names in this package.
PIPELINE: tuple[str, ...] = (
    "compact",  # pruned-channel compaction (compact=True; reports pruned layers anyway)
    # folding and fusing (optimize=True, the default; each keeps the outputs):
    "merge_pad",  # pad -> conv/pool padding
    "fold_affine",  # per-channel mul/add after conv/matmul -> weights and bias (batch norm)
    "fuse_norm",  # x * rsqrt(mean(x^2) + eps) -> tract_core_rms_norm (layer/RMS norm)
    "fold_affine_input",  # per-feature mul/add before linear layers -> their weights
    "einsum_to_matmul",  # batched-matmul einsums (attention) -> matmul
    "fuse_linear",  # matmul + bias add -> linear
    "fold_scale",  # mul(q @ k, s) -> s folded into the linear layer q comes from
    "transpose_first",  # transpose after an axis-merging reshape -> before it
    "collapse",  # reshape(reshape), transpose(transpose), broadcast into a binary op -> one
    "compose",  # GELU, layer norm, clamp, ... -> one call of an NNEF fragment each (tract)
    "product_broadcasts",  # products read un-broadcast operands, broadcasts move after
    #                        them (tract's einsum declutter mis-shapes a broadcast operand)
    "unshare_packed",  # a product with a large shared weight (tied head) -> two halves over
    #                    slices of it, which tract packs once instead of at every run
    "weights",  # weight storage format (weights="f16"/"q4_0"); decides on the final graph
    "broadcast_axes",  # products: size-1 broadcast axes get labels of their own (tract loads
    #                    it); rewrites op forms only, never variables, so it may follow weights
    "squeeze_weights",  # a product's constant weight without its size-1 leading axes
    #                     (tract: an einsum on the weight's own rank; tract copies it less)
    "minimal_reshape",  # reshapes written over the axes they change (axis_start/axis_count)
    "stateful_cache",  # stateful_caches={past: present}: concat([past, new]) -> tract's
    #                    dyn_kv_cache, the cache kept in the run's State (t2n llm)
)


@dataclass(frozen=True)
class GraphPass:
    name: str
    run: Callable[..., None]  # run(g: Graph, session: t2n.session.ExportSession) -> None
    options: tuple[str, ...] = ()


def pipeline() -> list[GraphPass]:
    """The passes of :data:`PIPELINE`, in order."""
    out = []
    for name in PIPELINE:
        p = importlib.import_module(f"{__name__}.{name}").PASS
        if not isinstance(p, GraphPass) or p.name != name:
            raise TypeError(f"t2n.passes.{name}.PASS must be GraphPass(name={name!r}, ...)")
        out.append(p)
    return out


def options() -> frozenset[str]:
    """The export options the passes of the pipeline read."""
    return frozenset(o for p in pipeline() for o in p.options)


def run_pipeline(g, session) -> None:
    """Run every pass of the pipeline on ``g``, in order."""
    from t2n.stopwatch import phase

    for p in pipeline():
        with phase(p.name):
            p.run(g, session)
