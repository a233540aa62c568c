"""Turn PyTorch's OpInfo samples into tiny models, export them, run them in tract, compare.

PyTorch's ``op_db`` holds sample inputs for hundreds of ops, written by people who never saw
t2n: the best source of cases nobody here thought of. Each sample becomes a module whose
tensor arguments are runtime inputs and whose other arguments are constants.

Outcomes per sample:

* ``pass``         exported, tract matches torch eager;
* ``unsupported``  t2n refused with a clear error (fine: never silent);
* ``mismatch``     tract's numbers differ (a bug, even in an op we did not aim for);
* ``crash``        tract aborted on the archive (a bug: t2n must never emit such graphs);
* ``error``        tract refused the archive, or t2n failed with an unexpected exception;
* ``out_of_scope`` not representable in an NNEF archive for tract (the reason is recorded):
                   random ops, complex tensors, no tensor output, inputs of a dtype tract lacks,
                   failures of torch itself on the sample.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from dataclasses import dataclass, field
from itertools import islice

import torch

from tie_order import equivalent_tie_indices

RANDOM_WORDS = ("rand", "normal", "bernoulli", "dropout", "multinomial", "cauchy",
                "exponential", "geometric", "log_normal", "uniform", "randperm", "poisson")
# ops whose result is not a function of their inputs' values
NON_FUNCTIONAL = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                  "empty_permuted", "item", "tolist", "allclose", "equal", "is_nonzero",
                  "nn.functional.feature_alpha_dropout", "cdouble", "cfloat",
                  "chalf", "resize_", "resize_as_", "storage", "T", "H", "mT", "mH"}

FAILING = ("mismatch", "crash", "error")


@dataclass
class SampleOutcome:
    status: str
    detail: str = ""


@dataclass
class OpOutcome:
    name: str
    samples: list = field(default_factory=list)

    @property
    def in_scope(self) -> bool:
        return any(s.status != "out_of_scope" for s in self.samples)

    def scoped(self):
        return [s for s in self.samples if s.status != "out_of_scope"]

    @property
    def passes_one(self) -> bool:
        return any(s.status == "pass" for s in self.samples)

    @property
    def passes_all(self) -> bool:
        sc = self.scoped()
        return bool(sc) and all(s.status == "pass" for s in sc)

    @property
    def failing(self) -> list:
        return [s for s in self.samples if s.status in FAILING]


def op_key(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


# dtype of a sweep's inputs -> tolerances for its float outputs (a few ulps of the dtype);
# integer and bool outputs always compare exactly. Integer/bool inputs often give float32
# outputs (cos of an int64 tensor), which get float32's tolerances.
# bfloat16 samples run inside a float32 model (tract has no bf16 inputs): the module takes
# their values as float32 inputs and casts them to bfloat16 first (t2n/walk/bf16_values.py);
# a bf16 ulp is 2**-8 relative, and reductions/products accumulate in another order
DTYPES = {"float32": (torch.float32, 1e-4, 1e-5), "float16": (torch.float16, 1e-2, 1e-3),
          "int64": (torch.int64, 1e-4, 1e-5), "bool": (torch.bool, 1e-4, 1e-5),
          "bfloat16": (torch.bfloat16, 1.6e-2, 1e-3)}


def in_scope_ops(dtype: torch.dtype = torch.float32):
    """OpInfo entries with ``dtype`` support on the CPU that are not random."""
    from torch.testing._internal.common_methods_invocations import op_db

    out = []
    for op in op_db:
        if dtype not in op.supported_dtypes("cpu"):
            continue
        if any(w in op.name for w in RANDOM_WORDS) or op.name in NON_FUNCTIONAL:
            continue
        out.append(op)
    return out


def samples_of(op, max_samples: int, dtype: torch.dtype = torch.float32):
    torch.manual_seed(0)
    try:
        with _no_test_function_lookup():
            return list(islice(op.sample_inputs("cpu", dtype, requires_grad=False),
                               max_samples))
    except Exception:
        return []


@contextlib.contextmanager
def _no_test_function_lookup():
    """``op.sample_inputs`` looks for the unittest method calling it (to seed by its name
    and record the sample it is on) with ``inspect.stack()``, which reads the source of
    every frame of pytest's deep stack: 0.29 s per call, three quarters of an OpInfo
    test's time. Outside a ``unittest.TestCase`` the lookup always finds nothing, so
    answering "nothing" at once yields the same samples under the same seed."""
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    saved = common_utils.extract_test_fn, core.extract_test_fn
    common_utils.extract_test_fn = core.extract_test_fn = lambda: None
    try:
        yield
    finally:
        common_utils.extract_test_fn, core.extract_test_fn = saved


class _Slot:
    def __init__(self, i):
        self.i = i


def _template(x, tensors: list):
    """Replace tensors in a nested structure by slots; collect the tensors."""
    if isinstance(x, torch.Tensor):
        tensors.append(x)
        return _Slot(len(tensors) - 1)
    if isinstance(x, (list, tuple)):
        return type(x)(_template(v, tensors) for v in x)
    if isinstance(x, dict):
        return {k: _template(v, tensors) for k, v in x.items()}
    return x


def _fill(x, values):
    if isinstance(x, _Slot):
        return values[x.i]
    if isinstance(x, (list, tuple)):
        return type(x)(_fill(v, values) for v in x)
    if isinstance(x, dict):
        return {k: _fill(v, values) for k, v in x.items()}
    return x


class SampleModule(torch.nn.Module):
    """``op(input, *args, **kwargs)`` with every tensor a runtime input."""

    def __init__(self, fn, template, bf16_inputs=()):
        super().__init__()
        self.fn = fn
        self.template = template
        self.bf16_inputs = set(bf16_inputs)  # inputs given as float32, cast to bf16 first

    def forward(self, *tensors):
        tensors = [t.bfloat16() if i in self.bf16_inputs else t for i, t in enumerate(tensors)]
        inp, args, kwargs = _fill(self.template, tensors)
        return self.fn(inp, *args, **kwargs)


def _flat_outputs(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        res = []
        for o in out:
            sub = _flat_outputs(o)
            if sub is None:
                return None
            res.extend(sub)
        return res
    return None


def build_case(op, sample):
    """(module, input tensors) for a sample, or an out-of-scope reason string."""
    tensors: list = []
    template = _template((sample.input, tuple(sample.args), dict(sample.kwargs)), tensors)
    if not tensors:
        return "no tensor input"
    for t in tensors:
        if t.is_complex():
            return f"input dtype {t.dtype}"
        if t.layout != torch.strided:
            return "sparse input"
    bf16 = [i for i, t in enumerate(tensors) if t.dtype == torch.bfloat16]
    tensors = [t.detach().float() if i in bf16 else t.detach().clone()
               for i, t in enumerate(tensors)]
    module = SampleModule(op.op, template, bf16)
    try:
        with torch.no_grad():
            out = module(*[t.clone() for t in tensors])
    except Exception as e:
        return f"torch fails on the sample: {type(e).__name__}"
    flat = _flat_outputs(out)
    if flat is None or not flat:
        return "no tensor output"
    for o in flat:
        if o.is_complex():
            return "complex output"
    return module, tensors


def run_sample(op, sample, worker, workdir: str, rtol=1e-4, atol=1e-5,
               capture: str = "trace") -> SampleOutcome:
    """One sample exported (with ``capture``) and run; floats compare within
    ``atol + rtol * |torch|``."""
    import t2n
    from t2n.api import torch_outputs
    from t2n.check.compare import compare
    from t2n.errors import T2NError, TraceError
    from t2n.check.tract_runner import TractRunError

    case = build_case(op, sample)
    if isinstance(case, str):
        return SampleOutcome("out_of_scope", case)
    module, tensors = case
    path = os.path.join(workdir, "case.nnef.tar")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = t2n.export(module, tuple(tensors), path, capture=capture)
    except TraceError as e:
        return SampleOutcome("out_of_scope", f"not traceable: {str(e)[:150]}")
    except T2NError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        return SampleOutcome("unsupported", " ".join(lines[1:3] if len(lines) > 1 else lines)[:200])
    except Exception as e:  # a bug in t2n
        return SampleOutcome("error", f"t2n {type(e).__name__}: {str(e)[:200]}")
    try:
        expected = torch_outputs(module, tuple(t.clone() for t in tensors))
        got = worker.run(path, [t.numpy() for t in tensors])
    except TractRunError as e:
        return SampleOutcome("crash" if e.crashed else "error", str(e)[:300])
    if len(got) != len(expected):
        return SampleOutcome("mismatch", f"{len(got)} outputs in tract, {len(expected)} in torch")
    for i, (e_, g_) in enumerate(zip(expected, got)):
        c = compare(f"output {i}", e_, g_, rtol=rtol, atol=atol)
        if not c.ok and not equivalent_tie_indices(op.name, sample, i, e_, g_):
            return SampleOutcome("mismatch", c.line())
    del result
    return SampleOutcome("pass")


def run_op(op, worker, max_samples: int = 4, dtype: str = "float32",
           capture: str = "trace") -> OpOutcome:
    """Every sample of ``op`` in ``dtype`` (a key of :data:`DTYPES`), captured with
    ``capture`` (``"trace"`` or ``"export"``)."""
    torch_dtype, rtol, atol = DTYPES[dtype]
    outcome = OpOutcome(op_key(op))
    with tempfile.TemporaryDirectory(prefix="t2n-opinfo-") as d:
        for sample in samples_of(op, max_samples, torch_dtype):
            outcome.samples.append(run_sample(op, sample, worker, d, rtol=rtol, atol=atol,
                                              capture=capture))
    if not outcome.samples:
        outcome.samples.append(SampleOutcome("out_of_scope", f"no {dtype} samples"))
    return outcome


def assert_sound(outcome: OpOutcome, results: dict, label: str = "") -> None:
    """Record ``outcome`` in ``results`` (for the module's coverage floor) and fail on any
    mismatch, tract failure or unexpected error among its samples; ``label`` says which
    sweep (dtype, capture) the failure belongs to."""
    results[outcome.name] = outcome
    bad = outcome.failing
    assert not bad, f"{label}{outcome.name}: " + "; ".join(f"{s.status}: {s.detail}"
                                                          for s in bad)


def summary_table(outcomes: list[OpOutcome]) -> str:
    scoped = [o for o in outcomes if o.in_scope]
    one = sum(o.passes_one for o in scoped)
    all_ = sum(o.passes_all for o in scoped)
    samples = [s for o in scoped for s in o.scoped()]
    counts = {k: sum(s.status == k for s in samples)
              for k in ("pass", "unsupported", "mismatch", "crash", "error")}
    lines = ["| in-scope ops | ops with >= 1 sample right | ops with all samples right | "
             "samples | pass | unsupported (clear error) | mismatch | crash | error |",
             "|---|---|---|---|---|---|---|---|---|",
             f"| {len(scoped)} | {one} | {all_} | {len(samples)} | {counts['pass']} | "
             f"{counts['unsupported']} | {counts['mismatch']} | {counts['crash']} | "
             f"{counts['error']} |"]
    return "\n".join(lines)


def per_op_table(outcomes: list[OpOutcome]) -> str:
    lines = ["| op | samples passing | status | note |", "|---|---|---|---|"]
    for o in sorted(outcomes, key=lambda o: o.name):
        sc = o.scoped()
        if not sc:
            note = o.samples[0].detail if o.samples else ""
            lines.append(f"| `{o.name}` | - | out of scope | {note} |")
            continue
        n = sum(s.status == "pass" for s in sc)
        status = "all" if o.passes_all else ("some" if n else "none")
        bad = next((s for s in sc if s.status != "pass"), None)
        note = f"{bad.status}: {bad.detail}" if bad else ""
        note = note.replace("|", "/").replace("\n", " ")[:140]
        lines.append(f"| `{o.name}` | {n}/{len(sc)} | {status} | {note} |")
    return "\n".join(lines)


def dtype_matrix(results: dict, max_samples: int) -> str:
    """The support matrix over several dtypes: ``results`` maps a dtype name to its
    ``{op: OpOutcome}``; one summary row and one per-op column per dtype."""
    dtypes = list(results)
    out = ["# Support matrix: PyTorch OpInfo samples exported to tract", "",
           "Generated by `python tools/opinfo_sweep.py --matrix` from one sweep per dtype "
           f"(`--dtype D --json`; at most {max_samples} samples per op, torch 2.13, tract "
           "0.23.9). Each sample's tensor arguments are runtime inputs. `unsupported` means "
           "t2n refuses with a clear error; `mismatch`, `crash` and `error` are bugs. Float "
           "outputs compare within 1e-4 relative (float16 samples: 1e-2, a few f16 ulps); "
           "integer and bool outputs exactly, indices included: where PyTorch's CPU kernel "
           "orders equal values by a rule of the input (stable sorts, sorts of up to 16 "
           "elements, first/last positions, medians) the index must be PyTorch's; only "
           "where the order is left to its selection algorithm's internals (`sort`/`argsort` "
           "without `stable=True` past 16 elements, `topk` past 3 but for k = 1 of at least "
           "64, `kthvalue` past 2, `mode` past 16) does an index that differs only among "
           "equal values count as right (see tests/tie_order.py and docs/dtypes.md).", ""]
    for d in dtypes:
        out += [f"## {d}", "", summary_table(list(results[d].values())), ""]
    out += ["## Per op", "", "Samples passing / in scope per dtype (`-`: no samples or out of "
            "scope in that dtype); the note is the first failing sample's.", "",
            "| op | " + " | ".join(dtypes) + " | note |",
            "|---|" + "---|" * len(dtypes) + "---|"]
    names = sorted(set().union(*(r.keys() for r in results.values())))
    for name in names:
        cells, note = [], ""
        for d in dtypes:
            o = results[d].get(name)
            sc = o.scoped() if o else []
            if not sc:
                cells.append("-")
                continue
            n = sum(s.status == "pass" for s in sc)
            cells.append(f"{n}/{len(sc)}")
            bad = next((s for s in sc if s.status != "pass"), None)
            if bad and not note:
                note = f"{d} {bad.status}: {bad.detail}".replace("|", "/").replace("\n", " ")
        out.append(f"| `{name}` | " + " | ".join(cells) + f" | {note[:120]} |")
    return "\n".join(out) + "\n"
