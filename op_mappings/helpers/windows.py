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
    """PyTorch's pooled length (``pooling_output_shape``)."""
    span = n + 2 * p - d * (k - 1) - 1
    if not isinstance(span, int):
        if ceil_mode:
            raise ValueError("ceil_mode on a symbolic axis")
        return span // s + 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def window_geometry(g, self, kernel_size, stride, padding, dilation, ceil_mode, n_spatial):
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
        try:
            out = pooled_length(length, k[i], s[i], p[i], d[i], ceil_mode)
        except ValueError:
            raise g.error("ceil_mode: not supported on a symbolic spatial axis") from None
        if isinstance(out, int) and out <= 0:
            raise g.error(f"kernel_size: the pooled size of axis {lead + i} would be {out}")
        sizes.append(out)
        if isinstance(length, int):
            needed = (out - 1) * s[i] + d[i] * (k[i] - 1) + 1
            extra.append(max(needed - (length + 2 * p[i]), 0))
        else:
            extra.append(0)
    return lead, k, s, p, d, sizes, extra
