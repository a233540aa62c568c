"""Property test: small random models built from supported ops export and match in tract.

Hypothesis draws a chain of 1-6 steps over one or two inputs of random shapes (rank 1-4,
sizes 1-4; float32, or int64/int32 for exact integer chains): element-wise unary and
binary ops (broadcasting against earlier values or a weight), shape ops (transpose,
permute, reshape, unsqueeze/squeeze, flatten, slicing with steps, cat, flip, expand) and
reductions (sum, mean, amax, amin, softmax, cumsum, argmax), then exports the model and
compares tract with PyTorch. Each step is evaluated in torch while it is drawn, so every
generated model is valid PyTorch; only kinds whose aten ops t2n registers are offered. A
second test makes axis 0 dynamic and checks the one archive at two other batch sizes.

Budget: ``T2N_RANDOM_MODELS`` examples (default 100, about 5 s: tract runs in one
persistent worker process), derandomised, so CI runs the same models every time. Hunt
locally with more and other models: ``T2N_RANDOM_MODELS=2000 T2N_RANDOM_SEED=7 pytest ...``.
"""

import os
import tempfile

import pytest
import torch
from hypothesis import HealthCheck, assume, given, seed, settings
from hypothesis import strategies as st

import t2n
from t2n.check.compare import compare
from t2n.check.tract_runner import TractRunError, TractWorker

BUDGET = int(os.environ.get("T2N_RANDOM_MODELS", "100"))
HUNT_SEED = os.environ.get("T2N_RANDOM_SEED")  # set to explore other models than CI's


# ---------------------------------------------------------------------------- steps
# Each kind: (aten ops it emits, builder). A builder gets (draw, x, pool) and returns
# (fn, arg_indices_extra, description) or None if it does not apply to x.

def _dims(draw, rank, what="dim"):
    return draw(st.integers(-rank, rank - 1), label=what) if rank else None


# Only ops continuous in their input: floor/ceil/round would turn a last-bit difference
# (softmax -> cumsum giving 0.99999994 instead of 1.0) into a difference of 1.
UNARY = {
    "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "neg": torch.neg,
    "abs": torch.abs, "sin": torch.sin, "cos": torch.cos, "erf": torch.erf,
    "exp": lambda v: torch.exp(torch.tanh(v)),
    "square": torch.square, "gelu": torch.nn.functional.gelu,
    "log1p": lambda v: torch.log1p(torch.abs(v)), "sqrt": lambda v: torch.sqrt(torch.abs(v)),
    "reciprocal": lambda v: torch.reciprocal(torch.abs(v) + 1),
}
UNARY_ATEN = {"exp": ["exp", "tanh"], "log1p": ["log1p", "abs"], "sqrt": ["sqrt", "abs"],
              "reciprocal": ["reciprocal", "abs", "add"]}

BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul,
    "div": lambda a, b: a / (torch.abs(b) + 1), "maximum": torch.maximum,
    "minimum": torch.minimum, "where": lambda a, b: torch.where(a > b, a, b),
    "pow": lambda a, b: torch.pow(torch.abs(a) + 0.5, torch.clamp(b, -2, 2)),
}
BINARY_ATEN = {"div": ["div", "abs", "add"], "where": ["where", "gt"],
               "pow": ["pow", "abs", "add", "clamp"]}

REDUCE = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax, "amin": torch.amin}

# Integer chains (i64 / i32 inputs in [-5, 5]): exact comparison, typed literals, integer
# division and remainder semantics. Divisors are |b| + 1, never 0.
INT_UNARY = {"neg": torch.neg, "abs": torch.abs, "relu": torch.relu}
INT_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum,
    "minimum": torch.minimum, "where": lambda a, b: torch.where(a > b, a, b),
    "floor_divide": lambda a, b: torch.floor_divide(a, torch.abs(b) + 1),
    "remainder": lambda a, b: torch.remainder(a, torch.abs(b) + 1),
    "div_trunc": lambda a, b: torch.div(a, torch.abs(b) + 1, rounding_mode="trunc"),
}
INT_BINARY_ATEN = {"where": ["where", "gt"], "floor_divide": ["floor_divide", "abs", "add"],
                   "remainder": ["remainder", "abs", "add"], "div_trunc": ["div", "abs", "add"]}
INT_REDUCE = {"sum": torch.sum, "amax": torch.amax, "amin": torch.amin}


def _broadcastable(a, b):
    try:
        torch.broadcast_shapes(a, b)
        return True
    except RuntimeError:
        return False


