"""``t2n llm`` against the peer's LLM exporter, side by side in one tract process.

    python -m bench.llm_peer_bench --peer-venv /work/peer-venv            # f32 and q4_0
    python -m bench.llm_peer_bench --peer-venv V --weights q4_0 --reps 5 --keep DIR
    python -m bench.llm_peer_bench --archives T2N.tar PEER.tgz --profile prefill128

The model is the LLaMA config of issue #32 (hidden 768, 12 layers, 12 heads with 4 key/value
heads, MLP 2048, vocabulary 32000, untied head: 124.7 M parameters), random weights, saved
with ``save_pretrained`` (plus a word-level tokenizer built offline, which the peer requires).
For each weight format:

* export: wall time of ``python -m t2n llm DIR -o OUT --weights W`` against the peer's
  ``t2n_export_llm_to_tract -d DIR --no-verify`` (``--compression-method min_max_q4_0``
  for q4_0), each as a fresh process, run from ``--peer-venv`` through
  ``bench/peer_llm_export.py`` (the peer is never imported by t2n nor installed with it);
* one tract process (this venv's tract) loads both archives (load + optimise, alternated),
  generates greedily from the same 8-token prompt with each, then times, each operation
  alternating between the two archives ``--reps`` times (median): prefill of 128 and 512
  tokens (P = 0), and one decoding step (S = 1) after a context of 128 and 512 positions;
* tokens: f32 against transformers' ``generate(do_sample=False)``; q4_0 t2n against
  transformers on the model with t2n's rounded weights (``t2n llm --check``'s reference),
  and the peer's q4_0 tokens against the f32 ones (its rounding is its own).

Both archives load with ``tract.nnef().with_tract_transformers()`` (what an archive using
tract's transformer operators needs; the registry changes nothing for one that does not).
``--profile OP`` prints tract's per-node profile of OP for both archives, summed per op
name (``prefill128``, ``prefill512``, ``decode128``, ``decode512``).

Figures depend on the machine and on what else runs on it: compare runs of one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench import common as bench_common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = ("prefill128", "prefill512", "decode128", "decode512")
NEW_TOKENS = 16


# ---------------------------------------------------------------------------- the model
def build_llama(path: str, layers: int = 12):
    """The issue's LLaMA config with random weights and a word-level tokenizer, saved."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=768, num_hidden_layers=layers,
                                   num_attention_heads=12, num_key_value_heads=4,
                                   intermediate_size=2048, max_position_embeddings=2048,
                                   tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.save_pretrained(path)
    vocab = {"<unk>": 0, **{f"t{i}": i for i in range(1, cfg.vocab_size)}}  # ids unique
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                         bos_token="t1", eos_token="t2").save_pretrained(path)
    return model


def _run(cmd, **kw) -> float:
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, **kw)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed:\n{p.stderr[-3000:]}")
    return time.perf_counter() - t


def export_t2n(src: str, out: str, weights: str) -> float:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return _run([sys.executable, "-m", "t2n", "llm", src, "-o", out, "--weights", weights,
                 "--quiet"], env=env)


def export_peer(venv: str, src: str, out_dir: str, weights: str) -> tuple[float, str]:
    from importlib.metadata import version

    cmd = [os.path.join(venv, "bin", "python"), os.path.join(ROOT, "bench", "peer_llm_export.py"),
           "-e", out_dir, "-d", src, "--no-verify",
           "--tract-specific-version", version("tract")]
    if weights == "q4_0":
        cmd += ["--compression-method", "min_max_q4_0"]
    elif weights != "f32":
        raise SystemExit(f"no peer equivalent for --weights {weights}")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    seconds = _run(cmd, env=env)
    return seconds, os.path.join(out_dir, "model", "model.nnef.tgz")


# ---------------------------------------------------------------------------- tract child
def _load(path: str):
    import tract

    t = time.perf_counter()
    model = tract.nnef().with_tract_transformers().load(path)
    runnable = model.into_runnable()
    return runnable, time.perf_counter() - t


