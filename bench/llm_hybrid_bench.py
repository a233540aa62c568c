"""``t2n llm`` on the hybrid and state-space families: tract against transformers eager.

    python -m bench.llm_hybrid_bench                       # every family, f32 and q4_0
    python -m bench.llm_hybrid_bench --family jamba --weights f32 --prompt 128

Each family (tests/fixtures/hybrid_llms.py: LFM2, Jamba, Mamba, Qwen3-Next) is built with
random weights at the given size (default hidden 512, 8 layers, 8 heads, vocabulary 8192:
every other layer attends where the family has attention), exported with
``export_llm(..., check=True)`` (so tract's greedy tokens are proven equal to
transformers'), then timed on the same greedy loop in one process each, alternating:

* tract (``t2n.llm_generate`` logic, in this process): the prompt of ``--prompt`` tokens in
  one step (prefill ms), then ``--new-tokens`` decoding steps (ms per token);
* transformers eager: ``model(prompt, use_cache=True)`` (prefill ms), then one token per
  call with its own cache (ms per token), on the same threads.

The best of ``--repeat`` runs is printed. Figures depend on the machine and on what else
runs on it: compare runs of one machine.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np


def tract_times(archive: str, prompt: list[int], n: int) -> tuple[float, float, list]:
    import tract

    from t2n.llm_generate import empty_cache, read_layout

    model = tract.nnef().load(archive)
    layout = read_layout(model)
    lm = model.into_runnable()
    past = empty_cache(layout)
    ids = np.asarray([prompt], dtype=np.int64)
    t = time.perf_counter()
    logits, *past = [o.to_numpy() for o in lm.run([ids, *past])]
    prefill = time.perf_counter() - t
    tokens = [int(logits[0, -1].argmax())]
    t = time.perf_counter()
    for _ in range(n - 1):
        logits, *past = [o.to_numpy() for o in lm.run([np.asarray([[tokens[-1]]]), *past])]
        tokens.append(int(logits[0, -1].argmax()))
    return prefill, (time.perf_counter() - t) / max(n - 1, 1), tokens


def torch_times(model, prompt: list[int], n: int) -> tuple[float, float, list]:
    import torch

    with torch.no_grad():
        ids = torch.tensor([prompt])
        t = time.perf_counter()
        out = model(input_ids=ids, use_cache=True)
        prefill = time.perf_counter() - t
        cache = getattr(out, "cache", None) or out.past_key_values
        tokens = [int(out.logits[0, -1].argmax())]
        t = time.perf_counter()
        for _ in range(n - 1):
            out = model(input_ids=torch.tensor([[tokens[-1]]]), cache=cache, use_cache=True)
            cache = getattr(out, "cache", None) or out.past_key_values
            tokens.append(int(out.logits[0, -1].argmax()))
    return prefill, (time.perf_counter() - t) / max(n - 1, 1), tokens


def main(argv=None) -> int:
    import sys

    from tests.fixtures import hybrid_llms

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", action="append", choices=hybrid_llms.FAMILIES)
    ap.add_argument("--weights", action="append", choices=["f32", "q4_0"])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    from t2n import llm

    print(f"hidden {a.hidden}, {a.layers} layers, {a.heads} heads, vocabulary {a.vocab}, "
          f"prompt {a.prompt}, {a.new_tokens} new tokens, best of {a.repeat}; "
          f"{os.cpu_count()} CPUs")
    print("| family | weights | params | export s | tract prefill ms | eager prefill ms "
          "| tract decode ms/token | eager decode ms/token | tokens equal |")
    print("|---|---|---|---|---|---|---|---|---|")
    prompt = [(7919 * i + 13) % a.vocab for i in range(1, a.prompt + 1)]
    for family in a.family or hybrid_llms.FAMILIES:
        model = hybrid_llms.make(family, vocab=a.vocab, hidden=a.hidden, layers=a.layers,
                                 heads=a.heads)
        params = sum(p.numel() for p in model.parameters()) / 1e6
        for weights in a.weights or ["f32", "q4_0"]:
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "m.nnef.tar")
                t = time.perf_counter()
                res = llm.export_llm(model, path, weights=weights, check=True, quiet=True,
                                     max_new_tokens=8)
                export_s = time.perf_counter() - t
                reference = res.export.rounded_model().model if weights != "f32" \
                    else model
                best_t, best_e = [float("inf")] * 2, [float("inf")] * 2
                same = True
                for _ in range(a.repeat):
                    tp, td, tt = tract_times(path, prompt, a.new_tokens)
                    ep, ed, et = torch_times(reference, prompt, a.new_tokens)
                    best_t = [min(best_t[0], tp), min(best_t[1], td)]
                    best_e = [min(best_e[0], ep), min(best_e[1], ed)]
                    same = same and tt == et
                print(f"| {family} | {weights} | {params:.1f} M | {export_s:.1f} "
                      f"| {best_t[0] * 1e3:.1f} | {best_e[0] * 1e3:.1f} "
                      f"| {best_t[1] * 1e3:.2f} | {best_e[1] * 1e3:.2f} | {same} |",
                      flush=True)
        del model
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
