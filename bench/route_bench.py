"""t2n's archive against the torch.onnx -> tract ONNX route, side by side on real models.

    python -m bench.route_bench [--models resnet18,vit_tiny] [--repeat 7] [--runs 20]
                                [--seconds 1.0] [--container tar|tgz|dir] [--keep DIR]
                                [--profile] [--dump] [--reuse] [--json FILE]

For each model of a fixed set (torchvision, timm and transformers models built from their
constructors with random weights, no download), a child process exports

* t2n's archive (``t2n.export``, ``.nnef.tar`` unless ``--container``), and
* the ONNX route: ``torch.onnx.export(..., dynamo=True)`` then tract's ONNX loader
  (``tract.onnx().load(p).into_model().into_runnable()``),

then ONE tract process loads and runs the two alternately (so that load from other
processes on the machine hits both alike) and prints, per model: op count (t2n's NNEF ops
against the ONNX file's nodes, and both after tract's optimiser), load time
(load + ``into_runnable``, median of at least ``--repeat`` loads and at least ``--seconds``
of them per route, with the loaders made once per process;
the summary adds the ratio of the loads' CPU time, which waits for other processes on a
loaded machine do not inflate)
and run time (median of alternating runs, at least ``--runs`` of them and at least
``--seconds`` per route; the best run too), with the ratios
t2n / ONNX. The summary gives the geometric means and
the worst model of each ratio. A model one route of which tract cannot load (tract's ONNX
declutter fails on LeViT) is printed with tract's error and the other route's figures, and
left out of the ratios (its op counts still count).

``--profile`` prints under each model the op kinds tract's optimised models spend the most
time in (nodes and ms per run, from ``profile_json``), for both routes side by side.

``--dump`` writes, beside the archives (``--keep DIR``), what tract's optimiser made of each
route: one line per node of the optimised model with its op (``profile_json``), so the two can
be diffed to see where a gap comes from.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

from bench import common

# ------------------------------------------------------------------------------ the models
# name -> (library, constructor expression, input spec). Vision inputs are 1x3x64x64 unless
# the model needs more; every model is built from its constructor with random weights.
VISION = 64


def _tv(name, **kw):
    def build():
        common.declare_torchvision_schemas()
        import torch
        import torchvision.models as tvm

        return getattr(tvm, name)(weights=None, **kw).eval(), (torch.randn(1, 3, VISION, VISION),)
    return build


def _timm(name, size=VISION, **kw):
    def build():
        common.declare_torchvision_schemas()
        import timm
        import torch

        extra = dict(kw)
        if "img_size" in extra and extra["img_size"] is None:
            extra["img_size"] = size
        return timm.create_model(name, pretrained=False, **extra).eval(), \
            (torch.randn(1, 3, size, size),)
    return build


def _hf(kind):
    def build():
        common.declare_torchvision_schemas()  # transformers imports torchvision when installed
        import torch
        import transformers as tf

        if kind == "bert":
            cfg = tf.BertConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=4,
                                intermediate_size=1024)
            model = tf.BertModel(cfg)
        elif kind == "gpt2":
            cfg = tf.GPT2Config(n_layer=4, n_embd=256, n_head=4, use_cache=False)
            model = tf.GPT2Model(cfg)
        elif kind == "vit":
            cfg = tf.ViTConfig(image_size=64, patch_size=8, num_hidden_layers=4, hidden_size=192,
                               num_attention_heads=3, intermediate_size=768)
            model = tf.ViTModel(cfg, add_pooling_layer=False)
        else:
            raise ValueError(kind)
        cfg._attn_implementation = "eager"
        model.eval()

        class First(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = model

            def forward(self, x):
                return self.inner(x, return_dict=False)[0]

        if kind == "vit":
            x = torch.randn(1, 3, 64, 64)
        else:
            x = torch.randint(0, cfg.vocab_size, (1, 32))
        return First().eval(), (x,)
    return build


MODELS = {
    "resnet18": _tv("resnet18"),
    "resnet50": _tv("resnet50"),
    "mobilenet_v2": _tv("mobilenet_v2"),
    "mobilenet_v3_small": _tv("mobilenet_v3_small"),
    "efficientnet_b0": _tv("efficientnet_b0"),
    "densenet121": _tv("densenet121"),
    "squeezenet1_1": _tv("squeezenet1_1"),
    "shufflenet_v2_x1_0": _tv("shufflenet_v2_x1_0"),
    "regnet_y_400mf": _tv("regnet_y_400mf"),
    "mnasnet1_0": _tv("mnasnet1_0"),
    "convnext_tiny": _tv("convnext_tiny"),
    "resnext50_32x4d": _tv("resnext50_32x4d"),
    "tf_efficientnet_b0": _timm("tf_efficientnet_b0"),
    "ghostnet_100": _timm("ghostnet_100"),
    "vit_tiny": _timm("vit_tiny_patch16_224", img_size=None),
    "deit_tiny": _timm("deit_tiny_patch16_224", img_size=None),
    "cait_xxs24": _timm("cait_xxs24_224", img_size=None),
    "xcit_nano": _timm("xcit_nano_12_p16_224", img_size=None),
    "mixer_s32": _timm("mixer_s32_224", img_size=None),
    "levit_128s": _timm("levit_128s", size=224),
    "hf_bert": _hf("bert"),
    "hf_gpt2": _hf("gpt2"),
    "hf_vit": _hf("vit"),
}


# ------------------------------------------------------------------------------ children
def _export(job: dict) -> dict:
    """Build one model; write t2n's archive and the ONNX file; count ops."""
    import warnings

    import numpy as np
    import torch

    import t2n

    torch.manual_seed(0)
    model, args = MODELS[job["model"]]()
    out = {}
    np.savez(job["inputs"], *[a.numpy() for a in args])
    t0 = time.perf_counter()
    r = t2n.export(model, args, job["t2n"], quiet=True, progress=False)
    out["t2n_export_s"] = time.perf_counter() - t0
    out["t2n_ops"] = r.op_count
    out["t2n_bytes"] = r.archive_bytes
    out["t2n_hist"] = r.op_histogram
    t0 = time.perf_counter()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            torch.onnx.export(model, args, job["onnx"], dynamo=True, external_data=False)
    out["onnx_export_s"] = time.perf_counter() - t0
    import onnx

    m = onnx.load(job["onnx"])
    nodes = [n.op_type for n in m.graph.node]
    out["onnx_ops"] = sum(1 for n in nodes if n != "Constant")
    out["onnx_bytes"] = os.path.getsize(job["onnx"])
    with torch.no_grad():
        ref = model(*args)
    ref = ref[0] if isinstance(ref, (tuple, list)) else ref
    np.save(job["ref"], ref.detach().numpy())
    return out