def _greedy(lm, prompt, n, layers, heads, dim):
    import numpy as np

    past = [np.zeros((1, heads, 0, dim), np.float32) for _ in range(2 * layers)]
    ids, tokens = np.array([prompt], np.int64), []
    for _ in range(n):
        logits, *past = [o.to_numpy() for o in lm.run([ids, *past])]
        tokens.append(int(logits[0, -1].argmax()))
        ids = np.array([[tokens[-1]]], np.int64)
    return tokens


def _inputs(op: str, layers: int, heads: int, dim: int):
    import numpy as np

    rng = np.random.default_rng(0)
    n = int(op.lstrip("prefilldecode"))
    s, p = (n, 0) if op.startswith("prefill") else (1, n)
    ids = rng.integers(0, 32000, (1, s)).astype(np.int64)
    past = [(rng.standard_normal((1, heads, p, dim)) * 0.5).astype(np.float32)
            for _ in range(2 * layers)]
    return [ids, *past]


def child(spec: dict) -> dict:
    """Both archives in this process: load, tokens, then each op alternated."""
    names, paths = spec["names"], spec["paths"]
    layers, heads, dim = spec["layers"], spec["heads"], spec["dim"]
    loads = {n: [] for n in names}
    lms = {}
    for _ in range(spec.get("load_reps", 2)):
        for n, p in zip(names, paths):
            lms.pop(n, None)
            lms[n], sec = _load(p)
            loads[n].append(sec)
    out = {"load_seconds": {n: min(v) for n, v in loads.items()}, "tokens": {}, "ms": {}}
    for n in names:
        out["tokens"][n] = _greedy(lms[n], spec["prompt"], spec["new_tokens"], layers, heads,
                                   dim)
    for op in spec["ops"]:
        ins = _inputs(op, layers, heads, dim)
        times = {n: [] for n in names}
        for n in names:  # warm-up
            lms[n].run(ins)
        for _ in range(spec["reps"]):
            for n in names:
                t = time.perf_counter()
                lms[n].run(ins)
                times[n].append(time.perf_counter() - t)
        out["ms"][op] = {n: statistics.median(v) * 1000 for n, v in times.items()}
    if spec.get("profile"):
        out["profile"] = {}
        ins = _inputs(spec["profile"], layers, heads, dim)
        for n in names:
            prof = json.loads(lms[n].profile_json(ins))
            per = {}
            for node in prof["nodes"]:
                per[node["op_name"]] = per.get(node["op_name"], 0.0) + node.get("secs_per_iter", 0.0)
            out["profile"][n] = per
    return out


def run_child(spec: dict) -> dict:
    return bench_common.run_file_child("bench.llm_peer_bench", spec)


