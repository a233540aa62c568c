"""Loss functions that models keep at inference (distillation heads, scoring, metrics).

``reduction`` arrives as aten's code: 0 none, 1 mean, 2 sum.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import log1p_of, select
from t2n.walk import registry
from t2n.walk.registry import aten


def _reduce(g, x, reduction):
    if reduction == 0:
        return x
    axes = list(range(x.rank))
    if not axes:
        return x
    return g.reduce("mean_reduce" if reduction == 1 else "sum_reduce", x, axes, keepdim=False)


def _f(g, *xs):
    d = g.out_dtype()
    return [g.as_tensor(x, d) if x is not None else None for x in xs] + [d]


def _lt(g, a, b, d):
    return g.binary("lt", a, b, d, out_dtype=torch.bool)


@aten("mse_loss")
def mse_loss(g, self, target, reduction=1):
    x, t, d = _f(g, self, target)
    diff = g.binary("sub", x, t, d)
    return _reduce(g, g.binary("mul", diff, diff, d), reduction)


@aten("l1_loss")
def l1_loss(g, self, target, reduction=1):
    x, t, d = _f(g, self, target)
    return _reduce(g, g.unary("abs", g.binary("sub", x, t, d)), reduction)


@aten("smooth_l1_loss")
def smooth_l1_loss(g, self, target, reduction=1, beta=1.0):
    x, t, d = _f(g, self, target)
    a = g.unary("abs", g.binary("sub", x, t, d))
    if beta == 0:
        return _reduce(g, a, reduction)
    quad = g.binary("div", g.binary("mul", g.binary("mul", a, a, d), 0.5, d), float(beta), d)
    lin = g.binary("sub", a, 0.5 * beta, d)
    return _reduce(g, select(g, _lt(g, a, g.scalar(float(beta), d), d), quad, lin), reduction)


@aten("huber_loss")
def huber_loss(g, self, target, reduction=1, delta=1.0):
    x, t, d = _f(g, self, target)
    a = g.unary("abs", g.binary("sub", x, t, d))
    quad = g.binary("mul", g.binary("mul", a, a, d), 0.5, d)
    lin = g.binary("mul", g.binary("sub", a, 0.5 * delta, d), float(delta), d)
    return _reduce(g, select(g, _lt(g, a, g.scalar(float(delta), d), d), quad, lin), reduction)


@aten("binary_cross_entropy")
def binary_cross_entropy(g, self, target, weight=None, reduction=1):
    x, t, w, d = _f(g, self, target, weight)
    floor = g.scalar(-100.0, d)
    log_x = g.binary("max", g.unary("log", x), floor, d)
    log_1mx = g.binary("max", g.unary("log", g.binary("sub", g.scalar(1.0, d), x, d)), floor, d)
    loss = g.unary("neg", g.binary("add", g.binary("mul", t, log_x, d),
                                   g.binary("mul", g.binary("sub", g.scalar(1.0, d), t, d),
                                            log_1mx, d), d))
    if w is not None:
        loss = g.binary("mul", loss, w, d)
    return _reduce(g, loss, reduction)


@aten("binary_cross_entropy_with_logits")
def bce_with_logits(g, self, target, weight=None, pos_weight=None, reduction=1):
    """PyTorch's composite, step by step in the dtype: ``log_sigmoid(x)`` (one float formula,
    rounded once), times ``(pos_weight - 1) * target + 1``, subtracted from
    ``(1 - target) * x``, times ``weight``; the reduction accumulates in float (float32 for
    float16 inputs, rounded once)."""
    x, t, w, pw, d = _f(g, self, target, weight, pos_weight)
    acc = torch.float32 if d == torch.float16 else d
    xa = g.cast(x, acc)
    # log_sigmoid(x) = min(x, 0) - log(1 + exp(-|x|))
    softplus = g.binary("add", log1p_of(g, g.unary("exp", g.unary("neg", g.unary("abs", xa)))),
                        g.binary("max", g.unary("neg", xa), 0.0, acc), acc)
    log_sig = g.cast(g.unary("neg", softplus), d)
    one = g.scalar(1.0, d)
    if pw is not None:
        log_weight = g.binary("add", g.binary("mul", g.binary("sub", pw, one, d), t, d), one, d)
        log_sig = g.binary("mul", log_sig, log_weight, d)
    loss = g.binary("sub", g.binary("mul", g.binary("sub", one, t, d), x, d), log_sig, d)
    if w is not None:
        loss = g.binary("mul", loss, w, d)
    if reduction == 0:
        return loss
    return g.cast(_reduce(g, g.cast(loss, acc), reduction), d)


@aten("kl_div")
def kl_div(g, self, target, reduction=1, log_target=False):
    x, t, d = _f(g, self, target)
    if log_target:
        loss = g.binary("mul", g.unary("exp", t), g.binary("sub", t, x, d), d)
    else:
        tlogt = g.binary("mul", t, g.unary("log", t), d)
        tlogt = select(g, g.binary("eq", t, 0.0, d, out_dtype=torch.bool), 0.0, tlogt, d)
        loss = g.binary("sub", tlogt, g.binary("mul", t, x, d), d)
    return _reduce(g, loss, reduction)


@aten("soft_margin_loss")
def soft_margin_loss(g, self, target, reduction=1):
    x, t, d = _f(g, self, target)
    z = g.unary("neg", g.binary("mul", t, x, d))
    return _reduce(g, log1p_of(g, g.unary("exp", z)), reduction)


@aten("margin_ranking_loss")
def margin_ranking_loss(g, input1, input2, target, margin=0.0, reduction=1):
    a, b, t, d = _f(g, input1, input2, target)
    z = g.binary("add", g.unary("neg", g.binary("mul", t, g.binary("sub", a, b, d), d)),
                 float(margin), d)
    return _reduce(g, g.binary("max", z, 0.0, d), reduction)


@aten("hinge_embedding_loss")
def hinge_embedding_loss(g, self, target, margin=1.0, reduction=1):
    """PyTorch's composite, each step rounded in the dtype: ``margin - x`` (the margin in
    the dtype), clamped at 0 where ``target != 1``, plus ``x`` where ``target != -1``; the
    reduction accumulates in float (float32 for float16)."""
    x, t, d = _f(g, self, target)
    acc = torch.float32 if d == torch.float16 else d
    zero = g.scalar(0.0, d)
    neg_part = g.binary("max", g.binary("sub", g.scalar(float(margin), d), x, d), zero, d)
    a = select(g, g.binary("ne", t, 1.0, d, out_dtype=torch.bool), neg_part, 0.0, d)
    b = select(g, g.binary("ne", t, -1.0, d, out_dtype=torch.bool), x, 0.0, d)
    loss = g.binary("add", a, b, d)
    if reduction == 0:
        return loss
    return g.cast(_reduce(g, g.cast(loss, acc), reduction), d)


@aten("cosine_embedding_loss")
def cosine_embedding_loss(g, input1, input2, target, margin=0.0, reduction=1):
    a, b, t, d = _f(g, input1, input2, target)
    axis = a.rank - 1
    eps = 1e-12
    dot = g.reduce("sum_reduce", g.binary("mul", a, b, d), [axis], keepdim=False)
    na = g.binary("add", g.reduce("sum_reduce", g.binary("mul", a, a, d), [axis], False), eps, d)
    nb = g.binary("add", g.reduce("sum_reduce", g.binary("mul", b, b, d), [axis], False), eps, d)
    cos = g.binary("div", dot, g.unary("sqrt", g.binary("mul", na, nb, d)), d)
    pos = g.binary("sub", g.scalar(1.0, d), cos, d)
    neg = g.binary("max", g.binary("sub", cos, float(margin), d), 0.0, d)
    loss = select(g, g.binary("eq", t, 1.0, d, out_dtype=torch.bool), pos,
                  select(g, g.binary("eq", t, -1.0, d, out_dtype=torch.bool), neg, 0.0, d))
    return _reduce(g, loss, reduction)


def _pick(g, x, target, axis):
    """x[..., target, ...] along ``axis`` (target has x's shape without that axis)."""
    idx = g.unsqueeze(g.cast(target, torch.int64), [axis])
    shape = list(x.shape)
    shape[axis] = 1
    v = g.op("tract_core_gather_elements", x, idx, axis=axis, out_shape=shape)
    return g.squeeze(v, [axis])


@aten("nll_loss", "nll_loss_nd", "nll_loss2d")
def nll_loss(g, self, target, weight=None, reduction=1, ignore_index=-100):
    d = g.out_dtype()
    x = g.cast(self, d)
    axis = 1 if x.rank >= 2 else 0
    if x.rank == 1:
        x = g.unsqueeze(x, [0])
        target = g.unsqueeze(g.cast(target, torch.int64), [0]) if target.rank == 0 else target
        axis = 1
    t = g.cast(target, torch.int64)
    valid = g.binary("ne", t, g.scalar(ignore_index, torch.int64), torch.int64,
                     out_dtype=torch.bool)
    safe_t = select(g, valid, t, 0, torch.int64)
    picked = _pick(g, x, safe_t, axis)
    w = g.cast(valid, d)
    if weight is not None:
        w = g.binary("mul", w, g.gather(g.cast(weight, d), safe_t, 0), d)
    loss = g.unary("neg", g.binary("mul", picked, w, d))
    if reduction == 0:
        return loss if self.rank != 1 else g.squeeze(loss, [0])
    total = g.reduce("sum_reduce", loss, list(range(loss.rank)), keepdim=False)
    if reduction == 2:
        return total
    return g.binary("div", total, g.reduce("sum_reduce", w, list(range(w.rank)), False), d)


@aten("cross_entropy_loss")
def cross_entropy_loss(g, self, target, weight=None, reduction=1, ignore_index=-100,
                       label_smoothing=0.0):
    d = g.out_dtype()
    x = g.cast(self, d)
    axis = 1 if x.rank >= 2 else 0
    logp = g.op("tract_core_log_softmax", x, axes=[axis], out_shape=list(x.shape))
    if target.dtype.is_floating_point:
        # class probabilities
        t = g.cast(target, d)
        if label_smoothing:
            n = x.shape[axis]
            t = g.binary("add", g.binary("mul", t, 1.0 - label_smoothing, d),
                         label_smoothing / n, d)
        prod = g.binary("mul", logp, t, d)
        if weight is not None:
            wshape = [1] * x.rank
            wshape[axis] = x.shape[axis]
            prod = g.binary("mul", prod, g.reshape(g.cast(weight, d), wshape), d)
        loss = g.unary("neg", g.reduce("sum_reduce", prod, [axis], keepdim=False))
        if reduction == 0:
            return loss
        total = g.reduce("sum_reduce", loss, list(range(loss.rank)), False) if loss.rank \
            else loss
        if reduction == 2:
            return total
        n_items = 1
        for i, s in enumerate(x.shape):
            if i != axis:
                n_items *= s
        return g.binary("div", total, float(n_items), d)
    nll = nll_loss(g, logp, target, weight, reduction, ignore_index)
    if not label_smoothing:
        return nll
    # smoothing term: mean over classes of -logp (weighted), on non-ignored items
    t = g.cast(target if x.rank >= 2 else g.unsqueeze(target, [0]), torch.int64)
    lp = logp if x.rank >= 2 else g.unsqueeze(logp, [0])
    ax = 1
    valid = g.cast(g.binary("ne", t, g.scalar(ignore_index, torch.int64), torch.int64,
                            out_dtype=torch.bool), d)
    if weight is not None:
        wshape = [1] * lp.rank
        wshape[ax] = lp.shape[ax]
        lp = g.binary("mul", lp, g.reshape(g.cast(weight, d), wshape), d)
    n = lp.shape[ax]
    smooth = g.binary("mul", g.unary("neg", g.reduce("sum_reduce", lp, [ax], False)), valid, d)
    if reduction == 0:
        smooth = smooth if x.rank >= 2 else g.squeeze(smooth, [0])
    else:
        smooth = g.reduce("sum_reduce", smooth, list(range(smooth.rank)), False)
        if reduction == 1:
            if weight is not None:
                safe_t = select(g, g.cast(valid, torch.bool), t, 0, torch.int64)
                wsum = g.reduce("sum_reduce", g.binary(
                    "mul", g.gather(g.cast(weight, d), safe_t, 0), valid, d),
                    list(range(valid.rank)), False)
            else:
                wsum = g.reduce("sum_reduce", valid, list(range(valid.rank)), False)
            smooth = g.binary("div", smooth, wsum, d)
    return g.binary("add", g.binary("mul", nll, 1.0 - label_smoothing, d),
                    g.binary("mul", smooth, label_smoothing / n, d), d)


@aten("multi_margin_loss")
def multi_margin_loss(g, self, target, p=1, margin=1.0, weight=None, reduction=1):
    d = g.out_dtype()
    x = g.cast(self, d)
    if x.rank <= 1:
        x = g.reshape(x, [1, x.shape[0] if x.rank else 1])
        target = g.reshape(target, [1])
    n_cls = x.shape[1]
    t = g.cast(target, torch.int64)
    xy = g.unsqueeze(_pick(g, x, t, 1), [1])
    z = g.binary("max", g.binary("add", g.binary("sub", g.scalar(float(margin), d), xy, d), x,
                                 d), 0.0, d)
    if p == 2:
        z = g.binary("mul", z, z, d)
    if weight is not None:
        z = g.binary("mul", z, g.unsqueeze(g.gather(g.cast(weight, d), t, 0), [1]), d)
    cls = g.const(torch.arange(n_cls).reshape(1, n_cls))
    not_y = g.binary("ne", cls, g.unsqueeze(t, [1]), torch.int64, out_dtype=torch.bool)
    z = select(g, not_y, z, 0.0, d)
    loss = g.binary("div", g.reduce("sum_reduce", z, [1], False), float(n_cls), d)
    if self.rank <= 1 and reduction == 0:
        loss = g.squeeze(loss, [0])
    return _reduce(g, loss, reduction)


@aten("triplet_margin_loss")
def triplet_margin_loss(g, anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6,
                        swap=False, reduction=1):
    from t2n.mappings.helpers.vector_norms import vector_norm_of

    d = g.out_dtype()

    def dist(a, b):
        diff = g.binary("add", g.binary("sub", a, b, d), float(eps), d)
        return vector_norm_of(g, diff, p, [diff.rank - 1], False)

    d_ap = dist(anchor, positive)
    d_an = dist(anchor, negative)
    if swap:
        d_an = g.binary("min", d_an, dist(positive, negative), d)
    loss = g.binary("max", g.binary("add", g.binary("sub", d_ap, d_an, d), float(margin), d),
                    0.0, d)
    return _reduce(g, loss, reduction)


@aten("multilabel_margin_loss")
def multilabel_margin_loss(g, self, target, reduction=1):
    """Targets list class ids up to the first -1; every (target j, non-target i) pair adds
    max(0, 1 - (x[y_j] - x[i])) / C. Pairs come from [C, C] comparisons per sample."""
    d = g.out_dtype()
    x = g.cast(self, d)
    squeeze = x.rank <= 1
    if x.rank == 0:
        x, target = g.reshape(x, [1, 1]), g.reshape(target, [1, 1])
    elif x.rank == 1:
        x, target = g.unsqueeze(x, [0]), g.unsqueeze(target, [0])
    n_cls = x.shape[1]
    t = g.cast(target, torch.int64)
    # valid target slots: before the first -1
    not_end = g.cast(g.binary("ne", t, -1, torch.int64, out_dtype=torch.bool), torch.int64)
    valid = g.binary("eq", g.reduce("tract_core_product_reduce", _prefix_window(g, not_end),
                                    [2], keepdim=False), 1, torch.int64, out_dtype=torch.bool)
    safe_t = select(g, valid, t, 0, torch.int64)
    cls = g.const(torch.arange(n_cls).reshape(1, 1, n_cls))
    # is_target[b, i]: some valid slot j holds class i
    slot_is = g.binary("and", g.unsqueeze(valid, [2]),
                       g.binary("eq", g.unsqueeze(safe_t, [2]), cls, torch.int64,
                                out_dtype=torch.bool), torch.bool)  # [B, J, C]
    is_target = g.reduce("any_reduce", slot_is, [1], keepdim=False)  # [B, C]
    x_t = _pick_many(g, x, safe_t)  # [B, J]
    margin = g.binary("sub", g.scalar(1.0, d), g.binary("sub", g.unsqueeze(x_t, [2]),
                                                        g.unsqueeze(x, [1]), d), d)  # [B,J,C]
    margin = g.binary("max", margin, 0.0, d)
    keep = g.binary("and", g.unsqueeze(valid, [2]), g.unsqueeze(g.unary("not", is_target), [1]),
                    torch.bool)
    loss = g.reduce("sum_reduce", select(g, keep, margin, 0.0, d), [1, 2], keepdim=False)
    loss = g.binary("div", loss, float(n_cls), d)
    if squeeze and reduction == 0:
        loss = g.squeeze(loss, [0])
    return _reduce(g, loss, reduction)


def _prefix_window(g, v):
    """[B, J] -> [B, J, J] with v[b, k] for k <= j and 1 elsewhere (a prefix product)."""
    j = v.shape[1]
    a = g.broadcast_to(g.unsqueeze(v, [1]), [v.shape[0], j, j])
    mask = g.const(torch.tril(torch.ones(j, j, dtype=torch.bool)).reshape(1, j, j))
    return g.op("select", mask, a, g.broadcast_to(g.scalar(1, v.dtype), [v.shape[0], j, j]),
                out_shape=[v.shape[0], j, j], out_dtype=v.dtype)


def _pick_many(g, x, idx):
    """x[b, idx[b, j]] for every j: gather_elements along the class axis."""
    return g.op("tract_core_gather_elements", x, idx, axis=1, out_shape=list(idx.shape),
                out_dtype=x.dtype)


def _linear_cross_entropy(g, input, linear_weight, target, linear_bias, weight, reduction,
                          ignore_index):
    logits = registry.lookup("linear")(g, input, linear_weight, linear_bias)
    return cross_entropy_loss(g, logits, target, weight, reduction, ignore_index, 0.0)


@aten("torch_nn::_linear_cross_entropy_batch_chunked")
def linear_cross_entropy_batch_chunked(g, input, linear_weight, target, linear_bias, weight,
                                       reduction, ignore_index, label_smoothing,
                                       batch_chunk_size, acc_policy, acc_dtype,
                                       allow_retain_graph, compute_input_grad,
                                       compute_linear_weight_grad, compute_linear_bias_grad):
    """``F.linear_cross_entropy(..., options=...)`` under torch.export (the trace takes the
    unchunked path): ``cross_entropy(linear(input, W, b), target)``, with ``reduction`` "mean"
    or "sum" and no label smoothing (the op's own preconditions). Chunking only bounds
    eager memory; tract computes the same loss in one pass. The other three outputs are
    gradients, computed only for training: refused when asked for."""
    if compute_input_grad or compute_linear_weight_grad or compute_linear_bias_grad:
        raise g.error("compute_*_grad: the op computes gradients (training); export the "
                      "model in eval mode under torch.no_grad()")
    if reduction not in ("mean", "sum") or label_smoothing:
        raise g.error(f"reduction={reduction!r}, label_smoothing={label_smoothing}: the "
                      "chunked op takes 'mean' or 'sum' without smoothing")
    loss = _linear_cross_entropy(g, input, linear_weight, target, linear_bias, weight,
                                 1 if reduction == "mean" else 2, ignore_index)
    grads = g.unavailable("gradients of linear_cross_entropy are computed for training only")
    return loss, grads, grads, grads


@aten("torch_nn::_linear_cross_entropy_batch_chunked_no_reduction")
def linear_cross_entropy_batch_chunked_no_reduction(g, input, linear_weight, target,
                                                    linear_bias, weight, ignore_index,
                                                    batch_chunk_size, acc_policy, acc_dtype):
    """The ``reduction="none"`` form of the op above: the per-sample losses."""
    return _linear_cross_entropy(g, input, linear_weight, target, linear_bias, weight, 0,
                                 ignore_index)