def draw_step(draw, x, pool, supported, kinds):
    """One step applied to the latest value ``x`` -> (fn, extra pool indices, text)."""
    rank = x.dim()
    is_float = x.is_floating_point()
    unary, binary, reduce_ = (UNARY, BINARY, REDUCE) if is_float else \
        (INT_UNARY, INT_BINARY, INT_REDUCE)
    aten_of = {**UNARY_ATEN, **BINARY_ATEN} if is_float else INT_BINARY_ATEN
    offered = ["unary", "binary", "scalar"] + ([] if is_float else ["to_float"])
    if rank >= 1:
        offered += ["reduce", "cumsum", "slice", "flip", "unsqueeze", "cat", "argmax"]
        offered += ["softmax"] if is_float else []
    if rank >= 2:
        offered += ["transpose", "permute", "flatten", "reshape"]
    if any(s == 1 for s in x.shape):
        offered += ["squeeze", "expand"]
    kind = draw(st.sampled_from(offered), label="kind")
    kinds.append(kind)

    if kind == "to_float":
        return (lambda a: a.float() * 0.25), [], "float"
    if kind == "unary":
        name = draw(st.sampled_from(sorted(n for n in unary if
                                           set(aten_of.get(n, [n])) <= supported)))
        return unary[name], [], name
    if kind == "binary":
        name = draw(st.sampled_from(sorted(n for n in binary if
                                           set(aten_of.get(n, [n])) <= supported)))
        partners = [i for i, v in enumerate(pool) if _broadcastable(v.shape, x.shape)
                    and v.dtype == x.dtype]
        j = draw(st.sampled_from(partners), label="partner")
        swap = draw(st.booleans(), label="swap")
        fn = binary[name]
        return ((lambda a, b: fn(b, a)) if swap else fn), [j], f"{name}(pool[{j}])"
    if kind == "scalar":
        consts = [0.5, -2.0, 3.0, 1e-3] if is_float else [2, -3, 1, 0]
        c = draw(st.sampled_from(consts))
        op = draw(st.sampled_from(["add", "mul", "sub", "rsub", "weight"]))
        if op == "weight":
            # a parameter of a broadcastable suffix shape (a .dat file or an inline literal)
            k = draw(st.integers(0, rank), label="weight rank")
            shape = [s if draw(st.booleans()) else 1 for s in x.shape[rank - k:]]
            gen = torch.Generator().manual_seed(len(pool))
            w = torch.randn(shape, generator=gen) if is_float else \
                torch.randint(-3, 4, shape, generator=gen, dtype=x.dtype)
            return (lambda a: a * w), [], f"* weight{list(shape)}"
        fns = {"add": lambda a: a + c, "mul": lambda a: a * c, "sub": lambda a: a - c,
               "rsub": lambda a: c - a}
        return fns[op], [], f"{op} {c}"
    if kind == "reduce":
        name = draw(st.sampled_from(sorted(n for n in reduce_ if n in supported)))
        d = _dims(draw, rank)
        keep = draw(st.booleans(), label="keepdim")
        f = reduce_[name]
        return (lambda a: f(a, dim=d, keepdim=keep)), [], f"{name}({d}, {keep})"
    if kind == "softmax":
        d = _dims(draw, rank)
        log = draw(st.booleans())
        f = torch.log_softmax if log else torch.softmax
        return (lambda a: f(a, d)), [], f"{'log_' if log else ''}softmax({d})"
    if kind == "cumsum":
        d = _dims(draw, rank)
        return (lambda a: torch.cumsum(a, d)), [], f"cumsum({d})"
    if kind == "argmax":
        d = _dims(draw, rank)
        keep = draw(st.booleans())
        if is_float:
            return (lambda a: torch.argmax(a, d, keep).float()), [], f"argmax({d}, {keep})"
        return (lambda a: torch.argmax(a, d, keep).to(a.dtype)), [], f"argmax({d}, {keep})"
    if kind == "slice":
        d = _dims(draw, rank)
        n = x.shape[d]
        start = draw(st.integers(-n, n), label="start")
        stop = draw(st.integers(-n, n), label="stop")
        step = draw(st.integers(1, 3), label="step")
        sl = [slice(None)] * rank
        sl[d] = slice(start, stop, step)
        sl = tuple(sl)
        if x[sl].numel() == 0:
            sl = tuple(slice(None) if i != d % rank else slice(0, None, step)
                       for i in range(rank))
        return (lambda a: a[sl]), [], f"[{d}: {sl[d % rank]}]"
    if kind == "flip":
        d = _dims(draw, rank)
        return (lambda a: torch.flip(a, (d,))), [], f"flip({d})"
    if kind == "unsqueeze":
        d = draw(st.integers(-rank - 1, rank))
        return (lambda a: a.unsqueeze(d)), [], f"unsqueeze({d})"
    if kind == "squeeze":
        d = draw(st.sampled_from([i for i, s in enumerate(x.shape) if s == 1]))
        return (lambda a: a.squeeze(d)), [], f"squeeze({d})"
    if kind == "expand":
        shape = [s if s != 1 else draw(st.integers(1, 3)) for s in x.shape]
        return (lambda a: a.expand(*shape)), [], f"expand({shape})"
    if kind == "cat":
        d = _dims(draw, rank)
        partners = [i for i, v in enumerate(pool) if v.dim() == rank and all(
            v.shape[k] == x.shape[k] for k in range(rank) if k != d % rank)]
        j = draw(st.sampled_from(partners), label="partner")
        stack = draw(st.booleans()) and pool[j].shape == x.shape
        if stack:
            return (lambda a, b: torch.stack([a, b], d)), [j], f"stack(pool[{j}], {d})"
        return (lambda a, b: torch.cat([a, b * 2], d)), [j], f"cat(pool[{j}], {d})"
    if kind == "transpose":
        i, j = _dims(draw, rank), _dims(draw, rank)
        return (lambda a: a.transpose(i, j)), [], f"transpose({i}, {j})"
    if kind == "permute":
        perm = draw(st.permutations(range(rank)))
        return (lambda a: a.permute(*perm)), [], f"permute({list(perm)})"
    if kind == "flatten":
        s = draw(st.integers(0, rank - 1))
        e = draw(st.integers(s, rank - 1))
        return (lambda a: torch.flatten(a, s, e)), [], f"flatten({s}, {e})"
    if kind == "reshape":
        n = x.numel()
        divs = [k for k in range(1, n + 1) if n % k == 0]
        k = draw(st.sampled_from(divs))
        shape = (k, -1) if draw(st.booleans()) else (-1, k)
        return (lambda a: a.reshape(shape)), [], f"reshape{shape}"
    raise AssertionError(kind)


