"""The sha256 of the archives of a fixed set of exports: proof that a change to the passes,
the walk or the writer leaves every archive byte for byte as it was.

    python -m bench.archive_digests --save digests.json      # on the code before the change
    python -m bench.archive_digests --compare digests.json   # after it: lists what differs
    python -m bench.archive_digests --list                   # the cases
    python -m bench.archive_digests --compare F --only gpt2,zoo_tv_resnet18 --skip gpt2_small

The cases: the fixtures (tests/fixtures/models.py, DLRM, KWS), GPT-2 small (124 M, default config,
input ids [1, 64]), a small BERT with dynamic batch and sequence, ten zoo models (torchvision,
timm, transformers; weights redrawn as the zoo tests do), ``capture="export"`` for a few, and
``weights="f16"``/``"q4_0"`` and ``compact=True`` for a few. Each export writes a ``.tar`` (the
archive's bytes, no gzip level in the way) into a temporary folder; nothing is checked in
tract (the test suite does that): this script only pins the bytes. Every case builds its own
model with fixed seeds and the process runs torch on one thread, so a case's digest depends
on t2n's code alone (and the torch/transformers/timm versions).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
import warnings

from bench import common

ZOO = os.path.join(common.ROOT, "tests", "zoo")


# ------------------------------------------------------------------------------ cases
def _fixture(name):
    def build():
        from tests.fixtures import models

        return models.FIXTURES[name][0](), models.example_inputs(name), {}
    return build


def _dlrm():
    from tests.fixtures import dlrm

    return (dlrm.make_dlrm(), dlrm.example_inputs(8),
            dict(input_names=dlrm.INPUT_NAMES, output_names=dlrm.OUTPUT_NAMES,
                 dynamic_axes=dlrm.DYNAMIC_AXES))


def _kws():
    import torch

    from tests.fixtures import kws

    torch.manual_seed(0)  # the fixture draws its weights from the global generator
    return kws.make_kws(), (kws.example_input(),), {}


def _gpt2_small():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).eval()
    ids = torch.randint(0, 50257, (1, 64), generator=torch.Generator().manual_seed(0))
    return model, {"input_ids": ids}, {}


def _vision(name, **export):
    def build():
        import torch

        sys.path.insert(0, ZOO)
        from vision_models import MODELS
        from zoo_weights import redraw

        entry = next(m for m in MODELS if m.name == name)
        torch.manual_seed(0)
        model = entry.build()
        shape = tuple(entry.shape[1:])
        redraw(model, seed=0, calibrate_input=lambda: (torch.randn(4, *shape),))
        return model, (torch.randn(1, *shape),), dict(export)
    return build


def _transformers(name, dynamic=False, **export):
    def build():
        sys.path.insert(0, ZOO)
        from transformers_models import MODELS

        entry = next(m for m in MODELS if m.name == name)
        model = entry.build()
        args = entry.inputs(*entry.size)
        kw = dict(export)
        if dynamic:
            kw["dynamic_axes"] = {k: v for k, v in entry.dynamic.items() if k in args}
        return model, args, kw
    return build


def _with(build, **export):
    def wrapped():
        model, args, kw = build()
        return model, args, {**kw, **export}
    return wrapped


CASES = {
    "fixture_resnet18": _fixture("resnet18"),
    "fixture_mlp": _fixture("mlp"),
    "fixture_mobilenet_block": _fixture("mobilenet_block"),
    "fixture_dlrm": _dlrm,
    "fixture_kws": _kws,
    "fixture_resnet18_export": _with(_fixture("resnet18"), capture="export"),
    "fixture_mlp_f16": _with(_fixture("mlp"), weights="f16"),
    "fixture_mobilenet_block_q4_0": _with(_fixture("mobilenet_block"), weights="q4_0"),
    "fixture_resnet18_compact": _with(_fixture("resnet18"), compact=True),
    "gpt2_small": _gpt2_small,
    "bert_dynamic": _transformers("bert", dynamic=True),
    "bert_dynamic_export": _transformers("bert", dynamic=True, capture="export"),
    "zoo_tv_resnet18": _vision("tv_resnet18"),
    "zoo_tv_mobilenet_v3_small": _vision("tv_mobilenet_v3_small"),
    "zoo_tv_convnext": _vision("tv_convnext"),
    "zoo_tv_vit": _vision("tv_vit"),
    "zoo_tv_vit_export": _vision("tv_vit", capture="export"),
    "zoo_tv_densenet_q4_0": _vision("tv_densenet", weights="q4_0"),
    "zoo_timm_efficientnet_b0": _vision("timm_tf_efficientnet_b0"),
    "zoo_timm_swin_tiny_f16": _vision("timm_swin_tiny", weights="f16"),
    "zoo_gpt2": _transformers("gpt2", dynamic=True),
    "zoo_llama": _transformers("llama", dynamic=True),
    "zoo_llama_q4_0": _transformers("llama", weights="q4_0"),
    "zoo_qwen3": _transformers("qwen3"),
    "zoo_mixtral": _transformers("mixtral"),
    "zoo_deberta_v2": _transformers("deberta_v2"),
    "zoo_albert_compact": _transformers("albert", compact=True),
    # capture="export" over more families (its re-trace is skipped when it has nothing to do)
    "zoo_tv_convnext_export": _vision("tv_convnext", capture="export"),
    "zoo_tv_mobilenet_v3_small_export": _vision("tv_mobilenet_v3_small", capture="export"),
    "zoo_timm_swin_tiny_export": _vision("timm_swin_tiny", capture="export"),
    "zoo_timm_vit_tiny_export": _vision("timm_vit_tiny", capture="export"),
    "zoo_gpt2_export": _transformers("gpt2", dynamic=True, capture="export"),
    "zoo_llama_export": _transformers("llama", capture="export"),
    "zoo_deberta_v2_export": _transformers("deberta_v2", capture="export"),
    "zoo_distilbert_export": _transformers("distilbert", capture="export"),
}


def digest(name: str) -> str:
    """The sha256 of case ``name``'s archive."""
    import t2n

    model, args, kw = CASES[name]()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.nnef.tar")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t2n.export(model, args, path, **kw)
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--save", metavar="FILE", help="write the digests to FILE (JSON)")
    mode.add_argument("--compare", metavar="FILE", help="compare with the digests in FILE")
    mode.add_argument("--list", action="store_true", help="list the cases")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--skip", default="", help="comma-separated case names to leave out")
    a = ap.parse_args(argv)
    if a.list:
        print("\n".join(CASES))
        return 0
    sys.path.insert(0, common.ROOT)
    common.declare_torchvision_schemas()
    import torch

    # one thread: with two, the capture="export" archive of tv_mobilenet_v3_small has other
    # bytes than with one (on main's code too), and a digest must depend on t2n's code only
    torch.set_num_threads(1)
    names = [n for n in (a.only.split(",") if a.only else CASES) if n]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown case(s): {', '.join(unknown)}")
    skip = set(filter(None, a.skip.split(",")))
    names = [n for n in names if n not in skip]
    saved = {}
    if a.compare:
        with open(a.compare) as f:
            saved = json.load(f)
    got, differ = {}, []
    for n in names:
        t = time.process_time()
        try:
            got[n] = digest(n)
        except Exception as e:  # noqa: BLE001 - a failing case is a result, not a crash
            got[n] = f"error: {type(e).__name__}: {e}".splitlines()[0][:200]
        status = ""
        if a.compare:
            want = saved.get(n)
            status = "same" if want == got[n] else ("new" if want is None else "DIFFERS")
            if status != "same":
                differ.append(n)
        print(f"{n:32s} {got[n][:16]:16s} {status:8s} {time.process_time() - t:6.1f} s cpu",
              flush=True)
    if a.save:
        with open(a.save, "w") as f:
            json.dump(got, f, indent=1, sort_keys=True)
            f.write("\n")
    if differ:
        print(f"{len(differ)} case(s) differ: {', '.join(differ)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
