"""Which of PyTorch's CPU kernels runs a float16 transposed convolution, asked of the
running torch (``torch._C._select_conv_backend``, the choice ``aten::convolution`` makes).

The two kernels round differently, by tens of f16 ulps on long or cancelling sums:

- ``slow_conv_transpose2d/3d`` (the generic Half kernel) computes each kernel tap's column
  as an f32 product rounded to f16 and adds the columns into the output in f16, tap after
  tap (``col2im``);
- oneDNN (``MkldnnTranspose``), which torch picks for float16 on CPUs with AVX512-FP16 or
  AMX-FP16 while ``torch.backends.mkldnn`` is enabled, accumulates in float32 and rounds the
  result (bias included) to f16 once.

The choice depends on the machine, the flags and the convolution's arguments, so the mapping
asks torch with tensors of the node's shapes (uninitialised; no convolution runs).
"""

from __future__ import annotations

import torch


def sums_taps_in_f16(x_shape, w_shape, has_bias, stride, padding, dilation, output_padding,
                     groups) -> bool:
    """True when torch runs this float16 transposed convolution with its generic Half
    kernel (ordered f16 sums of tap columns), False when a kernel accumulating in float32
    runs it. A symbolic size is taken as 1 (the batch); torch without the query keeps the
    generic kernel's answer."""
    select = getattr(torch._C, "_select_conv_backend", None)
    if select is None:
        return True
    sizes = [d if isinstance(d, int) else 1 for d in x_shape]
    x = torch.empty(sizes, dtype=torch.float16)
    w = torch.empty(list(w_shape), dtype=torch.float16)
    b = torch.empty([w_shape[1] * groups], dtype=torch.float16) if has_bias else None
    backend = select(x, w, b, list(stride), list(padding), list(dilation), True,
                     list(output_padding), groups)
    slow = {torch._C._ConvBackend.SlowTranspose2d, torch._C._ConvBackend.SlowTranspose3d}
    return backend in slow
