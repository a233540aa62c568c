"""ATen ops kept as leaves of a ``torch.export`` capture, whose output shapes torch.export
cannot derive itself: ``lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu`` (what ``nn.LSTM``/``GRU``/
``RNN`` call), ``max_pool1d``, ``istft``, ``linalg_lstsq``, ``_grouped_mm`` and
``_pad_circular`` (``F.pad(mode="circular")``).

``torch.export`` computes an op's output shapes on fake tensors, by the op's meta kernel or
by running its decomposition. For these ops that fails or fixes a size:

- the recurrent ops' C++ composite kernel loops over the time steps, and ``max_pool1d``
  computes its length in C++ integers: either fixes the axis to the example's size ("the
  code needs a fixed size");
- ``istft``'s Python decomposition asserts a frame size an odd ``n_fft`` does not give, and
  unfolds its frames along the (maybe dynamic) frame axis;
- ``linalg_lstsq`` is tagged ``dynamic_output_shape``: its residuals' size depends on the
  driver and, for 'gelsd'/'gelss', on the rank found at run time;
- circular padding branches on the sign of each amount (an amount ``(3 - S % 3) % 3``, 0
  at the example, pins ``S`` to multiples of 3);
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

The same mode routes ``narrow`` with a start tensor to ``t2n::narrow`` (aten's kernel
reads the start with ``.item()`` inside its one node: an unbacked size no output of the
node holds, which torch.export refuses) and ``one_hot`` without a class count to
``t2n::one_hot`` (aten's kernel needs ``max(x) + 1`` as a Python int; the leaf's class
axis is a size of its own that the data decides), and hands advanced-indexing calls to
:mod:`t2n.capture.index_calls`, which rewrites those torch's fake kernel gets wrong.

A size made a tensor (``torch.as_tensor(x.shape[0])``, ``torch.tensor(x.shape[-1],
dtype=torch.float32)``) goes the same way: torch's factory reads the symbolic size as a
number, fixing the axis; routed to ``aten::scalar_tensor``, which takes a symbolic scalar,
the size stays an expression of the axis in the graph (what the trace records too).
"""

from __future__ import annotations

import inspect

import torch
from torch.overrides import TorchFunctionMode

from t2n.capture import index_calls
from t2n.capture.user_frames import user_line
from t2n.errors import TraceError

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
_LIB.define("_pad_circular(Tensor self, SymInt[] pad) -> Tensor")


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


# narrow with a start tensor: aten's kernel reads the start with .item() inside its one
# node, an unbacked size no output of the node holds (PendingUnbackedSymbolNotFound); the
# result's shape needs only the length
_LIB.define("narrow(Tensor self, int dim, Tensor start, SymInt length) -> Tensor")


def _narrow_real(x, dim, start, length):
    return torch.narrow(x, dim, start, length).clone()  # an op's output owns its storage


def _narrow_fake(x, dim, start, length):
    shape = list(x.shape)
    shape[dim % x.dim()] = length
    return x.new_empty(shape)


_LIB.impl("narrow", _narrow_real, "CompositeExplicitAutograd")
torch.library.register_fake("t2n::narrow", _narrow_fake, lib=_LIB)


def _narrow_args(x, dim, start, length):
    """``narrow``'s arguments when ``start`` is a tensor (the ``narrow.Tensor`` overload),
    else None."""
    return (x, dim, start, length) if isinstance(start, torch.Tensor) else None


# one_hot without num_classes: aten's kernel reads max(x) + 1 with .item() and then needs
# it as a Python int; the leaf's result has a size of its own that only the data decides
_LIB.define("one_hot(Tensor self, int num_classes=-1) -> Tensor")


def _one_hot_real(x, num_classes=-1):
    return torch.nn.functional.one_hot(x, num_classes)


def _one_hot_fake(x, num_classes=-1):
    classes = torch.library.get_ctx().new_dynamic_size() if num_classes < 0 else num_classes
    return x.new_empty((*x.shape, classes))


_LIB.impl("one_hot", _one_hot_real, "CompositeExplicitAutograd")
torch.library.register_fake("t2n::one_hot", _one_hot_fake, lib=_LIB)


def _one_hot_args(x, num_classes=-1):
    """``one_hot``'s arguments when the class count is left to the data, else None."""
    return (x, num_classes) if num_classes < 0 else None


def _pad_circular_real(x, pad):
    return torch._C._nn._pad_circular(x, pad)