def _optimised_nodes(runnable, inputs) -> list[str]:
    """The ops of tract's optimised model, from its profile (one entry per node)."""
    prof = json.loads(runnable.profile_json(inputs))
    nodes = prof.get("nodes", prof) if isinstance(prof, dict) else prof
    ops = []
    for n in nodes:
        if isinstance(n, dict):
            ops.append(str(n.get("op", n.get("op_name", "?"))))
    return ops


def _time_per_op_kind(runnable, inputs, runs: int = 5) -> dict[str, list]:
    """{op kind: [nodes, seconds per run]} of tract's optimised model, from its profile."""
    kinds: dict[str, list] = {}
    for i in range(runs):
        for n in json.loads(runnable.profile_json(inputs)).get("nodes", []):
            entry = kinds.setdefault(str(n.get("op_name", "?")), [0, 0.0])
            entry[0] += i == 0
            entry[1] += float(n.get("secs_per_iter", 0.0)) / runs
    return kinds


def _alternate(names: list[str], once, at_least: int, seconds: float, cap: int) -> int:
    """Call ``once(route)`` (which returns the seconds it took) for every route, alternating
    their order, ``at_least`` rounds and more (up to ``cap``) until each route has taken
    ``seconds``: a model that runs in 2 ms gets hundreds of runs, so one slow run (another
    process, a page fault) moves its median less. Returns the rounds made."""
    spent = dict.fromkeys(names, 0.0)
    rounds = 0
    while names and (rounds < at_least or (rounds < cap and min(spent.values()) < seconds)):
        for k in names if rounds % 2 == 0 else names[::-1]:
            spent[k] += once(k)
        rounds += 1
    return rounds


