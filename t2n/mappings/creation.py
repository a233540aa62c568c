"""Tensor creation: ``zeros/ones/full``, their ``_like`` and ``new_*`` forms,
``scalar_tensor`` and ``arange``.

With static sizes the walker folds these in Python (every argument is a constant) and they
never reach here. They do when a size is symbolic (dynamic axes) or when the shape comes
from a tensor argument (``zeros_like(x)``): the value is then one typed scalar broadcast to
the shape (``tract_core_broadcast`` accepts symbolic sizes), and ``arange`` is
``tract_core_range`` scaled and shifted, so the graph stays one or two ops whatever the size.
The result dtype is the traced one (it reflects ``dtype=`` and torch's defaults).
"""

from __future__ import annotations

import torch

from t2n.mappings.helpers.exact_division import rounded_div
from t2n.walk.registry import aten


def _filled(g, size, value):
    dtype = g.out_dtype()
    if hasattr(value, "rank"):  # a 0-d tensor fill value computed in the graph
        if value.rank != 0:
            raise g.error("fill_value: must be a number or a 0-d tensor")
        v = g.cast(value, dtype)
    else:  # a number, or a symbolic size (torch.tensor(x.shape[1])) tract evaluates
        if isinstance(value, (bool, int, float)) and not dtype.is_floating_point:
            # torch truncates a float fill for an int dtype
            value = bool(value) if dtype == torch.bool else int(value)
        v = g.scalar(value, dtype)
    size = list(size)
    if not size:
        return g.op("tract_core_broadcast", v, shape=[], out_shape=[], out_dtype=dtype) \
            if v.literal is not None else v
    return g.op("tract_core_broadcast", v, shape=size, out_shape=size, out_dtype=dtype)


@aten("zeros")
def zeros(g, size, *_):
    return _filled(g, size, 0)


@aten("ones")
def ones(g, size, *_):
    return _filled(g, size, 1)


@aten("full")
def full(g, size, fill_value, *_):
    return _filled(g, size, fill_value)


@aten("zeros_like")
def zeros_like(g, self, *_):
    return _filled(g, self.shape, 0)


@aten("empty_like")
def empty_like(g, self, *_):
    """Uninitialised in PyTorch (every value is valid): zeros, so the archive is
    deterministic. pack_padded_sequence builds its inverse permutation with it."""
    return _filled(g, self.shape, 0)


@aten("ones_like")
def ones_like(g, self, *_):
    return _filled(g, self.shape, 1)


@aten("full_like")
def full_like(g, self, fill_value, *_):
    return _filled(g, self.shape, fill_value)


@aten("new_zeros")
def new_zeros(g, self, size, *_):
    return _filled(g, size, 0)


@aten("new_empty")
def new_empty(g, self, size, *_):
    """Uninitialised in PyTorch: zeros, as for empty_like (DeepSeek-V3 fills its key
    states this way, writing every element)."""
    return _filled(g, size, 0)


@aten("new_ones")
def new_ones(g, self, size, *_):
    return _filled(g, size, 1)


@aten("new_full")
def new_full(g, self, size, fill_value, *_):
    return _filled(g, size, fill_value)


@aten("scalar_tensor")
def scalar_tensor(g, s, *_):
    return _filled(g, [], s)


def _arange(g, start, end, step):
    """``tract_core_range`` over integer (possibly symbolic) bounds, cast to the result
    dtype; element i is start + i * step, as torch computes it."""
    for name, v in (("start", start), ("end", end), ("step", step)):
        if hasattr(v, "rank"):
            raise g.error(f"{name}: a range bound computed from tensor values is "
                          "data-dependent")
        if isinstance(v, float) and not v.is_integer():
            raise g.error(f"{name}: a fractional bound with a symbolic size is not supported")
    start, end, step = (int(v) if isinstance(v, float) else v for v in (start, end, step))
    if not isinstance(step, int) or step == 0:
        raise g.error("step: must be a non-zero static integer")
    span = end - start if step > 0 else start - end
    k = abs(step)
    n = span if k == 1 else (span + k - 1) // k
    if isinstance(n, int):
        idx = g.op("tract_core_range", start, end, step, out_shape=[n], out_dtype=torch.int64)
    else:  # symbolic: g.arange's ramp (tract mis-runs masks built from symbolic ranges)
        idx = g.arange(n)
        if step != 1:
            idx = g.binary("mul", idx, g.scalar(step, torch.int64), torch.int64)
        if not (isinstance(start, int) and start == 0):
            idx = g.binary("add", idx, g.scalar(start, torch.int64), torch.int64)
    return g.cast(idx, g.out_dtype())


