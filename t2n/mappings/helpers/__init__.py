"""The lowering-helpers layer: building blocks that more than one op family uses.

Op families (``t2n/mappings/<family>.py``) import only :mod:`t2n.walk.registry`, the builder
(:mod:`t2n.walk.builder`) and the modules of this package, never each other; helpers import only
the builder, the registry's types and other helpers (no cycles). A helper takes the graph
``g`` and builder tensors and emits NNEF ops through the builder; it registers no mapping.

- :mod:`.elementwise`: typed ``select``/``where``, NaN/Inf tests, NaN-propagating min/max,
  careful ``log1p``/``expm1``, torch's ``sign``;
- :mod:`.indexing`: element counts, dim sizes, flattening, index normalisation and range
  checks, slice bounds, the safe ``tract_core_scatter_elements``;
- :mod:`.matrix`: batched matrix products and ``einsum`` (integer ones exact, element-wise);
- :mod:`.integer`: exact integer powers, shifts, gcd/lcm and the fixed-count loop they use;
- :mod:`.windows`: pooling window geometry;
- :mod:`.ordered_sum`: sums of gathered taps added one by one in order in the dtype (the
  float16 kernels of PyTorch that accumulate in f16: transposed convolutions, 3-D adaptive
  average pooling), one ``tract_core_scan`` over the taps;
- :mod:`.conv_backend`: which kernel the running torch picks for a float16 transposed
  convolution (its Half kernel's ordered f16 sums, or oneDNN's float32 ones);
- :mod:`.normalization`: batch-norm statistics and per-channel affine;
- :mod:`.recurrence`: the recurrent layers as ``tract_core_scan`` loops (``recurrent`` and
  the dynamically quantized LSTM/GRU of ``quantized``), with float or int8 products;
- :mod:`.quantized_tensors`: a torch.ao quantized tensor in the graph (its integers, scale
  and zero point, the exact float32 twin a requantization leaves), quantize, dequantize,
  requantize and clamp the integers;
- :mod:`.quantized_maps`, :mod:`.quantize_rounding`: what the running torch's quantized
  kernels do, asked of them (the map of the integers an element-wise op computes; where
  quantization adds the zero point; how averages round);
- :mod:`.requantization`: the float steps from int32 sums to integers that the running
  torch's quantized convolution and linear kernels take (fbgemm, qnnpack, oneDNN), asked
  of it once per layer structure;
- :mod:`.dynamic_quant`: PyTorch's dynamic quantization (run-time u8 input parameters,
  int8 x int8 -> int32 in ``tract_core_einsum_q``), for dynamic linear and recurrent layers;
- :mod:`.grouped_int8`, :mod:`.int8_inputs`, :mod:`.round_by_adds`: the faster forms of
  the static int8 layers with the same integers (grouped and few-channel 1x1 sums in
  tract's float products, an int8 input with zero point 0 where tract would re-sum a large
  weight at every run, rounding half to even by two float32 additions);
- :mod:`.special_expr`, :mod:`.gamma`: the expression layer of the special functions and the
  gamma-family kernels;
- :mod:`.complex`: complex tensors' (re, im) real form (parts, construction, running a real
  layout mapping on it), tract's FFT/STFT with PyTorch's normalisations, overlap-add;
- :mod:`.small_matrix`, :mod:`.factorizations`, :mod:`.spectral`, :mod:`.norms`: the
  unrolled small-matrix kernels (LU, Householder QR, Jacobi eigen/SVD) and the norms built
  on them, shared by the linear-algebra families and ``statistics``.
"""
