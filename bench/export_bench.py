"""Export time and memory of real models: t2n (trace and torch.export capture) beside
torch.onnx, with t2n's time per phase.

    python -m bench.export_bench                                  # the fixed set, all routes
    python -m bench.export_bench --models resnet18,gpt2 --routes trace,onnx
    python -m bench.export_bench --repeat 3 --json figures.json

Each model is built from its constructor or config (random weights, no download). Every
export runs in a fresh child process that builds the model (not timed), then exports it
once and reports wall seconds, CPU seconds (user + system of all its threads), the peak
resident memory (VmHWM, the model itself included) and the memory the model held before the
export. The routes alternate per round (t2n's first in even rounds), so machine load hits
them alike; with ``--repeat`` the medians are printed. Routes:

* ``trace``: ``t2n.export(model, args, "m.nnef.tar")``, the default capture;
* ``export``: the same with ``capture="export"`` (torch.export);
* ``onnx``: ``torch.onnx.export(model, args, "m.onnx", dynamo=True)``, the peer route
  (needs the ``bench`` extra: onnx, onnxscript).

t2n's rows add its phases (``ExportResult.phase_seconds``: capture, type completion, walk,
each pass, write), the largest first, so a slower export shows which phase grew. The
summary gives t2n/onnx ratios of wall time and peak memory per model. Nothing is asserted:
CI runs two models to print the figures beside every change.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import tempfile

from bench import common

ROUTES = ("trace", "export", "onnx")


# ------------------------------------------------------------------------------ the models
def _tv(name, size=224):
    def build():
        import torch

        common.declare_torchvision_schemas()
        import torchvision.models as tvm

        return getattr(tvm, name)(weights=None).eval(), (torch.randn(1, 3, size, size),)
    return build


def _ids(vocab, n):
    import torch

    return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(0))


def resnet18_fixture():
    """The demo's ResNet-18-shaped fixture (``make demo``), 1x3x224x224."""
    import torch

    from tests.fixtures.models import make_resnet18

    return make_resnet18(), (torch.randn(1, 3, 224, 224),)


def bert_base():
    """BERT-base (110M) from its default config, ids [1, 128]."""
    common.declare_torchvision_schemas()
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig()).eval(), (_ids(30522, 128),)


def gpt2():
    """GPT-2 small (124M, ``GPT2LMHeadModel`` default config, no cache), ids [1, 64]."""
    common.declare_torchvision_schemas()
    from transformers import GPT2Config, GPT2LMHeadModel

    # no cache output: torch.onnx (dynamo) cannot export a DynamicCache
    return GPT2LMHeadModel(GPT2Config(use_cache=False)).eval(), (_ids(50257, 64),)


def whisper_tiny_encoder():
    """The encoder of a Whisper-tiny-sized config (d_model 384, 4 layers, 6 heads), 80 mel
    bins x 3000 frames."""
    import torch

    common.declare_torchvision_schemas()
    from transformers import WhisperConfig, WhisperModel

    cfg = WhisperConfig(d_model=384, encoder_layers=4, decoder_layers=4,
                        encoder_attention_heads=6, decoder_attention_heads=6,
                        encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80)
    return WhisperModel(cfg).get_encoder().eval(), (torch.randn(1, 80, 3000),)


def llama100m():
    """A LLaMA config of 124.7M parameters (hidden 768, 12 layers, 12 heads, 4 KV heads,
    MLP 2048, vocab 32000, untied), ids [1, 64]."""
    common.declare_torchvision_schemas()
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      num_key_value_heads=4, intermediate_size=2048, vocab_size=32000,
                      tie_word_embeddings=False, use_cache=False)
    return LlamaForCausalLM(cfg).eval(), (_ids(32000, 64),)


MODELS = {
    "resnet18": resnet18_fixture,
    "resnet50": _tv("resnet50"),
    "mobilenet_v3": _tv("mobilenet_v3_large"),
    "vit_b16": _tv("vit_b_16"),
    "bert_base": bert_base,
    "gpt2": gpt2,
    "whisper_tiny_encoder": whisper_tiny_encoder,
    "llama100m": llama100m,
}


