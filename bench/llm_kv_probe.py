"""Concatenated past against tract's in-place KV cache, side by side in one tract process.

    python -m bench.llm_kv_probe --archives CONCAT.tar INPLACE.tar [--reps 5]
    python -m bench.llm_kv_probe --rewrite CONCAT.tar OUT.tar     # the hand edit of the probe

``CONCAT.tar`` is a ``t2n llm`` archive (past keys/values in, present out);
``INPLACE.tar`` the same model with each layer's ``concat([past, new])`` replaced by
``tract_transformers_dyn_kv_cache`` (``t2n llm --kv-cache inplace``, or ``--rewrite``, which
makes that edit on a concat archive's ``graph.nnef``). Both load with
``tract.nnef().with_tract_transformers()`` in one child process; each timed operation
alternates between them ``--reps`` times (median):

* prefill of 128 and 512 tokens (a fresh state; logits read);
* decode ms/token at contexts 128 and 512: after a prefill of that length, 8 greedy steps of
  one token each, every step timed as a generation loop runs it: the concat archive gets its
  past as numpy arrays and its present read back with ``to_numpy`` (``t2n.llm_generate``
  today), or (``concat-tensors``) the present ``tract.Tensor`` objects fed straight back;
  the in-place archive gets the token only, its cache living in the ``tract.State``.

Each figure is printed as wall time and as the CPU time of the child process (less moved by
other jobs on a shared machine).

Figures depend on the machine and on what else runs on it: compare runs of one machine.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import statistics
import subprocess
import sys
import tarfile
import time

PROMPT = [(7919 * i + 13) % 32000 for i in range(1, 9)]


def rewrite(src: str, dst: str) -> int:
    """Replace each ``present_X_i = concat([past_X_i, new], axis = 2)`` of a t2n llm archive
    by tract's stateful cache op; the past inputs and present outputs leave the graph."""
    with tarfile.open(src) as t:
        members = [(m, t.extractfile(m).read()) for m in t.getmembers()]
    g = dict((m.name, d) for m, d in members)["graph.nnef"].decode()
    ext = r"  (past_\w+) = external<scalar>\(shape = (\[[^\]]*\])\);\n"
    shapes = dict(re.findall(ext, g))
    g = re.sub(ext, "", g)

    def cache(m):
        name, shape = f"past_{m.group(2)}_{m.group(3)}", shapes[f"past_{m.group(2)}_{m.group(3)}"]
        return (f"  {m.group(1)} = tract_transformers_dyn_kv_cache({m.group(4)}, name = "
                f"\"{name}\", axis = 2, datum_type = \"f32\", past_sequence_shape = {shape}, "
                f"input_sequence_shape = {shape.replace('P', 'S')});")

    g, n = re.subn(r"  (present_(key|value)_(\d+)) = concat\(\[past_\w+, (\w+)\], axis = 2\);",
                   cache, g)
    if n != len(shapes) or n == 0:
        raise SystemExit(f"{src}: {n} concats for {len(shapes)} past inputs")
    head = re.search(r"graph network\(([^)]*)\) -> \(([^)]*)\)", g)
    ins = [s for s in head.group(1).split(", ") if not s.startswith("past_")]
    outs = [s for s in head.group(2).split(", ") if not s.startswith("present_")]
    g = g.replace(head.group(0), f"graph network({', '.join(ins)}) -> ({', '.join(outs)})")
    g = g.replace("extension tract_registry tract_core;",
                  "extension tract_registry tract_core;\nextension tract_registry "
                  "tract_transformers;")
    with tarfile.open(dst, "w") as t:
        for m, d in members:
            if m.name == "graph.nnef":
                d = g.encode()
                m.size = len(d)
            t.addfile(m, io.BytesIO(d))
    return n


# ---------------------------------------------------------------------------- tract child
class Concat:
    """The archive of today: past in, present out, fed back by the caller."""

    def __init__(self, lm, layout, tensors: bool):
        self.lm, self.layout, self.tensors = lm, layout, tensors

    def start(self, ids):
        import numpy as np

        self.past = [np.zeros((1, h, 0, d), np.float32) for h, d in self.layout for _ in "kv"]
        return self.step(ids)

    def step(self, ids):
        logits, *past = self.lm.run([ids, *self.past])
        self.past = past if self.tensors else [p.to_numpy() for p in past]
        return logits.to_numpy()


