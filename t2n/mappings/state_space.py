"""The token-by-token recurrences of state-space and linear-attention layers as
``tract_core_scan`` loops: ``t2n_llm::selective_scan`` (Mamba's selective SSM) and
``t2n_llm::gated_delta_scan`` (the gated delta rule of Qwen3-Next and its kin),
``t2n_llm::ssd_scan`` (Mamba 2's state-space recurrence).

The ops are defined in :mod:`t2n.llm_kernels`, whose eager implementations are the same
per-token loops; ``t2n llm`` substitutes them for the Python loops of transformers'
reference kernels, whose trip count is the sequence length (a trace would unroll them for
the example length only). One loop step per token, the state carried as a scan state, the
per-token outputs stacked by the scan and the last state returned: the graph's size does
not grow with the sequence, and the same graph runs a prompt of any length and a single
decoding token.
"""

from __future__ import annotations

from t2n.walk.loops import Loop
from t2n.walk.registry import aten, own_shapes


def _matmul(b, x, y, transpose_b: bool, shape):
    return b.op("matmul", x, y, transposeA=False, transposeB=transpose_b, out_shape=list(shape),
                out_dtype=x.dtype)


def _float32(g, name, t):
    if t.dtype.is_floating_point:
        return t
    raise g.error(f"{name}: a floating-point tensor is expected, got {t.dtype}")


@aten("t2n_llm::selective_scan")
@own_shapes
def selective_scan(g, decay, update, c, state):
    """``decay, update [B, D, S, N]``, ``c [B, S, N]``, ``state [B, D, N]`` ->
    ``y [B, D, S]`` and the last state: per token ``h = decay_t * h + update_t``,
    ``y_t = h @ c_t``."""
    for name, t in (("decay", decay), ("update", update), ("c", c), ("state", state)):
        _float32(g, name, t)
    bsz, d, _, n = decay.shape
    loop = Loop(g, "ssm")
    b = loop.body
    a_t = b.squeeze(loop.scan(decay, axis=2), [2])  # [B, D, N]
    u_t = b.squeeze(loop.scan(update, axis=2), [2])
    c_t = loop.scan(c, axis=1)  # [B, 1, N]
    h = loop.state(state)
    h_new = b.binary("add", b.binary("mul", a_t, h), u_t)
    y_t = _matmul(b, h_new, c_t, True, (bsz, d, 1))  # [B, D, 1]
    loop.update(h, h_new)
    y, last = loop.outputs([loop.scan_output(y_t, axis=2), loop.last_output(h_new)])
    return y, last


@aten("t2n_llm::gated_delta_scan")
@own_shapes
def gated_delta_scan(g, query, key, value, decay, beta, state):
    """``query, key [B, H, S, Dk]``, ``value [B, H, S, Dv]``, ``decay, beta [B, H, S]``,
    ``state [B, H, Dk, Dv]`` -> ``out [B, H, S, Dv]`` and the last state: per token
    ``M = M * exp(g_t)``; ``M += k_t^T ((v_t - k_t M) * beta_t)``; ``o_t = q_t M``."""
    for name, t in (("query", query), ("key", key), ("value", value), ("decay", decay),
                    ("beta", beta), ("state", state)):
        _float32(g, name, t)
    bsz, h, _, dk = query.shape
    dv = value.shape[-1]
    loop = Loop(g, "delta")
    b = loop.body
    q_t = loop.scan(query, axis=2)  # [B, H, 1, Dk]
    k_t = loop.scan(key, axis=2)
    v_t = loop.scan(value, axis=2)  # [B, H, 1, Dv]
    g_t = b.unsqueeze(loop.scan(decay, axis=2), [3])  # [B, H, 1, 1]
    beta_t = b.unsqueeze(loop.scan(beta, axis=2), [3])
    m = loop.state(state)
    decayed = b.binary("mul", m, b.op("exp", g_t))
    read = _matmul(b, k_t, decayed, False, (bsz, h, 1, dv))  # k_t M: [B, H, 1, Dv]
    delta = b.binary("mul", b.binary("sub", v_t, read), beta_t)
    k_col = b.transpose(k_t, [0, 1, 3, 2])  # [B, H, Dk, 1]
    m_new = b.binary("add", decayed, b.binary("mul", k_col, delta))
    o_t = _matmul(b, q_t, m_new, False, (bsz, h, 1, dv))
    loop.update(m, m_new)
    out, last = loop.outputs([loop.scan_output(o_t, axis=2), loop.last_output(m_new)])
    return out, last


@aten("t2n_llm::ssd_scan")
@own_shapes
def ssd_scan(g, x, dt, a, b, c, state):
    """Mamba 2: ``x [B, S, H, P]``, ``dt [B, S, H]``, ``a [H]``, ``b, c [B, S, H, N]``,
    ``state [B, H, P, N]`` -> ``y [B, S, H, P]`` and the last state: per token
    ``h = h * exp(dt_t a) + (dt_t x_t) b_t``, ``y_t = h c_t``."""
    for name, t in (("x", x), ("dt", dt), ("a", a), ("b", b), ("c", c), ("state", state)):
        _float32(g, name, t)
    bsz, _, h, p = x.shape
    loop = Loop(g, "ssd")
    body = loop.body
    a_full = loop.full(g.reshape(a, [h, 1, 1]))
    x_t = body.unsqueeze(body.squeeze(loop.scan(x, axis=1), [1]), [3])  # [B, H, P, 1]
    dt_t = body.unsqueeze(body.squeeze(loop.scan(dt, axis=1), [1]), [2, 3])  # [B, H, 1, 1]
    b_t = body.transpose(loop.scan(b, axis=1), [0, 2, 1, 3])  # [B, H, 1, N]
    c_t = body.transpose(loop.scan(c, axis=1), [0, 2, 1, 3])
    m = loop.state(state)
    decayed = body.binary("mul", m, body.op("exp", body.binary("mul", dt_t, a_full)))
    m_new = body.binary("add", decayed, body.binary("mul", body.binary("mul", dt_t, x_t), b_t))
    y_t = _matmul(body, m_new, c_t, True, (bsz, h, p, 1))  # [B, H, P, 1]
    y_t = body.unsqueeze(body.squeeze(y_t, [3]), [1])  # [B, 1, H, P]
    loop.update(m, m_new)
    y, last = loop.outputs([loop.scan_output(y_t, axis=1), loop.last_output(m_new)])
    return y, last