class RandomChain(torch.nn.Module):
    def __init__(self, steps, n_inputs, outputs):
        super().__init__()
        self.steps = steps  # [(fn, [pool indices])] ; value k+n_inputs is step k's output
        self.n_inputs = n_inputs
        self.outputs = outputs

    def forward(self, *inputs):
        pool = list(inputs)
        for fn, idx in self.steps:
            pool.append(fn(*[pool[i] for i in idx]))
        return tuple(pool[i] for i in self.outputs)


@st.composite
def random_models(draw, supported, dynamic=False):
    """(model, example inputs, text). With ``dynamic``, axis 0 of the first input (and of
    the second where it lines up) has size >= 2 and ``model.batch_axes`` says which input
    axes follow the batch."""
    n_inputs = draw(st.integers(1, 2), label="inputs")
    rank = draw(st.integers(1, 4), label="rank")
    shape = [draw(st.integers(1, 4)) for _ in range(rank)]
    if dynamic:
        shape[0] = draw(st.integers(2, 4), label="batch")
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 16), label="seed"))
    dtype = draw(st.sampled_from([torch.float32] * 3 + [torch.int64, torch.int32]))

    def make(shape_):
        if dtype.is_floating_point:
            return torch.randn(shape_, generator=gen)
        return torch.randint(-5, 6, shape_, generator=gen, dtype=dtype)

    inputs = [make(shape)]
    batch_axes = {0: 0}
    if n_inputs == 2:  # a broadcastable partner: some axes 1, maybe fewer leading axes
        drop = draw(st.integers(0, rank - 1))
        shape2 = [s if draw(st.booleans()) else 1 for s in shape[drop:]]
        inputs.append(make(shape2))
        if drop == 0 and shape2[0] == shape[0]:
            batch_axes[1] = 0
    pool = list(inputs)
    steps, text = [], []
    kinds = []
    for _ in range(draw(st.integers(1, 6), label="steps")):
        x = pool[-1]
        fn, extra, desc = draw_step(draw, x, pool, supported, kinds)
        with torch.no_grad():
            y = fn(x, *[pool[i] for i in extra])
        # integer chains stay far from overflow (wrap-around is not what is tested here)
        assume(y.is_floating_point() or y.numel() == 0 or int(y.abs().max()) < 2 ** 20)
        steps.append((fn, [len(pool) - 1] + extra))
        text.append(desc)
        pool.append(y)
    outputs = [len(pool) - 1]
    if draw(st.booleans(), label="second output") and len(pool) > n_inputs + 1:
        outputs.insert(0, draw(st.integers(n_inputs, len(pool) - 2)))
    model = RandomChain(steps, n_inputs, outputs)
    model.kinds = kinds
    model.batch_axes = batch_axes
    model.make = make
    return model, tuple(inputs), " -> ".join(text)


