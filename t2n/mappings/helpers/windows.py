"""Pooling window geometry in PyTorch's terms (kernel, stride, padding, dilation, ceil_mode),
shared by the pooling families."""

from __future__ import annotations


def as_list(v, n: int) -> list[int]:
    """An int or a 1- or n-element sequence (kernel_size=3, stride=(2,)) as n ints."""
    if isinstance(v, int):
        return [v] * n
    v = list(v)
    return v * n if len(v) == 1 else v


def pooled_length(n, k, s, p, d, ceil_mode):
    """PyTorch's pooled length (``pooling_output_shape``).

    On a symbolic axis ``ceil_mode`` rounds the window count up, which is the floor count
    over the axis plus ``s - 1`` end positions: ``(span + s - 1) // s + 1``. PyTorch then
    drops a last window that would start in the end padding, which depends on the length
    modulo ``s``; it cannot happen when ``p + s < d * (k - 1) + 2`` (the farthest a rounded
    up window can start is ``n + p + s - d * (k - 1) - 2``), which holds for the usual
    geometries (2/2, 3/2 and 3/2 padded 1, ...). Other geometries raise ``ValueError``.
    """
    span = n + 2 * p - d * (k - 1) - 1
    if not isinstance(span, int):
        if ceil_mode:
            if p + s >= d * (k - 1) + 2:
                raise ValueError(
                    f"with kernel {k}, stride {s}, padding {p} and dilation {d} whether "
                    "PyTorch keeps the last window depends on the axis length")
            return (span + s - 1) // s + 1
        return span // s + 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def window_geometry(g, self, kernel_size, stride, padding, dilation, ceil_mode, n_spatial):
    """Kernel, stride, padding and dilation per spatial axis, the pooled sizes, and the end
    padding ``ceil_mode`` needs per axis (``extra``: static where the axis is; ``s - 1`` on
    a symbolic axis, past which no window reaches, so an ``ignore`` border leaves it out).
    """
    if self.rank not in (n_spatial + 1, n_spatial + 2):
        raise g.error(f"self: expected rank {n_spatial + 1} or {n_spatial + 2}, "
                      f"got {self.rank}")
    k = as_list(kernel_size, n_spatial)
    s = as_list(stride, n_spatial) if stride not in (None, [], ()) else list(k)
    p = as_list(padding, n_spatial)
    d = as_list(dilation, n_spatial)
    lead = self.rank - n_spatial
    sizes, extra = [], []
    for i in range(n_spatial):
        length = self.shape[lead + i]
        if ceil_mode and not isinstance(length, int) and g.streams(self, lead + i):
            raise g.error(f"ceil_mode: not supported on the streaming axis {lead + i} "
                          "(the last, partial window exists only at the end of a stream)")
        try:
            out = pooled_length(length, k[i], s[i], p[i], d[i], ceil_mode)
        except ValueError as e:
            raise g.error(f"ceil_mode: not supported on the symbolic spatial axis "
                          f"{lead + i}: {e}") from None
        if isinstance(out, int) and out <= 0:
            raise g.error(f"kernel_size: the pooled size of axis {lead + i} would be {out}")
        sizes.append(out)
        if isinstance(length, int):
            needed = (out - 1) * s[i] + d[i] * (k[i] - 1) + 1
            extra.append(max(needed - (length + 2 * p[i]), 0))
        else:
            extra.append(s[i] - 1 if ceil_mode else 0)
    return lead, k, s, p, d, sizes, extra
