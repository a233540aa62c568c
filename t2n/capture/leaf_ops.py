"""ATen ops kept as leaves of a ``torch.export`` capture, whose output shapes torch.export
cannot derive itself: ``lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu`` (what ``nn.LSTM``/``GRU``/
``RNN`` call), ``max_pool1d``, ``istft``, ``linalg_lstsq`` and ``_grouped_mm``.

``torch.export`` computes an op's output shapes on fake tensors, by the op's meta kernel or
by running its decomposition. For these ops that fails or fixes a size:

- the recurrent ops' C++ composite kernel loops over the time steps, and ``max_pool1d``
  computes its length in C++ integers: either fixes the axis to the example's size ("the
  code needs a fixed size");
- ``istft``'s Python decomposition asserts a frame size an odd ``n_fft`` does not give, and
  unfolds its frames along the (maybe dynamic) frame axis;
- ``linalg_lstsq`` is tagged ``dynamic_output_shape``: its residuals' size depends on the
  driver and, for 'gelsd'/'gelss', on the rank found at run time;
- ``_grouped_mm``'s meta kernel checks CUDA's rules (bfloat16 operands, a bfloat16
  ``out_dtype``) where the CPU kernel takes float32 too.

t2n maps each op whole (a recurrent layer is one ``tract_core_scan``: t2n/mappings/
recurrent.py; istft: t2n/mappings/complex_fft.py; lstsq: linalg_spectral.py; grouped_mm:
grouped_mm.py), so it needs only their output shapes, which follow from the arguments' shapes
and options (what the trace records).

While a capture runs, :class:`Leaves` (a ``TorchFunctionMode``: the user's model and
torch's modules are left as they are) routes each call of ``torch._VF.lstm`` ... (the
unpacked form, the one ``nn.LSTM.forward`` makes), ``torch.max_pool1d``, ``torch.istft``,
``torch.linalg.lstsq`` and ``torch._grouped_mm`` to the ``t2n::`` op of the same name and
schema. Its fake kernel states the output shapes symbolically, as PyTorch's CPU kernel gives
them; its real kernel is the ATen op, so the exported program still runs as the model does.
The FX walker maps ``t2n::lstm`` by the mapping of ``aten::lstm`` (same arguments, same
order), and so on. A call a leaf does not take (another device, an ``out=`` argument) is
left to torch.
"""

from __future__ import annotations

import inspect

import torch
from torch.overrides import TorchFunctionMode

_VF = torch._C._VariableFunctions
_ARGS = ("bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, "
         "bool batch_first")
_LIB = torch.library.Library("t2n", "FRAGMENT")
_LIB.define(f"lstm(Tensor input, Tensor[] hx, Tensor[] params, {_ARGS}) "
            "-> (Tensor, Tensor, Tensor)")
for _name in ("gru", "rnn_tanh", "rnn_relu"):
    _LIB.define(f"{_name}(Tensor input, Tensor hx, Tensor[] params, {_ARGS}) "
                "-> (Tensor, Tensor)")
_LIB.define("max_pool1d(Tensor self, int[1] kernel_size, int[1] stride, int[1] padding, "
            "int[1] dilation, bool ceil_mode) -> Tensor")


def _output(input, state, bidirectional):
    """The sequence output: the input's shape with the features replaced by the last
    layer's hidden size, per direction (the state's last axis; LSTM: the projection's)."""
    return input.new_empty((*input.shape[:-1], (2 if bidirectional else 1) * state.shape[-1]))


def _register_recurrent(name: str, aten_op) -> None:
    def real(input, hx, params, *flags):
        return tuple(aten_op(input, hx, params, *flags))

    def fake(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
             batch_first):
        states = hx if isinstance(hx, (list, tuple)) else [hx]
        return (_output(input, states[0], bidirectional),
                *(s.new_empty(s.shape) for s in states))

    _LIB.impl(name, real, "CompositeExplicitAutograd")
    torch.library.register_fake(f"t2n::{name}", fake, lib=_LIB)


for _name in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
    _register_recurrent(_name, getattr(_VF, _name))


def _max_pool1d_real(x, kernel_size, stride, padding, dilation, ceil_mode):
    return _VF.max_pool1d(x, kernel_size, stride, padding, dilation, ceil_mode)


def _max_pool1d_fake(x, kernel_size, stride, padding, dilation, ceil_mode):
    # max_pool2d_with_indices' meta kernel computes the pooled length symbolically
    out, _ = torch.ops.aten.max_pool2d_with_indices(
        x.unsqueeze(-2), [1, kernel_size[0]], [1, (stride or kernel_size)[0]],
        [0, padding[0]], [1, dilation[0]], ceil_mode)
    return out.squeeze(-2).clone()