def _measure(job: dict) -> dict:
    """One process, both routes, alternating: load (+ into_runnable) and run times."""
    import numpy as np
    import tract

    npz = np.load(job["inputs"])
    inputs = [npz[k] for k in sorted(npz.files, key=lambda s: int(s.split("_")[1]))]
    ref = np.load(job["ref"])

    # the loaders are made once, as a program loading its models would: building tract's
    # NNEF context (its operator registries) costs a fixed ~0.03-0.09 s whatever the
    # archive, reported apart as nnef_context_s
    t0 = time.perf_counter()
    nnef = tract.nnef()
    nnef_context_s = time.perf_counter() - t0
    onnx = tract.onnx()

    def load_t2n():
        return nnef.load(job["t2n"]).into_runnable()

    def load_onnx():
        return onnx.load(job["onnx"]).into_model().into_runnable()

    routes = {"t2n": load_t2n, "onnx": load_onnx}
    out = {"nnef_context_s": nnef_context_s}
    for k in list(routes):  # a route tract cannot load is reported, the other measured
        try:
            routes[k]()
        except Exception as e:  # tract's error (e.g. its ONNX declutter on LeViT)
            msg = str(e).split("Stack backtrace")[0].split("\n")
            out[f"{k}_error"] = " / ".join(ln.strip() for ln in msg if ln.strip())[:300]
            del routes[k]
    loads = {k: [] for k in routes}
    load_cpu = {k: [] for k in routes}  # CPU time: what the load costs, without the waits
    runs = {k: [] for k in routes}
    runnables = {}

    def load(k):
        t0, c0 = time.perf_counter(), time.process_time()
        runnables[k] = routes[k]()
        load_cpu[k].append(time.process_time() - c0)
        loads[k].append(time.perf_counter() - t0)
        return loads[k][-1]

    def run(k):
        t0 = time.perf_counter()
        runnables[k].run(inputs)
        runs[k].append(time.perf_counter() - t0)
        return runs[k][-1]

    _alternate(list(routes), load, job["repeat"], job["seconds"], cap=50)
    for k, r in runnables.items():
        got = r.run(inputs)[0].to_numpy()
        out[f"{k}_err"] = float(np.max(np.abs(got - ref))) if got.shape == ref.shape else None
        r.run(inputs)  # warm-up
    out["runs"] = _alternate(list(routes), run, job["runs"], job["seconds"], cap=5000)
    for k in routes:
        out[f"{k}_load_s"] = statistics.median(loads[k])
        out[f"{k}_run_s"] = statistics.median(runs[k])
        out[f"{k}_run_min_s"] = min(runs[k])
        out[f"{k}_load_min_s"] = min(loads[k])
        out[f"{k}_load_cpu_s"] = statistics.median(load_cpu[k])
        try:
            nodes = _optimised_nodes(runnables[k], inputs)
            out[f"{k}_opt_nodes"] = len(nodes)
            if job.get("dump"):
                with open(job[k] + ".optimised.txt", "w") as f:
                    f.write("\n".join(nodes) + "\n")
            if job.get("profile"):
                out[f"{k}_profile"] = _time_per_op_kind(runnables[k], inputs)
        except Exception as e:  # profile is a diagnostic only
            out[f"{k}_opt_nodes"] = None
            out[f"{k}_profile_error"] = str(e)[:200]
    return out