@pytest.fixture(scope="module")
def worker():
    w = TractWorker()
    yield w
    w.close()


def test_random_models_export_and_match(worker):
    supported = set(t2n.supported_ops())
    stats = {"models": 0, "ops": 0, "failures": []}

    @settings(max_examples=BUDGET, derandomize=HUNT_SEED is None, deadline=None,
              database=None, suppress_health_check=list(HealthCheck), print_blob=True)
    @given(random_models(supported))
    @seed(int(HUNT_SEED or 0))
    def check(case):
        model, args, text = case
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.nnef")
            r = t2n.export(model, args, path)
            try:
                got = worker.run(path, [a.numpy() for a in args])
            except TractRunError as e:
                raise AssertionError(f"tract failed on {text}: {e}") from None
        with torch.no_grad():
            expected = [o.numpy() for o in model(*args)]
        assert len(got) == len(expected), text
        for k, (e, a) in enumerate(zip(expected, got)):
            c = compare(f"output_{k}", e, a, rtol=1e-4, atol=1e-5)
            assert c.ok, f"{text}: {c.line()} (inputs {[tuple(x.shape) for x in args]})"
        stats["models"] += 1
        stats["ops"] += r.op_count

    check()
    # the property test really ran (a generator that rejects everything would pass vacuously)
    assert stats["models"] >= min(BUDGET, 20), stats
    print(f"random models: {stats['models']} exported and matched in tract, "
          f"{stats['ops']} NNEF ops in total")