# ------------------------------------------------------------------------------ child
def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def job_export(job: dict) -> dict:
    """Build the model (not timed), export it once by ``job["route"]``, report the cost."""
    import torch

    torch.manual_seed(0)
    model, args = MODELS[job["model"]]()
    before = common.rss()
    out = os.path.join(job["work"], job["model"] + "-" + job["route"])
    cpu, wall = _cpu_seconds(), common.timer()
    phases = {}
    try:
        if job["route"] == "onnx":
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, args, out + ".onnx", dynamo=True, verbose=False)
        else:
            import t2n

            r = t2n.export(model, args, out + ".nnef.tar", capture=job["route"],
                           progress=False, quiet=True)
            phases = r.phase_seconds
    except Exception as e:  # a route that cannot export this model: printed, not raised
        return {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"}
    wall, cpu = common.timer() - wall, _cpu_seconds() - cpu
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss": common.peak_rss(), "rss_model": before,
            "phases": phases}


HANDLERS = {"export": job_export}


# ------------------------------------------------------------------------------ parent
def _median_row(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    row = {k: statistics.median(r[k] for r in ok)
           for k in ("wall_s", "cpu_s", "peak_rss", "rss_model")}
    names = {n for r in ok for n in r["phases"]}
    row["phases"] = {n: statistics.median(r["phases"].get(n, 0.0) for r in ok) for n in names}
    row["runs"] = len(ok)
    return row


def _phase_line(phases: dict, top: int = 6) -> str:
    parts = sorted(phases.items(), key=lambda kv: -kv[1])
    shown = [f"{n} {s:.2f}" for n, s in parts[:top] if s >= 0.005]
    rest = sum(s for _, s in parts[top:])
    return ", ".join(shown) + (f", other {rest:.2f}" if rest >= 0.005 else "")


def bench_model(name: str, routes: list[str], repeat: int, work: str) -> dict:
    runs: dict[str, list] = {r: [] for r in routes}
    for i in range(repeat):
        order = routes if i % 2 == 0 else list(reversed(routes))
        for route in order:
            runs[route].append(common.run_child("bench.export_bench", {
                "kind": "export", "model": name, "route": route, "work": work}))
            for f in os.listdir(work):  # archives are not kept: disk stays small
                p = os.path.join(work, f)
                shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    return {route: _median_row(rs) for route, rs in runs.items()}


def report(name: str, rows: dict) -> None:
    print(f"\n== {name}")
    print(f"   {'route':7} {'wall s':>7} {'cpu s':>7} {'peak RSS MB':>12} {'model MB':>9}   "
          "t2n phases (s)")
    for route, r in rows.items():
        if "error" in r:
            print(f"   {route:7} failed: {r['error']}")
            continue
        print(f"   {route:7} {r['wall_s']:7.2f} {r['cpu_s']:7.2f} {common.mb(r['peak_rss']):>12} "
              f"{common.mb(r['rss_model']):>9}   {_phase_line(r['phases'])}")
    onnx = rows.get("onnx")
    if onnx and "error" not in onnx:
        for route in ("trace", "export"):
            r = rows.get(route)
            if r and "error" not in r:
                print(f"   t2n {route} / onnx: wall {r['wall_s'] / onnx['wall_s']:.2f}x, "
                      f"peak RSS {r['peak_rss'] / onnx['peak_rss']:.2f}x")


def main(argv=None) -> int:
    if common.child_main(HANDLERS):
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated, of: {', '.join(MODELS)}")
    ap.add_argument("--routes", default=",".join(ROUTES), help="of: trace, export, onnx")
    ap.add_argument("--repeat", type=int, default=1, help="rounds (fresh process each)")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    a = ap.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    routes = [r for r in a.routes.split(",") if r]
    unknown = [m for m in models if m not in MODELS] + [r for r in routes if r not in ROUTES]
    if unknown:
        ap.error(f"unknown model or route: {', '.join(unknown)}")
    work = tempfile.mkdtemp(prefix="t2n-export-bench-")
    print(f"load average at start: {common.load_average():.2f}; {a.repeat} round(s), routes "
          f"{', '.join(routes)}")
    figures = {}
    try:
        for name in models:
            figures[name] = bench_model(name, routes, a.repeat, work)
            report(name, figures[name])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nload average at end: {common.load_average():.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
