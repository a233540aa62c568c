"""What the dense experts of ``t2n llm`` cost in tract: a Mixtral config against LLaMA configs
of the same active size and of the same total size.

    python -m bench.llm_moe_bench                  # f32 and q4_0
    python -m bench.llm_moe_bench --weights f32 --layers 2 --reps 3

The models (random weights, hidden 512, 8 heads with 4 key/value heads, vocabulary 4096 so
the products of the layers dominate, ``--layers`` layers):

* ``moe``: Mixtral, 8 experts of MLP 1024, 2 per token, exported by ``t2n llm`` (experts as
  dense products, :mod:`t2n.llm_experts`);
* ``moe_grouped``: the same model exported through transformers' ``grouped_mm`` experts
  (t2n's exact lowering of ``aten::_grouped_mm``, what ``t2n llm`` did before the dense form);
* ``llama_active``: LLaMA with MLP 2048, the products one token runs through in ``moe``
  (its active size);
* ``llama_total``: LLaMA with MLP 8192, every expert's products (what the dense form computes).

Each archive is checked by generation (tokens equal to transformers'), then timed in one tract
process, each operation alternated between the archives (median of ``--reps``): a 128-token
prompt and one decoding step at context 128.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from bench import common as bench_common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ("moe", "moe_grouped", "llama_active", "llama_total")
OPS = ("prefill128", "decode128")


def build(name: str, layers: int):
    import torch
    import transformers as T

    common = dict(vocab_size=4096, hidden_size=512, num_hidden_layers=layers,
                  num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024,
                  tie_word_embeddings=False)
    torch.manual_seed(0)
    if name.startswith("moe"):
        model = T.MixtralForCausalLM(T.MixtralConfig(**common, intermediate_size=1024,
                                                     num_local_experts=8,
                                                     num_experts_per_tok=2))
    else:
        mlp = 2048 if name == "llama_active" else 8192
        model = T.LlamaForCausalLM(T.LlamaConfig(**common, intermediate_size=mlp))
    return model.eval()


def export(name: str, layers: int, weights: str, out: str) -> dict:
    import warnings

    from t2n import llm

    model = build(name, layers)
    if name == "moe_grouped":  # the experts as transformers runs them (grouped_mm)
        real = llm.dense_experts_view
        llm.dense_experts_view = lambda m: (m, 0)
    try:
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = llm.export_llm(model, out, weights=weights, check=True, max_new_tokens=8,
                                 quiet=True)
        seconds = time.perf_counter() - t
    finally:
        if name == "moe_grouped":
            llm.dense_experts_view = real
    return {"passed": res.passed, "export_seconds": seconds, "bytes": res.export.archive_bytes,
            "ops": res.export.op_count, "dense_experts": res.dense_experts,
            "params": sum(p.numel() for p in model.parameters())}


# ---------------------------------------------------------------------------- tract child
def _inputs(op: str, layout: dict):
    import numpy as np

    rng = np.random.default_rng(0)
    n = int(op.lstrip("prefilldecode"))
    s, p = (n, 0) if op.startswith("prefill") else (1, n)
    ins = [rng.integers(0, layout["vocab_size"], (1, s)).astype(np.int64)]
    for hk, dk, hv, dv in zip(layout["kv_heads"], layout["head_dim"], layout["value_heads"],
                              layout["value_head_dim"]):
        ins += [(rng.standard_normal((1, hk, p, dk)) * 0.5).astype(np.float32),
                (rng.standard_normal((1, hv, p, dv)) * 0.5).astype(np.float32)]
    return ins


def child(spec: dict) -> dict:
    import tract

    from t2n.llm_generate import read_layout

    lms, layouts = {}, {}
    for n, p in spec["archives"].items():
        model = tract.nnef().load(p)
        layouts[n] = read_layout(model)
        lms[n] = model.into_runnable()
    out = {}
    for op in spec["ops"]:
        ins = {n: _inputs(op, layouts[n]) for n in lms}
        times = {n: [] for n in lms}
        for n in lms:  # warm-up
            lms[n].run(ins[n])
        for _ in range(spec["reps"]):
            for n in lms:
                t = time.perf_counter()
                lms[n].run(ins[n])
                times[n].append(time.perf_counter() - t)
        out[op] = {n: statistics.median(v) * 1000 for n, v in times.items()}
    return out


def run_child(spec: dict) -> dict:
    return bench_common.run_file_child("bench.llm_moe_bench", spec)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default="f32,q4_0")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--models", default=",".join(NAMES))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return bench_common.serve_file_child(a.child, child)
    names = a.models.split(",")
    with tempfile.TemporaryDirectory(prefix="t2n-moe-bench-") as d:
        for weights in a.weights.split(","):
            info, paths = {}, {}
            for n in names:
                paths[n] = os.path.join(d, f"{n}.{weights}.nnef.tar")
                info[n] = export(n, a.layers, weights, paths[n])
            ms = run_child({"archives": paths, "ops": list(OPS), "reps": a.reps})
            print(f"\n== {weights}, {a.layers} layers (tract, median of {a.reps}, ops "
                  "alternated) ==")
            print(f"{'':>13} {'params M':>9} {'archive MB':>10} {'ops':>5} {'check':>6} "
                  f"{'prefill 128 ms':>15} {'decode @128 ms':>15}")
            for n in names:
                i = info[n]
                print(f"{n:>13} {i['params'] / 1e6:>9.1f} {i['bytes'] / 1e6:>10.1f} "
                      f"{i['ops']:>5} {'ok' if i['passed'] else 'FAIL':>6} "
                      f"{ms['prefill128'][n]:>15.1f} {ms['decode128'][n]:>15.2f}")
            if "moe" in names and "llama_active" in names:
                print(f"  moe / llama_active: prefill "
                      f"{ms['prefill128']['moe'] / ms['prefill128']['llama_active']:.2f}x, "
                      f"decode {ms['decode128']['moe'] / ms['decode128']['llama_active']:.2f}x")


if __name__ == "__main__":
    main()
