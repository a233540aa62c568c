"""The memory layout a traced tensor had, for mappings whose PyTorch kernel depends on it
(CPU upsampling, quantized averages)."""


def channels_last_contiguous(sizes, strides) -> bool:
    """``Tensor.is_contiguous(memory_format=channels_last[_3d])`` from traced strides."""
    if strides is None or len(strides) != len(sizes):
        return False
    expected = 1
    for d in [1] + list(range(len(sizes) - 1, 1, -1)) + [0]:
        if sizes[d] != 1:
            if strides[d] != expected:
                return False
            expected *= sizes[d]
    return True