def _profile_nodes_check(job):  # pragma: no cover - debugging aid
    return _measure(job)


# ------------------------------------------------------------------------------ parent
def _print_profile(t2n: dict, onnx: dict, top: int = 8) -> None:
    """The op kinds taking the most time on either route: nodes and ms per run, side by side."""
    kinds = sorted(set(t2n) | set(onnx),
                   key=lambda o: -max(t2n.get(o, [0, 0])[1], onnx.get(o, [0, 0])[1]))
    for o in kinds[:top]:
        (na, ta), (nb, tb) = t2n.get(o, [0, 0.0]), onnx.get(o, [0, 0.0])
        print(f"    {o[:34]:34} t2n {na:4d} nodes {1e3 * ta:7.2f} ms   "
              f"onnx {nb:4d} nodes {1e3 * tb:7.2f} ms", flush=True)


def _ratio(a, b):
    return None if not a or not b else a / b


def _geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    ap.add_argument("--repeat", type=int, default=5, help="loads per route, at least")
    ap.add_argument("--runs", type=int, default=20, help="timed runs per route, at least")
    ap.add_argument("--seconds", type=float, default=1.0,
                    help="load and run each route for at least this long (more loads and "
                         "runs for small models)")
    ap.add_argument("--container", choices=("tar", "tgz", "dir"), default="tar")
    ap.add_argument("--keep", help="folder for the archives (kept); default a temporary one")
    ap.add_argument("--reuse", action="store_true", help="reuse archives found in --keep")
    ap.add_argument("--profile", action="store_true",
                    help="print, per model, tract's time per op kind on both routes")
    ap.add_argument("--dump", action="store_true",
                    help="write each route's optimised node list beside its archive")
    ap.add_argument("--json", help="write the per-model figures to this file")
    a = ap.parse_args(argv)
    names = [m for m in a.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(MODELS)}")
    folder = a.keep or tempfile.mkdtemp(prefix="t2n-route-bench-")
    os.makedirs(folder, exist_ok=True)
    ext = {"tar": ".nnef.tar", "tgz": ".nnef.tgz", "dir": ".nnef"}[a.container]
    print(f"load average at start: {common.load_average():.2f}; archives in {folder}",
          flush=True)
    rows = {}
    hdr = (f"{'model':20} {'ops t2n':>7} {'onnx':>5} {'opt t2n':>7} {'onnx':>5} "
           f"{'load t2n':>8} {'onnx':>6} {'ratio':>5} {'run ms t2n':>10} {'onnx':>7} "
           f"{'ratio':>5}  max|err| t2n / onnx")
    print(hdr, flush=True)
    for name in names:
        job = {"model": name, "t2n": os.path.join(folder, name + ext),
               "onnx": os.path.join(folder, name + ".onnx"),
               "inputs": os.path.join(folder, name + ".inputs.npz"),
               "ref": os.path.join(folder, name + ".ref.npy"),
               "repeat": a.repeat, "runs": a.runs, "seconds": a.seconds, "dump": a.dump,
               "profile": a.profile}
        meta_path = os.path.join(folder, name + ".export.json")
        if a.reuse and os.path.exists(meta_path) and os.path.exists(job["t2n"]):
            ex = json.load(open(meta_path))
        else:
            ex = common.run_child("bench.route_bench", dict(job, kind="export"), timeout=1800)
            if "error" not in ex:
                json.dump(ex, open(meta_path, "w"))
        if "error" in ex:
            print(f"{name:20} export failed: {ex['error']}", flush=True)
            rows[name] = ex
            continue
        me = common.run_child("bench.route_bench", dict(job, kind="measure"), timeout=1800)
        if "error" in me:
            print(f"{name:20} measure failed: {me['error']}", flush=True)
            rows[name] = dict(ex, **me)
            continue
        r = dict(ex, **me)
        failed = [k for k in ("t2n", "onnx") if f"{k}_error" in r]
        if failed:
            rows[name] = r
            fig = "".join(f"  {k} {1e3 * r[k + '_run_s']:.2f} ms run, {r[k + '_load_s']:.3f} s load"
                          for k in ("t2n", "onnx") if k + "_run_s" in r)
            print(f"{name:20} {r['t2n_ops']:7d} {r['onnx_ops']:5d}  "
                  + "; ".join(f"{k} route failed in tract: {r[k + '_error']}" for k in failed)
                  + fig, flush=True)
            continue
        r["load_ratio"] = _ratio(r["t2n_load_s"], r["onnx_load_s"])
        r["run_ratio"] = _ratio(r["t2n_run_s"], r["onnx_run_s"])
        r["run_min_ratio"] = _ratio(r["t2n_run_min_s"], r["onnx_run_min_s"])
        r["load_cpu_ratio"] = _ratio(r.get("t2n_load_cpu_s"), r.get("onnx_load_cpu_s"))
        rows[name] = r
        err = lambda v: "-" if v is None else f"{v:.1e}"  # noqa: E731
        print(f"{name:20} {r['t2n_ops']:7d} {r['onnx_ops']:5d} {r['t2n_opt_nodes'] or 0:7d} "
              f"{r['onnx_opt_nodes'] or 0:5d} {r['t2n_load_s']:8.3f} {r['onnx_load_s']:6.3f} "
              f"{r['load_ratio']:5.2f} {1e3 * r['t2n_run_s']:10.2f} "
              f"{1e3 * r['onnx_run_s']:7.2f} {r['run_ratio']:5.2f}  "
              f"{err(r['t2n_err'])} / {err(r['onnx_err'])}", flush=True)
        if a.profile and "t2n_profile" in r and "onnx_profile" in r:
            _print_profile(r["t2n_profile"], r["onnx_profile"])
    ok = {k: r for k, r in rows.items() if "run_ratio" in r}
    if ok:
        print()
        for key, label in (("run_ratio", "run time"), ("load_ratio", "load time")):
            g = _geomean([r[key] for r in ok.values()])
            worst = max(ok, key=lambda k: ok[k][key])
            print(f"{label:9} t2n/onnx: geomean {g:.3f}, worst {worst} "
                  f"{ok[worst][key]:.3f}, best {min(ok, key=lambda k: ok[k][key])} "
                  f"{min(r[key] for r in ok.values()):.3f}")
        for key, label in (("run_min_ratio", "run time (best of runs)"),
                           ("load_cpu_ratio", "load CPU time (process time, median)")):
            if not all(r.get(key) for r in ok.values()):
                continue
            g = _geomean([r[key] for r in ok.values()])
            worst = max(ok, key=lambda k: ok[k][key])
            print(f"{label} t2n/onnx: geomean {g:.3f}, worst {worst} {ok[worst][key]:.3f}")
        ctx = [r["nnef_context_s"] for r in ok.values() if "nnef_context_s" in r]
        if ctx:
            print(f"tract.nnef() context, made once per process (not in the load times): "
                  f"median {statistics.median(ctx):.3f} s")
        counted = {k: r for k, r in rows.items() if "t2n_ops" in r and "onnx_ops" in r}
        more = [k for k, r in counted.items() if r["t2n_ops"] > r["onnx_ops"]]
        print(f"op count t2n <= onnx on {len(counted) - len(more)} of {len(counted)} models"
              + (f" (more on: {', '.join(more)})" if more else ""))
        one = [k for k, r in rows.items() if any(f"{x}_error" in r for x in ("t2n", "onnx"))]
        if one:
            print(f"not in the ratios (a route failed in tract): {', '.join(one)}")
        print(f"{len(ok)} of {len(rows)} models measured; "
              f"load average at end: {common.load_average():.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    if not common.child_main({"export": _export, "measure": _measure}):
        sys.exit(main())