def _pad_circular_fake(x, pad):
    """Each padded axis grows by its two amounts (a negative one crops); as aten's kernel,
    an amount may wrap around the axis at most once."""
    shape = list(x.shape)
    for i in range(len(pad) // 2):
        axis, before, after = x.dim() - 1 - i, pad[2 * i], pad[2 * i + 1]
        torch._check(before <= shape[axis] and after <= shape[axis],
                     lambda: "Padding value causes wrapping around more than once.")
        shape[axis] = shape[axis] + before + after
    return x.new_empty(shape)


_LIB.impl("_pad_circular", _pad_circular_real, "CompositeExplicitAutograd")
torch.library.register_fake("t2n::_pad_circular", _pad_circular_fake, lib=_LIB)


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


def _narrow(func, args, kwargs):
    if not isinstance(args[0] if args else None, torch.Tensor):
        return None
    narrow = _narrow_args(*args, **kwargs)
    return None if narrow is None else torch.ops.t2n.narrow(*narrow)


def _one_hot(func, args, kwargs):
    if not isinstance(args[0] if args else None, torch.Tensor):
        return None
    one_hot = _one_hot_args(*args, **kwargs)
    return None if one_hot is None else torch.ops.t2n.one_hot(*one_hot)


def _index(func, args, kwargs):
    """Advanced indexing, its arguments rewritten where torch's fake kernel of
    ``aten::index`` gets them wrong (:mod:`t2n.capture.index_calls`)."""
    if kwargs:
        return None
    if func is torch.Tensor.__getitem__:
        return func(*index_calls.getitem_args(*args)) if len(args) == 2 else None
    return func(*index_calls.index_args(*args))


def _symbolic_scalar(v) -> bool:
    return isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _dtype(v):
    """The dtype ``torch.tensor`` gives a Python scalar of ``v``'s kind."""
    if isinstance(v, torch.SymBool):
        return torch.bool
    return torch.int64 if isinstance(v, torch.SymInt) else torch.get_default_dtype()


def _circular(x=None, pad=(), mode="constant", value=None) -> bool:
    """``pad(x, pad, mode, value)`` pads the tensor ``x`` circularly."""
    return mode == "circular" and isinstance(x, torch.Tensor) and value is None \
        and 0 < len(pad) <= 2 * x.dim() and len(pad) % 2 == 0


def _scalar_tensor(func, args, kwargs):
    """A symbolic size made a tensor: ``aten::scalar_tensor`` keeps it an expression."""
    if len(args) != 1 or not _symbolic_scalar(args[0]) \
            or not set(kwargs) <= {"dtype", "device"}:
        return None
    return torch.scalar_tensor(args[0], dtype=kwargs.get("dtype") or _dtype(args[0]),
                               device=kwargs.get("device"))


def _pad(func, args, kwargs):
    if not _circular(*args, **kwargs):
        return None
    return torch.ops.t2n._pad_circular(args[0], list(args[1]))


def _packed(func, args, kwargs):
    """A packed sequence: its data's length is the sum of the lengths' values, which no
    fake tensor holds (torch.export fails deep inside ``nn.LSTM``, or maps ``.data`` to a
    size it cannot bound); refused at once, saying why and which capture takes it."""
    import traceback

    where = user_line("".join(traceback.format_stack()))  # the model's line, from the stack
    error = TraceError("torch.export cannot capture packed sequences (pack_padded_sequence: "
                       f"their sizes are the lengths' values){where}")
    error.another_capture_may_help = True  # names capture='trace' and 'auto'
    raise error


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
    torch.narrow: _narrow, torch.Tensor.narrow: _narrow,
    torch.nn.functional.one_hot: _one_hot,
    _VF._pack_padded_sequence: _packed,
    torch.as_tensor: _scalar_tensor, torch.tensor: _scalar_tensor,
    torch.nn.functional.pad: _pad, torch._C._nn.pad: _pad,
    **{f: _index for f in (torch.ops.aten.index, torch.ops.aten.index.Tensor,
                           torch.Tensor.__getitem__)},
}


class Leaves(TorchFunctionMode):
    """Route the calls of :data:`_ROUTES` to their ``t2n::`` leaves while active: the
    recurrent ops (their unpacked form; the packed ``data, batch_sizes`` form is left to
    torch), ``max_pool1d``, ``istft``, ``linalg.lstsq``, ``_grouped_mm``, ``narrow`` with a
    start tensor, ``one_hot`` without a class count and circular padding; a symbolic size
    made a tensor to ``scalar_tensor``; advanced indexing goes through
    :mod:`t2n.capture.index_calls`."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        route = _ROUTES.get(func)
        out = route(func, args, kwargs) if route is not None else None
        return func(*args, **kwargs) if out is None else out