# ---------------------------------------------------------------------------- report
def print_table(weights: str, res: dict, export_s: dict, sizes: dict, refs: dict) -> None:
    a, b = "t2n", "peer"
    print(f"\n== {weights}: t2n / peer (one tract process, each op alternated, median) ==")
    print(f"{'':>22} {'t2n':>10} {'peer':>10} {'t2n/peer':>9}")
    rows = []
    for op in res["ms"]:
        label = (f"prefill {op[7:]} ms" if op.startswith("prefill")
                 else f"decode @{op[6:]} ms/token")
        rows.append((label, res["ms"][op][a], res["ms"][op][b]))
    rows.append(("load+optimise s", res["load_seconds"][a], res["load_seconds"][b]))
    if export_s:
        rows.append(("export s (process)", export_s[a], export_s[b]))
    if sizes:
        rows.append(("archive MB", sizes[a] / 1e6, sizes[b] / 1e6))
    for label, x, y in rows:
        print(f"{label:>22} {x:>10.2f} {y:>10.2f} {x / y:>9.2f}")
    for n in (a, b):
        toks, ref = res["tokens"][n], refs.get(n)
        verdict = ("" if ref is None else
                   "= reference" if toks == ref else
                   f"differs from reference ({sum(x == y for x, y in zip(toks, ref))}/"
                   f"{len(ref)} same)")
        print(f"  {n} tokens: {toks} {verdict}")
    for n, ref in refs.items():
        if ref is not None:
            print(f"  reference for {n}: {ref}")
    if "profile" in res:
        print("  per-op profile (ms, summed per op name):")
        ops = sorted(set(res["profile"][a]) | set(res["profile"][b]),
                     key=lambda o: -max(res["profile"][a].get(o, 0), res["profile"][b].get(o, 0)))
        for o in ops[:25]:
            print(f"    {o:>28} {res['profile'][a].get(o, 0) * 1e3:>9.2f} "
                  f"{res['profile'][b].get(o, 0) * 1e3:>9.2f}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer-venv", help="venv where torch-to-nnef-llm==0.24.12 is installed")
    ap.add_argument("--weights", default="f32,q4_0")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--keep", metavar="DIR", help="keep model and archives in DIR")
    ap.add_argument("--archives", nargs=2, metavar=("T2N", "PEER"),
                    help="time these two archives only (no export, no reference tokens)")
    ap.add_argument("--profile", choices=OPS, help="also print tract's per-op profile")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return bench_common.serve_file_child(a.child, child)
    spec = {"names": ["t2n", "peer"], "layers": 12, "heads": 4, "dim": 64,
            "prompt": [(7919 * i + 13) % 32000 for i in range(1, 9)], "new_tokens": NEW_TOKENS,
            "ops": a.ops.split(","), "reps": a.reps, "profile": a.profile}
    if a.archives:
        res = run_child(dict(spec, paths=list(a.archives)))
        print_table("given archives", res, {}, {}, {})
        return
    if not a.peer_venv:
        raise SystemExit("--peer-venv is required (or --archives T2N PEER)")
    import torch

    from t2n.llm import reference_tokens

    work = a.keep or tempfile.mkdtemp(prefix="t2n-peer-bench-")
    os.makedirs(work, exist_ok=True)
    try:
        src = os.path.join(work, "llama")
        model = build_llama(src)
        print(f"LLaMA config: 12 layers, hidden 768, 12/4 heads, MLP 2048, vocabulary 32000, "
              f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters; "
              f"torch threads {torch.get_num_threads()}, load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        f32_ref = reference_tokens(model, spec["prompt"], NEW_TOKENS)
        for w in a.weights.split(","):
            t2n_out = os.path.join(work, f"t2n-{w}.nnef.tar")
            export_s = {"t2n": export_t2n(src, t2n_out, w)}
            export_s["peer"], peer_out = export_peer(a.peer_venv, src,
                                                     os.path.join(work, f"peer-{w}"), w)
            sizes = {"t2n": os.path.getsize(t2n_out), "peer": os.path.getsize(peer_out)}
            refs = {"t2n": f32_ref, "peer": f32_ref}
            if w != "f32":  # t2n's check reference: the model with the archive's rounded weights
                from t2n.llm import export_llm

                chk = export_llm(src, os.path.join(work, f"t2n-{w}-check.nnef.tar"),
                                 weights=w, check=True, quiet=True, prompt=spec["prompt"])
                refs["t2n"] = chk.reference_tokens
                refs["peer"] = None
                os.unlink(os.path.join(work, f"t2n-{w}-check.nnef.tar"))
            res = run_child(dict(spec, paths=[t2n_out, peer_out]))
            print_table(w, res, export_s, sizes, refs)
            if w != "f32":
                same = sum(x == y for x, y in zip(res["tokens"]["peer"], f32_ref))
                print(f"  peer {w} tokens against the f32 model's: {same}/{NEW_TOKENS} same "
                      "(its own rounding)")
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
