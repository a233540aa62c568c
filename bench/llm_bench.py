"""``t2n llm`` on a ~100M-parameter LLaMA config: archive size, export time, tract decode speed.

    python -m bench.llm_bench                       # f32 and q4_0, 32 new tokens
    python -m bench.llm_bench --weights q4_0 --new-tokens 64 --layers 8

The model is a LLaMA config with random weights (vocabulary 32000, hidden 768, 8 layers,
12 heads with 4 key/value heads, MLP 2048, untied output layer: 99.6 M parameters), saved
with ``save_pretrained`` to a temporary directory, as a user would point ``t2n llm`` at it.
For each weight format, in this order:

* export: ``t2n.llm.export_llm(DIR, OUT.nnef.tar, weights=...)`` wall time (load from disk,
  trace, walk, write) and t2n.export's own time, archive bytes, op count;
* the generation check: tract (in a child) prefills the fixed 8-token prompt, then decodes
  one token per step; tokens/s of the decode steps, prefill time, load + optimise time;
  exact agreement with transformers' greedy ``generate``;
* side by side, the peer route: ``torch.onnx.export(dynamo=True)`` of the same step with
  S and P dynamic, loaded with tract's ONNX loader, running the same greedy loop (f32 only;
  export time, file size, load + optimise time, prefill, decode tokens/s);
* and the same greedy loop in PyTorch eager (transformers' ``generate`` with its
  own ``DynamicCache``, on the same threads), tokens/s.

Figures depend on the machine and on what else runs on it: compare runs of one machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from bench import common


def build_llama(layers: int):
    import torch
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=768, num_hidden_layers=layers,
                                   num_attention_heads=12, num_key_value_heads=4,
                                   intermediate_size=2048, max_position_embeddings=2048,
                                   tie_word_embeddings=False)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def torch_decode_speed(model, prompt, n: int) -> float:
    """tokens/s of transformers' greedy decode steps (generate of n tokens minus the
    prefill, measured as generate of 1 token)."""
    import torch

    from t2n.llm import reference_tokens

    with torch.no_grad():
        reference_tokens(model, prompt, 2)  # warm-up
        t = time.perf_counter()
        reference_tokens(model, prompt, 1)
        one = time.perf_counter() - t
        t = time.perf_counter()
        reference_tokens(model, prompt, n)
        full = time.perf_counter() - t
    return (n - 1) / max(full - one, 1e-9)


def onnx_route(model, prompt, n: int, path: str) -> dict:
    """The peer route: ``torch.onnx.export(dynamo=True)`` of the same step (S and P dynamic),
    then the same greedy loop with tract's ONNX loader, in a child process."""
    import json
    import subprocess
    import sys

    import torch

    from t2n.llm import CausalLMStep, _example, cache_layout, io_names

    layers = cache_layout(model)
    step = CausalLMStep(model, len(layers)).eval()
    ins, outs = io_names(len(layers))
    s_dim = torch.export.Dim("S", min=1, max=2048)
    p_dim = torch.export.Dim("P", min=0, max=2048)
    shapes = ({1: s_dim}, tuple({2: p_dim} for _ in ins[1:]))
    t = time.perf_counter()
    try:
        torch.onnx.export(step, _example(layers, model.config.vocab_size), path,
                          input_names=ins, output_names=outs, dynamic_shapes=shapes,
                          dynamo=True, verbose=False)
    except Exception as e:
        return {"error": f"torch.onnx.export failed: {type(e).__name__}: "
                         f"{str(e).strip().splitlines()[0][:200]}"}
    export_s = time.perf_counter() - t
    size = sum(os.path.getsize(os.path.join(os.path.dirname(path), f))
               for f in os.listdir(os.path.dirname(path)) if f.startswith("llama.onnx"))
    cmd = [sys.executable, "-m", "bench.llm_bench", "--child-onnx", path,
           ",".join(map(str, prompt)), str(n),
           ",".join(f"{c.heads}x{c.head_dim}" for c in layers)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if p.returncode != 0:
        return {"error": f"tract (ONNX) failed: {p.stderr.strip().splitlines()[-1:]}"}
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out.update(export_seconds=export_s, bytes=size)
    return out


def _child_onnx(path: str, prompt: str, n: str, layout: str) -> None:
    import json

    import numpy as np
    import tract

    t = time.perf_counter()
    lm = tract.onnx().load(path).into_model().into_runnable()
    load = time.perf_counter() - t
    past = []
    for hd in layout.split(","):
        h, d = map(int, hd.split("x"))
        past += [np.zeros((1, h, 0, d), np.float32)] * 2
    ids, tokens, decode, prefill = np.array([[int(x) for x in prompt.split(",")]]), [], 0.0, 0.0
    for i in range(int(n)):
        t = time.perf_counter()
        logits, *past = [o.to_numpy() for o in lm.run([ids, *past])]
        tokens.append(int(logits[0, -1].argmax()))
        ids = np.array([[tokens[-1]]])
        dt = time.perf_counter() - t
        prefill, decode = (dt, decode) if i == 0 else (prefill, decode + dt)
    print(json.dumps({"tokens": tokens, "load_seconds": load, "prefill_seconds": prefill,
                      "decode_tokens_per_second": (int(n) - 1) / decode}))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default="f32,q4_0", help="comma-separated formats")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--keep", metavar="DIR", help="keep the archives in DIR")
    ap.add_argument("--no-onnx", action="store_true", help="skip the torch.onnx route")
    ap.add_argument("--child-onnx", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child_onnx:
        return _child_onnx(*a.child_onnx)
    common.declare_torchvision_schemas()
    import torch

    from t2n.llm import default_prompt, export_llm

    work = tempfile.mkdtemp(prefix="t2n-llm-bench-")
    try:
        model = build_llama(a.layers)
        n_params = sum(p.numel() for p in model.parameters())
        src = os.path.join(work, "llama")
        os.makedirs(os.path.join(work, "onnx"))
        model.save_pretrained(src)
        prompt = default_prompt(model.config.vocab_size)
        print(f"LLaMA config: {a.layers} layers, hidden 768, 12 heads / 4 kv heads, vocabulary "
              f"32000, {n_params / 1e6:.1f} M parameters ({n_params * 4 / 1e6:.0f} MB f32); "
              f"prompt {len(prompt)} tokens, {a.new_tokens} new; torch threads "
              f"{torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} cores")
        rows, reference = [], None
        for w in a.weights.split(","):
            out = os.path.join(a.keep or work, f"llama-{w}.nnef.tar")
            t = time.perf_counter()
            res = export_llm(src, out, weights=w, check=True, max_new_tokens=a.new_tokens,
                             quiet=True)
            wall = time.perf_counter() - t
            g = res.generation
            if w == "f32":
                reference = res.reference_tokens
            rows.append((w, res.export.archive_bytes, res.export.export_seconds, wall,
                         res.export.op_count, g["load_seconds"], g["prefill_seconds"],
                         g["decode_tokens_per_second"], "yes" if res.passed else "NO"))
        onnx = None if a.no_onnx else onnx_route(model, prompt, a.new_tokens,
                                                  os.path.join(work, "onnx", "llama.onnx"))
        eager = torch_decode_speed(model, prompt, a.new_tokens)
        head = ("weights", "archive MB", "export s", "llm+check s", "ops", "tract load s",
                "prefill ms", "tract tok/s", "tokens = transformers")
        print("  ".join(f"{h:>12}" for h in head))
        for r in rows:
            w, size, exp_s, wall, ops, load, prefill, tps, same = r
            cells = (w, f"{size / 1e6:.1f}", f"{exp_s:.1f}", f"{wall:.1f}", str(ops),
                     f"{load:.2f}", f"{prefill * 1000:.0f}", f"{tps:.1f}", same)
            print("  ".join(f"{c:>12}" for c in cells))
        if onnx is not None and "error" in onnx:
            print(f"{'onnx f32':>12}  {onnx['error']}")
        elif onnx is not None:
            if reference is None:
                from t2n.llm import reference_tokens

                reference = reference_tokens(model, prompt, a.new_tokens)
            same = "yes" if onnx["tokens"] == reference else "NO"
            cells = ("onnx f32", f"{onnx['bytes'] / 1e6:.1f}", f"{onnx['export_seconds']:.1f}",
                     "", "", f"{onnx['load_seconds']:.2f}",
                     f"{onnx['prefill_seconds'] * 1000:.0f}",
                     f"{onnx['decode_tokens_per_second']:.1f}", same)
            print("  ".join(f"{c:>12}" for c in cells))
        print(f"PyTorch eager (transformers generate, f32, DynamicCache): {eager:.1f} tokens/s")
        print("(onnx f32: torch.onnx.export(dynamo=True) of the same step, tract's ONNX loader, "
              "the same greedy loop)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