class InPlace:
    """tract_transformers_dyn_kv_cache: the cache lives in the tract State."""

    def __init__(self, lm, layout):
        self.lm = lm

    def start(self, ids):
        self.state = self.lm.spawn_state()
        return self.step(ids)

    def step(self, ids):
        return self.state.run([ids])[0].to_numpy()


def child(spec: dict) -> dict:
    import numpy as np
    import tract

    from t2n.llm_generate import read_layout

    runners, loads = {}, {}
    for name, path in spec["archives"].items():
        t = time.perf_counter()
        model = tract.nnef().with_tract_transformers().load(path)
        lay = read_layout(model)
        lm = model.into_runnable()
        loads[name] = time.perf_counter() - t
        layout = list(zip(lay["kv_heads"], lay["head_dim"]))
        if name == "inplace":
            runners[name] = InPlace(lm, layout)
        else:
            runners[name] = Concat(lm, layout, tensors=False)
            runners[name + "-tensors"] = Concat(lm, layout, tensors=True)
    out = {"load_seconds": loads, "tokens": {}, "ms": {}, "cpu_ms": {}}
    for name, r in runners.items():  # greedy tokens, twice: a new prompt resets the state
        toks = []
        for _ in range(2):
            ids, t = np.array([PROMPT]), []
            logits = r.start(ids)
            for _ in range(spec["new_tokens"]):
                t.append(int(logits[0, -1].argmax()))
                logits = r.step(np.array([[t[-1]]]))
            toks.append(t)
        out["tokens"][name] = toks[0] if toks[0] == toks[1] else toks
    rng = np.random.default_rng(0)
    for n in (128, 512):
        ids = rng.integers(0, 32000, (1, n)).astype(np.int64)
        pre = {k: [] for k in runners}
        dec = {k: [] for k in runners}
        pre_cpu = {k: [] for k in runners}
        dec_cpu = {k: [] for k in runners}
        for name, r in runners.items():  # warm-up
            r.start(ids)
            r.step(np.array([[5]]))
        for _ in range(spec["reps"]):
            for name, r in runners.items():
                t, c = time.perf_counter(), time.process_time()
                logits = r.start(ids)
                pre[name].append(time.perf_counter() - t)
                pre_cpu[name].append(time.process_time() - c)
                for _ in range(8):
                    step = np.array([[int(logits[0, -1].argmax())]])
                    t, c = time.perf_counter(), time.process_time()
                    logits = r.step(step)
                    dec[name].append(time.perf_counter() - t)
                    dec_cpu[name].append(time.process_time() - c)
        out["ms"][f"prefill {n}"] = {k: statistics.median(v) * 1e3 for k, v in pre.items()}
        out["ms"][f"decode @{n}"] = {k: statistics.median(v) * 1e3 for k, v in dec.items()}
        out["cpu_ms"][f"prefill {n}"] = {k: statistics.median(v) * 1e3
                                         for k, v in pre_cpu.items()}
        out["cpu_ms"][f"decode @{n}"] = {k: statistics.median(v) * 1e3
                                         for k, v in dec_cpu.items()}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archives", nargs=2, metavar=("CONCAT", "INPLACE"))
    ap.add_argument("--rewrite", nargs=2, metavar=("CONCAT", "OUT"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--reference", help="comma-separated token ids to compare with")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(json.loads(a.child))))
        return
    if a.rewrite:
        print(f"{rewrite(*a.rewrite)} concatenations replaced")
        return
    spec = {"archives": {"concat": a.archives[0], "inplace": a.archives[1]}, "reps": a.reps,
            "new_tokens": a.new_tokens}
    p = subprocess.run([sys.executable, "-m", "bench.llm_kv_probe", "--child", json.dumps(spec)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"tract child failed:\n{p.stderr[-3000:]}")
    res = json.loads(p.stdout.strip().splitlines()[-1])
    ref = [int(t) for t in a.reference.split(",")] if a.reference else None
    print("load + optimise s: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                           res["load_seconds"].items()))
    for k, v in res["tokens"].items():
        same = "" if ref is None else ("  = reference" if v == ref else "  DIFFERENT")
        print(f"tokens {k:>15}: {v}{same}")
    names = list(next(iter(res["ms"].values())))
    for key, title in (("ms", "wall ms"), ("cpu_ms", "process CPU ms")):
        print(f"{title + ' (median)':>24} " + " ".join(f"{n:>15}" for n in names)
              + "  inplace/concat")
        for op, row in res[key].items():
            print(f"{op:>24} " + " ".join(f"{row[n]:>15.1f}" for n in names)
                  + f"  {row['inplace'] / row['concat']:>8.2f}")


if __name__ == "__main__":
    main()
