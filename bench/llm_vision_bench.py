"""``t2n llm`` on a vision-language model: export time, archive sizes and tract's speed.

    python -m bench.llm_vision_bench                     # SmolVLM-256M's sizes, f32 and q4_0
    python -m bench.llm_vision_bench --tiny --weights f32

A ``SmolVLMForConditionalGeneration`` with random weights (default: the sizes of
SmolVLM-256M: SigLIP tower of 12 layers, hidden 768, 512 x 512 images in 16 x 16 patches,
pixel shuffle 4, so 64 image tokens per image; LLaMA decoder of 30 layers, hidden 576,
9 heads, 3 key/value heads, MLP 1536, vocabulary 49280) is exported with
``export_llm(..., check=True)``: the check's prompt holds two images (128 image tokens and
8 text tokens) and its 16 greedy tokens must equal transformers' (q4_0: the model with the
rounded weights). Printed per weight format: export seconds (both archives and the check),
both archives' sizes, tract's image encoding, prefill and decoding times from the check.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def build(tiny: bool):
    import torch
    import transformers as T

    if tiny:
        vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, image_size=32, patch_size=8)
        text = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, intermediate_size=64)
        scale = 2
    else:
        vision = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                      num_attention_heads=12, image_size=512, patch_size=16)
        text = dict(vocab_size=49280, hidden_size=576, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, intermediate_size=1536)
        scale = 4
    # 0.3 makes the tiny model's tokens vary; at 30 layers it makes the residual stream
    # explode, so that float rounding decides the argmax: the default 0.02 there
    init = 0.3 if tiny else 0.02
    torch.manual_seed(0)
    cfg = T.SmolVLMConfig(vision_config=dict(vision, initializer_range=init),
                          text_config=dict(text, model_type="llama", initializer_range=init,
                                           max_position_embeddings=2048),
                          image_token_id=text["vocab_size"] - 2, scale_factor=scale,
                          pad_token_id=0)
    return T.SmolVLMForConditionalGeneration(cfg).eval()


def main(argv=None) -> int:
    from t2n import llm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="the test suite's tiny sizes")
    ap.add_argument("--weights", nargs="+", default=["f32", "q4_0"])
    args = ap.parse_args(argv)
    model = build(args.tiny)
    print(f"SmolVLM, {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
    with tempfile.TemporaryDirectory() as d:
        for w in args.weights:
            out, enc = os.path.join(d, f"m-{w}.nnef.tar"), os.path.join(d, f"m-{w}.vision.nnef.tar")
            t = time.perf_counter()
            res = llm.export_llm(model, out, weights=w, check=True, quiet=True)
            total = time.perf_counter() - t
            g = res.generation
            print(f"{w}: export+check {total:.1f} s (decoder export "
                  f"{res.export.export_seconds:.1f} s, encoder export "
                  f"{res.image_encoder.export_seconds:.1f} s); decoder "
                  f"{os.path.getsize(out) / 1e6:.1f} MB, encoder "
                  f"{os.path.getsize(enc) / 1e6:.1f} MB; tokens equal: {res.passed} "
                  f"{res.tract_tokens}; tract: encode {g['images']} images "
                  f"{g['encode_seconds'] * 1000:.0f} ms, prefill {len(res.prompt)} tokens "
                  f"{g['prefill_seconds'] * 1000:.0f} ms, decode "
                  f"{g['decode_tokens_per_second']:.1f} tokens/s")
            if g.get("original_tokens") is not None:
                same = sum(a == b for a, b in zip(g["original_tokens"], res.tract_tokens))
                print(f"    (f32 model's tokens: {same} of {len(res.tract_tokens)} the same)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