@aten("arange")
def arange(g, *args):
    """The overloads ``arange(end, ...)``, ``arange(start, end, ...)`` and
    ``arange(start, end, step, ...)``, each followed by dtype, layout, device, pin_memory."""
    n_args = len(args)
    if n_args == 5:
        start, end, step = 0, args[0], 1
    elif n_args == 6:
        start, end, step = args[0], args[1], 1
    elif n_args == 7:
        start, end, step = args[0], args[1], args[2]
    else:
        raise g.error(f"unexpected arange overload with {n_args} arguments")
    return _arange(g, start, end, step)


def _linspace_values(g, start, end, steps, dtype):
    """PyTorch's two-sided formula: start + i*step below halfway, end - (n-1-i)*step above
    (runtime start/end are 0-dim tensors)."""
    if steps == 0:
        return g.broadcast_to(g.scalar(0.0, dtype), [0])
    a = g.as_tensor(start, dtype)
    b = g.as_tensor(end, dtype)
    if steps == 1:
        return g.reshape(a, [1])
    # correctly rounded as PyTorch's (tract's division is not: an integer linspace of
    # whole steps would truncate to one less)
    step = rounded_div(g, g.binary("sub", b, a, dtype), float(steps - 1), dtype)
    idx = torch.arange(steps, dtype=dtype)
    half = steps // 2
    low = g.binary("add", a, g.binary("mul", step, g.const(idx), dtype), dtype)
    rev = g.const((steps - 1 - idx).to(dtype))
    high = g.binary("sub", b, g.binary("mul", step, rev, dtype), dtype)
    mask = g.const(torch.arange(steps) < half)
    return g.op("select", mask, g.reshape(low, [steps]), g.reshape(high, [steps]),
                out_shape=[steps], out_dtype=dtype)


@aten("linspace")
def linspace(g, start, end, steps, dtype=None, *_):
    d = g.out_dtype()
    if d.is_floating_point:
        return _linspace_values(g, start, end, steps, d)
    if d == torch.bool:
        raise g.error("dtype: linspace of torch.bool is not supported")
    # PyTorch's integer linspace: start and end in the dtype, the two-sided formula in
    # double, each value truncated back
    a, b = (g.cast(g.as_tensor(v, d), torch.float64) for v in (start, end))
    return g.cast(_linspace_values(g, a, b, steps, torch.float64), d)


@aten("logspace")
def logspace(g, start, end, steps, base=10.0, dtype=None, *_):
    d = g.out_dtype()
    if d.is_floating_point:
        exps = _linspace_values(g, start, end, steps, d)
        return g.binary("pow", g.scalar(float(base), d), exps, d)
    if d == torch.bool:
        raise g.error("dtype: logspace of torch.bool is not supported (PyTorch has none)")
    return _integer_logspace(g, start, end, steps, float(base), d)


def _integer_logspace(g, start, end, steps, base, d):
    """PyTorch's integer logspace: start and end converted to the dtype (one value: start
    as it is), the two-sided exponents and the power in double, and the C++ conversion of
    each double to the dtype: truncation, and for a value past the range (or NaN) the
    x86 conversion's result, the minimum of int64 / int32 (int16/int8/uint8 go through
    int32 and keep its low bits)."""
    f64 = torch.float64
    if steps == 0:
        return g.broadcast_to(g.scalar(0, d), [0])
    if steps == 1:
        exps = g.reshape(g.as_tensor(start, f64), [1])
    else:
        a, b = (g.cast(g.as_tensor(v, d), torch.int64) for v in (start, end))
        step = g.binary("div", g.cast(g.binary("sub", b, a, torch.int64), f64),
                        float(steps - 1), f64)
        a, b = g.cast(a, f64), g.cast(b, f64)
        idx = torch.arange(steps, dtype=f64)
        low = g.binary("add", a, g.binary("mul", step, g.const(idx), f64), f64)
        high = g.binary("sub", b, g.binary("mul", step, g.const(steps - 1 - idx), f64), f64)
        mask = g.const(torch.arange(steps) < steps // 2)
        exps = g.op("select", mask, g.reshape(low, [steps]), g.reshape(high, [steps]),
                    out_shape=[steps], out_dtype=f64)
    v = g.binary("pow", g.scalar(base, f64), exps, f64)
    lo, hi, least = (-2.0 ** 63, 2.0 ** 63, -2 ** 63) if d == torch.int64 else \
        (-2.0 ** 31 - 1, 2.0 ** 31, -2 ** 31)
    inside = g.binary("and", g.binary("ge" if d == torch.int64 else "gt", v, lo, f64,
                                      out_dtype=torch.bool),
                      g.binary("lt", v, hi, f64, out_dtype=torch.bool), torch.bool)
    t = g.op("select", inside, g.cast(v, torch.int64), g.scalar(least, torch.int64),
             out_shape=[steps], out_dtype=torch.int64)
    return g.cast(t, d)