DYNAMIC_BUDGET = max(BUDGET // 2, 1)


def test_random_models_with_a_dynamic_batch_axis(worker, capture):
    """Axis 0 exported as the symbol B; the one archive must match PyTorch at other sizes.

    A clean refusal by t2n (a T2NError naming the op) is allowed and counted; an archive
    that tract cannot run or that computes other numbers is a bug, and so is any other
    error (torch.export's guards once divided by zero reading ``Mod(2*B, B // 3)``)."""
    supported = set(t2n.supported_ops())
    stats = {"models": 0, "sizes": 0, "refused": {}}

    @settings(max_examples=DYNAMIC_BUDGET, derandomize=HUNT_SEED is None, deadline=None,
              database=None, suppress_health_check=list(HealthCheck), print_blob=True)
    @given(random_models(supported, dynamic=True))
    @seed(int(HUNT_SEED or 0) + 1)
    def check(case):
        model, args, text = case
        dyn = {f"input_{i}": {axis: "B"} for i, axis in model.batch_axes.items()}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.nnef")
            try:
                t2n.export(model, args, path, dynamic_axes=dyn, capture=capture)
            except t2n.T2NError as e:
                lines = str(e).splitlines()
                key = " ".join(ln.strip() for ln in lines[1:3] or lines[:1])[:120]
                stats["refused"][key] = stats["refused"].get(key, 0) + 1
                return
            stats["models"] += 1
            for b in (args[0].shape[0] + 1, args[0].shape[0] + 3):
                gen_args = []
                for i, a in enumerate(args):
                    shape = list(a.shape)
                    if i in model.batch_axes:
                        shape[model.batch_axes[i]] = b
                    gen_args.append(model.make(shape))
                try:
                    with torch.no_grad():
                        expected = [o.numpy() for o in model(*gen_args)]
                except RuntimeError:
                    continue  # the model itself is specialised to the example batch
                try:
                    got = worker.run(path, [a.numpy() for a in gen_args])
                except TractRunError as e:
                    raise AssertionError(f"tract failed at B={b} on {text} (example inputs "
                                         f"{[tuple(a.shape) for a in args]}): {e}") from None
                assert len(got) == len(expected), text
                for k, (e, a) in enumerate(zip(expected, got)):
                    c = compare(f"output_{k}", e, a, rtol=1e-4, atol=1e-5)
                    assert c.ok, f"B={b}: {text}: {c.line()}"
                stats["sizes"] += 1

    check()
    assert stats["models"] >= min(DYNAMIC_BUDGET, 10), stats
    print(f"dynamic random models: {stats['models']} exported, checked at {stats['sizes']} "
          f"other batch sizes; refused: {stats['refused'] or 'none'}")


def test_generator_covers_every_step_kind():
    """Every kind of step is reachable (else a coverage gap would hide silently)."""
    supported = set(t2n.supported_ops())
    seen = set()

    @settings(max_examples=400, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(random_models(supported))
    def collect(case):
        seen.update(case[0].kinds)

    collect()
    every = {"unary", "binary", "scalar", "reduce", "softmax", "cumsum", "slice", "flip",
             "unsqueeze", "cat", "argmax", "transpose", "permute", "flatten", "reshape",
             "squeeze", "expand", "to_float"}
    assert seen == every, sorted(every - seen)


# ---------------------------------------------------------------------------- regressions
# Bugs the generator found, pinned as plain tests (the generator's seed may move on).

class SoftmaxThenStride(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, 0)[::2], torch.softmax(x, -1)[..., 1::2]


class ReshapeThenStride(torch.nn.Module):
    def forward(self, x):
        return x.reshape(-1, 1)[::2], torch.cumsum(x, 0)[::3]


@pytest.mark.parametrize("model,shape", [
    (SoftmaxThenStride(), (5, 4)),   # tract pulled the strided slice over the softmax
    (ReshapeThenStride(), (2, 3)),   # tract refused: "Pulling Downsample over Reshape"
], ids=["softmax-then-stride", "reshape-then-stride"])
def test_strided_slice_after_softmax_or_reshape(model, shape):
    from t2n.testing import assert_exports

    assert_exports(model, (torch.randn(shape),))


def test_strided_slice_of_a_dynamic_axis_after_reshape(capture):
    """``softmax(x, 0)[1::3]`` has ``(B + 1)//3`` rows, 1 at the example B = 4: torch's
    stride check guards on that 1 under torch.export, which picks a layout, not values."""
    from t2n.testing import assert_exports

    class M(torch.nn.Module):
        def forward(self, x):
            return x.reshape(-1, 1).abs()[::2], torch.softmax(x, 0)[1::3]

    assert_exports(M(), (torch.randn(4, 3),), input_names=["x"], dynamic_axes={"x": {0: "B"}},
                   more_args=[(torch.randn(3, 3),), (torch.randn(7, 3),)])


class MixedSignSlices(torch.nn.Module):
    def forward(self, x):
        return x[-1:2], x[-3:], x[1:-1], x[-7:4], x[5:]


def test_mixed_sign_slice_bounds_on_a_dynamic_axis():
    """The trace keeps each bound's clamping symbolic (torch.export does not: below)."""
    from t2n.testing import assert_exports

    assert_exports(MixedSignSlices(), (torch.randn(2),), input_names=["x"],
                   dynamic_axes={"x": {0: "B"}}, capture="trace",
                   more_args=[(torch.randn(5),), (torch.randn(1),), (torch.randn(9),)])


def test_mixed_sign_slice_bounds_on_a_dynamic_axis_are_fixed_by_torch_export():
    """torch's kernel of ``slice`` clamps each bound with a branch on the size (``x[-3:]``
    at B = 2 starts at 0, not at B - 3), so torch.export fixes B to the example's 2: t2n
    refuses, naming the axis and the trace."""
    with pytest.raises(t2n.UsageError, match=r"frozen by the model.*\(x axis 0 = B\)") as e:
        t2n.export(MixedSignSlices(), (torch.randn(2),), "/tmp/t2n-never-written.nnef",
                   input_names=["x"], dynamic_axes={"x": {0: "B"}}, capture="export")
    assert any("capture='trace'" in n for n in e.value.__notes__), e.value.__notes__


REFUSED_SPLIT = {  # each capture's reason
    "trace": (t2n.UnsupportedOperatorsError, r"would be B/3"),
    # torch's view kernel compares B with 3 at the example B = 3
    "export": (t2n.UsageError, r"frozen by the model.*\(x axis 0 = B\)"),
}


def test_reshape_splitting_a_dynamic_axis_is_refused(capture):
    """(B, 1) reshaped to (3, -1) only works when 3 divides B: refused, naming B/3."""
    class M(torch.nn.Module):
        def forward(self, x):
            return x.reshape(3, -1)

    error, reason = REFUSED_SPLIT[capture]
    with pytest.raises(error, match=reason):
        t2n.export(M(), (torch.randn(3, 1),), "/tmp/t2n-never-written.nnef",
                   input_names=["x"], dynamic_axes={"x": {0: "B"}}, capture=capture)
