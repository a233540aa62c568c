"""Exact integer arithmetic tract has no kernel for: powers with a tensor exponent, bit
shifts, floor division by a positive divisor, a fixed-count loop.

Every form keeps PyTorch's two's-complement wrap-around: tract's integer ``mul``, ``add``
and ``sub`` wrap, so a product or a sum computed in the tensor's own type is PyTorch's
result modulo 2**bits whatever the order of the operations. Op counts depend on the dtype's
width only, never on the data: a power is a square-and-multiply scan over the exponent's
bits, a shift a multiplication or division by a power of two taken from a constant table.
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.elementwise import select
from t2n.walk.builder import broadcast_shapes
from t2n.walk.loops import Loop


def int_bits(dtype: torch.dtype) -> tuple[int, bool]:
    """(width in bits, signed) of an integer dtype."""
    info = torch.iinfo(dtype)
    return info.bits, info.min < 0


def _pow2_table(dtype: torch.dtype) -> torch.Tensor:
    """``[1 << i for i < bits]`` in ``dtype`` (the top one wraps to the minimum if signed)."""
    bits, signed = int_bits(dtype)
    half = 1 << (bits - 1)
    vals = [((1 << i) + half) % (1 << bits) - half if signed else 1 << i for i in range(bits)]
    return torch.tensor(vals, dtype=dtype)


def _common(g, a, b, dtype):
    a = g.as_tensor(a, dtype)
    b = g.as_tensor(b, dtype)
    shape = list(broadcast_shapes(a.shape, b.shape))
    return g.broadcast_to(a, shape), g.broadcast_to(b, shape), shape


def fixed_loop(g, hint: str, steps: torch.Tensor, inits: list, step_fn) -> list:
    """Run ``step_fn(body, step_value, states) -> new states`` once per element of the
    constant ``steps`` (a 1-D i64 tensor), starting from ``inits`` (non-empty runtime
    tensors); returns the final states.

    tract folds a scan over a constant into its body and then fails on it ("Remove a non-1
    axis"), so the scanned steps are made a runtime tensor: ``steps + (min(first init) & 0)``.
    """
    zero = None
    for x in inits:  # (any of them may be a constant broadcast: all of them take part)
        if x.is_const:
            continue
        m = g.reduce("min_reduce", x, list(range(x.rank)), keepdim=False)
        z = g.binary("tract_core_bitand", g.cast(m, torch.int64), g.scalar(0, torch.int64),
                     torch.int64)
        zero = z if zero is None else g.binary("add", zero, z, torch.int64)
    runtime_steps = g.const(steps) if zero is None else \
        g.binary("add", g.const(steps), zero, torch.int64)
    loop = Loop(g, hint)
    b = loop.body
    s = b.reshape(loop.scan(runtime_steps, axis=0), [])
    states = [loop.state(x) for x in inits]
    news = step_fn(b, s, states)
    for st, new in zip(states, news):
        loop.update(st, new)
    return loop.outputs([loop.last_output(n) for n in news])


def _is_empty(shape) -> bool:
    return any(isinstance(d, int) and d == 0 for d in shape)


def floor_div_positive(g, x, d, dtype):
    """``floor(x / d)`` for a positive divisor ``d`` (tract's integer div truncates)."""
    q = g.binary("div", x, d, dtype)
    _, signed = int_bits(dtype)
    if not signed:
        return q
    inexact = g.binary("ne", g.binary("mul", q, d, dtype), x, dtype, out_dtype=torch.bool)
    neg = g.binary("lt", x, g.scalar(0, dtype), dtype, out_dtype=torch.bool)
    fix = g.binary("and", inexact, neg, torch.bool)
    return select(g, fix, g.binary("sub", q, g.scalar(1, dtype), dtype), q)


def shift_left(g, x, s, dtype):
    """``x << s`` as PyTorch's CPU kernel: ``x * 2**s`` wrapping, 0 when ``s`` is negative
    or at least the width."""
    bits, _ = int_bits(dtype)
    x, s, shape = _common(g, x, s, dtype)
    valid = _shift_in_range(g, s, bits, dtype)
    idx = _clamped_index(g, s, bits, dtype)
    p = g.gather(g.const(_pow2_table(dtype)), idx, 0)
    return select(g, valid, g.binary("mul", x, p, dtype), g.scalar(0, dtype))


def shift_right(g, x, s, dtype):
    """``x >> s`` as PyTorch's CPU kernel: arithmetic (floor) for signed types, and a shift
    that is negative or at least the width shifts by ``bits - 1`` (signed) or gives 0."""
    bits, signed = int_bits(dtype)
    x, s, shape = _common(g, x, s, dtype)
    valid = _shift_in_range(g, s, bits, dtype)
    zero = g.scalar(0, dtype)
    if not signed:
        idx = _clamped_index(g, s, bits, dtype)
        p = g.gather(g.const(_pow2_table(dtype)), idx, 0)
        return select(g, valid, g.binary("div", x, p, dtype), zero)
    # the sign fill (shift of bits-1 or out of range) is -1 for negatives, else 0
    top = g.binary("eq", s, g.scalar(bits - 1, dtype), dtype, out_dtype=torch.bool)
    fill = g.binary("or", top, g.op("not", valid, out_dtype=torch.bool), torch.bool)
    neg = g.binary("lt", x, zero, dtype, out_dtype=torch.bool)
    sign = select(g, neg, g.scalar(-1, dtype), zero)
    idx = _clamped_index(g, s, bits - 1, dtype)
    p = g.gather(g.const(_pow2_table(dtype)), idx, 0)
    return select(g, fill, sign, floor_div_positive(g, x, p, dtype))


def _shift_in_range(g, s, bits, dtype):
    ge0 = g.binary("ge", s, g.scalar(0, dtype), dtype, out_dtype=torch.bool)
    lt = g.binary("lt", g.cast(s, torch.int64), g.scalar(bits, torch.int64), torch.int64,
                  out_dtype=torch.bool)
    return g.binary("and", ge0, lt, torch.bool)


def _clamped_index(g, s, n, dtype):
    """``s`` clamped to ``[0, n - 1]`` as i64 gather indices."""
    s = g.cast(s, torch.int64)
    s = g.binary("max", s, g.scalar(0, torch.int64), torch.int64)
    return g.binary("min", s, g.scalar(n - 1, torch.int64), torch.int64)


def int_pow(g, base, exp, dtype):
    """``base ** exp`` for integer tensors, PyTorch's way: square-and-multiply over the
    exponent's bits (wrapping), and for a negative exponent 1 for base 1, +-1 for base -1,
    0 otherwise."""
    bits, signed = int_bits(dtype)
    base, exp, shape = _common(g, base, exp, dtype)
    if _is_empty(shape):
        return g.broadcast_to(g.scalar(0, dtype), shape)
    table = _pow2_table(torch.int64)[:bits - 1 if signed else bits]

    def step(b, bit, states):
        acc, sq, e = states
        bit = b.cast(bit, dtype)
        odd = b.binary("ne", b.binary("tract_core_bitand", e, bit, dtype), b.scalar(0, dtype),
                       dtype, out_dtype=torch.bool)
        acc = select(b, odd, b.binary("mul", acc, sq, dtype), acc)
        return [acc, int_square(b, sq), e]

    one = g.broadcast_to(g.scalar(1, dtype), shape)
    acc, _, _ = fixed_loop(g, "pow", table, [one, base, exp], step)
    if not signed:
        return acc
    zero = g.scalar(0, dtype)
    negative = g.binary("lt", exp, zero, dtype, out_dtype=torch.bool)
    odd = g.binary("ne", g.binary("tract_core_bitand", exp, g.scalar(1, dtype), dtype), zero,
                   dtype, out_dtype=torch.bool)
    is_one = g.binary("eq", base, g.scalar(1, dtype), dtype, out_dtype=torch.bool)
    is_m1 = g.binary("eq", base, g.scalar(-1, dtype), dtype, out_dtype=torch.bool)
    m1_pow = select(g, odd, g.scalar(-1, dtype), g.scalar(1, dtype))
    neg_pow = select(g, is_one, g.scalar(1, dtype), select(g, is_m1, m1_pow, zero))
    return select(g, negative, neg_pow, acc)


def int_square(g, x):
    """``x * x`` for an integer tensor: tract rewrites ``mul(x, x)`` into ``Square``, which
    has no integer kernel, so it is a product reduction over two broadcast copies."""
    stacked = g.broadcast_to(g.unsqueeze(x, [0]), [2] + list(x.shape))
    return g.reduce("tract_core_product_reduce", stacked, [0], keepdim=False)


def euclid_steps(dtype: torch.dtype) -> int:
    """Enough Euclid steps for any pair of ``dtype`` values: the worst case is consecutive
    Fibonacci numbers, about bits / log2(golden ratio) steps (plus a swap step)."""
    bits, _ = int_bits(dtype)
    return int(bits * 1.4405) + 3


def int_gcd(g, a, b, dtype):
    """``gcd(a, b)`` as PyTorch's ``calc_gcd``: a, b = |a|, |b|; while a != 0:
    a, b = b % a, a (|min| wraps to itself, as in C++). A fixed-count scan."""
    a, b, shape = _common(g, a, b, dtype)
    if _is_empty(shape):
        return g.broadcast_to(g.scalar(0, dtype), shape)
    a, b = g.unary("abs", a), g.unary("abs", b)

    def step(body, _s, states):
        x, y = states
        zero = body.scalar(0, dtype)
        nz = body.binary("ne", x, zero, dtype, out_dtype=torch.bool)
        d = select(body, nz, x, body.scalar(1, dtype))
        rem = body.binary("sub", y, body.binary("mul", body.binary("div", y, d, dtype), d,
                                                dtype), dtype)
        # the step's value is 0; adding it keeps the scanned input alive (tract fails to
        # discard an unused scan input)
        x_new = body.binary("add", select(body, nz, rem, x), body.cast(_s, dtype), dtype)
        return [x_new, select(body, nz, x, y)]

    steps = torch.zeros(euclid_steps(dtype), dtype=torch.int64)
    _, y = fixed_loop(g, "gcd", steps, [a, b], step)
    return y


def int_lcm(g, a, b, dtype):
    """``lcm(a, b)`` as PyTorch's ``calc_lcm``: 0 when the gcd is 0, else |a / gcd * b|."""
    a, b, shape = _common(g, a, b, dtype)
    d = int_gcd(g, a, b, dtype)
    zero = g.scalar(0, dtype)
    z = g.binary("eq", d, zero, dtype, out_dtype=torch.bool)
    safe = select(g, z, g.scalar(1, dtype), d)
    r = g.unary("abs", g.binary("mul", g.binary("div", a, safe, dtype), b, dtype))
    return select(g, z, zero, r)