_LIB.impl("max_pool1d", _max_pool1d_real, "CompositeExplicitAutograd")
torch.library.register_fake("t2n::max_pool1d", _max_pool1d_fake, lib=_LIB)


def _same_as_aten(name: str, fake) -> None:
    """``t2n::name`` with the schema of ``aten::name`` (its default overload), the ATen op
    as its real kernel and ``fake`` as its fake one."""
    aten_op = getattr(torch.ops.aten, name).default
    _LIB.define(str(aten_op._schema).split("::", 1)[1])

    def real(*args, **kwargs):
        out = aten_op(*args, **kwargs)
        return tuple(out) if isinstance(out, (tuple, list)) else out

    _LIB.impl(name, real, "CompositeExplicitAutograd")
    torch.library.register_fake(f"t2n::{name}", fake, lib=_LIB)


def _istft_fake(self, n_fft, hop_length=None, win_length=None, window=None, center=True,
                normalized=False, onesided=None, length=None, return_complex=False):
    """``[*batch, length]``: ``length`` when given, else the overlap-added frames
    (``n_fft + hop * (frames - 1)``) less ``n_fft // 2`` at each end when ``center``
    (SpectralOps.cpp's istft), symbolic in the frame count; real unless
    ``return_complex``."""
    hop = n_fft // 4 if hop_length is None else hop_length
    if length is not None:
        size = length
    else:
        size = n_fft + hop * (self.shape[-1] - 1)
        if center:
            size = size - 2 * (n_fft // 2)
    dtype = self.dtype if return_complex else self.dtype.to_real()
    return self.new_empty((*self.shape[:-2], size), dtype=dtype)


def _lstsq_fake(self, b, rcond=None, *, driver=None):
    """The shapes of PyTorch's CPU ``linalg_lstsq`` (BatchLinearAlgebra.cpp), ``b`` a matrix
    or, one dimension short of ``self``, a vector per matrix: the solution ``[*batch, n,
    k]`` (``[*batch, n]`` for vectors) over the broadcast batch; residuals ``[*batch, k]``
    (k = 1 for vectors) for m > n except with 'gelsy', else empty; the rank ``self``'s own
    batch except with 'gels'; singular values ``[*self_batch, min(m, n)]`` with 'gelsd' and
    'gelss'. 'gelsd'/'gelss' with m > n give residuals only when every matrix has full
    rank at run time: their shape is that one (the lstsq mapping refuses the case)."""
    driver = driver or "gelsy"
    m, n = self.shape[-2], self.shape[-1]
    vector = b.dim() == self.dim() - 1
    b_shape = (*b.shape, 1) if vector else tuple(b.shape)
    batch = tuple(torch.broadcast_shapes(self.shape[:-2], b_shape[:-2]))
    k = b_shape[-1]
    real = self.dtype.to_real()
    solution = self.new_empty((*batch, n) if vector else (*batch, n, k))
    residuals = self.new_empty((*batch, k) if m > n and driver != "gelsy" else (0,),
                               dtype=real)
    rank = self.new_empty(tuple(self.shape[:-2]) if driver != "gels" else (0,),
                          dtype=torch.int64)
    values = self.new_empty((*self.shape[:-2], min(m, n)) if driver in ("gelsd", "gelss")
                            else (0,), dtype=real)
    return solution, residuals, rank, values


def _grouped_mm_fake(self, mat2, offs=None, bias=None, out_dtype=None):
    """The shape of PyTorch's CPU ``_grouped_mm`` in each layout (t2n/mappings/
    grouped_mm.py lists them), in ``out_dtype`` or the operands' dtype: the CPU kernel
    takes float32, which the meta kernel's CUDA checks refuse (the model's run on the
    example before the capture has checked the operands as the CPU kernel does)."""
    if self.dim() == 2 and mat2.dim() == 2:
        shape = (offs.shape[0], self.shape[0], mat2.shape[1])
    elif self.dim() == 2:
        shape = (self.shape[0], mat2.shape[-1])
    elif mat2.dim() == 2:
        shape = (self.shape[1], mat2.shape[1])
    else:
        shape = (self.shape[0], self.shape[1], mat2.shape[-1])
    return self.new_empty(shape, dtype=out_dtype or self.dtype)


_same_as_aten("istft", _istft_fake)
_same_as_aten("linalg_lstsq", _lstsq_fake)
_same_as_aten("_grouped_mm", _grouped_mm_fake)


# --------------------------------------------------------------------------- routing
# Each route takes a torch function's call (func, args, kwargs) and returns the leaf's
# result, or None for a call its leaf does not take (left to torch, which then raises its
# own error for a call it does not take either).

def _bound(signature, args, kwargs):
    """The call's arguments bound to ``signature`` (the torch function's Python one,
    defaults applied), or None when they do not fit it (``out=``, a wrong argument)."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return bound.arguments


def _on_cpu(*tensors) -> bool:
    return all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in tensors)


def _recurrent(func, args, kwargs):
    if kwargs or not _unpacked(func, args):
        return None
    return _RECURRENT[func](*args)


def _unpacked(func, args) -> bool:
    """``lstm.input(input, hx[], params[], ...)``, ``gru.input(input, hx, params[], ...)``:
    not the ``.data`` overloads, whose second argument is the packed batch sizes."""
    if len(args) != 9:
        return False
    if func is _VF.lstm:
        return isinstance(args[1], (list, tuple))
    return isinstance(args[1], torch.Tensor) and isinstance(args[2], (list, tuple))


def _pool_args(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """``max_pool1d``'s arguments in schema order, each int list as a list (``F``'s
    ``stride=None``, the kernel size, as aten's ``[]``); None with ``return_indices``."""
    def ints(v):
        return [] if v is None else [v] if isinstance(v, int) else list(v)
    if return_indices:
        return None
    return (x, ints(kernel_size), ints(stride), ints(padding), ints(dilation),
            bool(ceil_mode))


def _max_pool1d(func, args, kwargs):
    if not (isinstance(args[0] if args else None, torch.Tensor) and args[0].dim() in (2, 3)):
        return None
    pool = _pool_args(*args, **kwargs)
    return None if pool is None else torch.ops.t2n.max_pool1d(*pool)


def _istft_signature(input, n_fft, hop_length=None, win_length=None, window=None,
                     center=True, normalized=False, onesided=None, length=None,
                     return_complex=False):
    """``torch.istft``'s arguments (``Tensor.istft`` passes its tensor as the first)."""


def _istft(func, args, kwargs):
    a = _bound(_ISTFT, args, kwargs)
    if a is None or not isinstance(a["input"], torch.Tensor):
        return None
    return torch.ops.t2n.istft(*a.values())


def _lstsq_signature(input, b, rcond=None, *, driver=None):
    """``torch.linalg.lstsq``'s arguments."""


def _lstsq(func, args, kwargs):
    a = _bound(_LSTSQ, args, kwargs)
    if a is None or not _on_cpu(a["input"], a["b"]):  # the leaf's shapes are the CPU's
        return None
    return torch.return_types.linalg_lstsq(
        torch.ops.t2n.linalg_lstsq(a["input"], a["b"], a["rcond"], driver=a["driver"]))


def _grouped_mm_signature(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """``torch._grouped_mm``'s arguments (``F.grouped_mm`` takes all but the operands by
    keyword; it calls ``torch._grouped_mm``, which the mode sees too)."""


def _grouped_mm(func, args, kwargs):
    a = _bound(_GROUPED_MM, args, kwargs)
    if a is None or not _on_cpu(a["mat_a"], a["mat_b"]):  # CUDA: torch's own meta kernel
        return None
    return torch.ops.t2n._grouped_mm(*a.values())


_ISTFT = inspect.signature(_istft_signature)
_LSTSQ = inspect.signature(_lstsq_signature)
_GROUPED_MM = inspect.signature(_grouped_mm_signature)
_RECURRENT = {getattr(_VF, n): getattr(torch.ops.t2n, n)
              for n in ("lstm", "gru", "rnn_tanh", "rnn_relu")}
# F.max_pool1d reaches a TorchFunctionMode as itself (its own torch-function dispatch),
# and the torch function it calls then runs with the mode off; Tensor.istft likewise
_ROUTES = {
    **{f: _recurrent for f in _RECURRENT},
    **{f: _max_pool1d for f in (_VF.max_pool1d, torch.nn.functional.max_pool1d,
                                torch.nn.functional._max_pool1d)},
    _VF.istft: _istft, torch.Tensor.istft: _istft,
    torch.linalg.lstsq: _lstsq,
    _VF._grouped_mm: _grouped_mm,
}


class Leaves(TorchFunctionMode):
    """Route the calls of :data:`_ROUTES` to their ``t2n::`` leaves while active: the
    recurrent ops (their unpacked form; the packed ``data, batch_sizes`` form is left to
    torch), ``max_pool1d``, ``istft``, ``linalg.lstsq`` and ``_grouped_mm``."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        route = _ROUTES.get(func)
        out = route(func, args, kwargs) if route is not None else None
        return func(*args, **kwargs) if out is None else out
