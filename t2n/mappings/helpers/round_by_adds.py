"""Round half to even by two float32 additions, where the result is clamped to 8 bits.

tract's ``tract_core_round_even`` is a node of its own that runs about as long as a
convolution's whole requantization (measured 0.5 ms on a 1x64x56x56 tensor, against 0.06
ms for a chain of four element-wise ops). Adding ``1.5 * 2**23`` to a float32 ``y`` with
``|y| < 2**22`` lands in ``[2**23, 2**24)``, where float32 numbers are exactly the
integers: the addition itself rounds ``y`` half to even (the IEEE default, and the
constant is even, so ties keep ``y``'s parity), and adding ``offset - 1.5 * 2**23`` then
subtracts it exactly (all integers below ``2**24``). tract fuses both additions into the
element-wise chain around them (scale, zero point, clamp). For ``|y| >= 2**22`` the result
is still within one of ``y``, far outside any 8-bit range, so a clamp to that range right
after gives what rounding first would.
"""

from __future__ import annotations

import torch

_SHIFT = 1.5 * 2 ** 23
_EXACT_BELOW = 2 ** 22


def rounded_plus(g, y, offset, clamped_to: tuple[int, int]):
    """``round_half_even(y) + offset`` of float32 ``y``, to be clamped to ``clamped_to``
    right after (the caller's clamp); ``tract_core_round_even`` where the range is too
    wide for the additions. ``offset`` is an integer, or a float32 tensor of integers
    within ``clamped_to`` (a zero point computed at run time)."""
    f32 = torch.float32
    known = not hasattr(offset, "shape")
    if max(abs(clamped_to[0]), abs(clamped_to[1]), abs(offset) if known else 0) >= _EXACT_BELOW:
        y = g.op("tract_core_round_even", y)
        if known:
            return g.binary("add", y, float(offset), f32) if offset else y
        return g.binary("add", y, offset, f32)
    shifted_back = float(offset) - _SHIFT if known else g.binary("sub", offset, _SHIFT, f32)
    return g.binary("add", g.binary("add", y, _SHIFT, f32), shifted_back, f32)
