"""What the ``tract_assert`` symbol bounds buy a dynamic export: BERT with and without them.

    python -m bench.bounds_bench                  # batch and sequence dynamic, then sequence only
    python -m bench.bounds_bench --reps 20 --sizes 1x128,8x128,4x512

A small ``transformers.BertModel`` (hidden 256, 4 layers, 4 heads, MLP 1024, random
weights) is exported with ``t2n.export(..., check=True)`` three times: with batch ``B`` and
sequence ``S`` dynamic (``B >= 1``, ``S >= 1``), the same with most sizes given
(``("B", 1, 64)``, ``("S", 1, 512)``: ``B <= 64``, ``S <= 512`` too), and with ``S`` dynamic
only (batch 2). Each archive is copied
without its ``extension tract_assert`` lines; one tract process loads the pair, checks
that both give the same outputs, then times each size alternating between the two
(median of ``--reps``), and counts the element-wise ops tract's optimiser chose: a
binary op that stays the generic broadcasting ``Add``/``Mul`` instead of
``OptAddUnicast``/``OptMulUnicast`` is one tract could not prove large enough (its
test is ``min(32, elements) == 32`` on the symbolic element count).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


VARIANTS = (("B and S dynamic", {0: "B", 1: "S"}),
            ("B <= 64 and S <= 512 (most sizes given)", {0: ("B", 1, 64), 1: ("S", 1, 512)}),
            ("S dynamic, batch 2", {1: "S"}))


def export_bert(path: str, axes: dict) -> None:
    import torch
    import transformers

    import t2n

    cfg = transformers.BertConfig(vocab_size=30522, hidden_size=256, num_hidden_layers=4,
                                  num_attention_heads=4, intermediate_size=1024,
                                  max_position_embeddings=512)
    torch.manual_seed(0)
    model = transformers.BertModel(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    t2n.export(model, (ids, mask), path, input_names=["input_ids", "attention_mask"],
               dynamic_axes={"input_ids": axes, "attention_mask": axes}, check=True,
               quiet=True)


def without_asserts(src: str, dst: str) -> list[str]:
    """Copy of the archive ``src`` without its ``tract_assert`` lines (returned)."""
    dropped = []
    with tarfile.open(src) as s, tarfile.open(dst, "w") as d:
        for member in s.getmembers():
            data = s.extractfile(member).read()
            if member.name.endswith("graph.nnef"):
                lines = data.decode().split("\n")
                dropped = [ln for ln in lines if "tract_assert" in ln]
                data = "\n".join(ln for ln in lines if "tract_assert" not in ln).encode()
                member.size = len(data)
            d.addfile(member, io.BytesIO(data))
    return dropped


def child(paths: list[str], sizes: list[tuple[int, int]], reps: int) -> dict:
    import numpy as np
    import tract

    lms = {p: tract.nnef().load(p).into_runnable() for p in paths}
    rng = np.random.default_rng(0)
    out = []
    for b, s in sizes:
        ins = [rng.integers(0, 30522, (b, s)).astype(np.int64), np.ones((b, s), np.int64)]
        results = [[o.to_numpy() for o in lms[p].run(ins)] for p in paths]
        same = all(np.array_equal(x, y) for x, y in zip(*results))
        times = {p: [] for p in paths}
        for _ in range(reps):
            for p in paths:
                t = time.perf_counter()
                lms[p].run(ins)
                times[p].append(time.perf_counter() - t)
        ops = {}
        for p in paths:
            count: dict = {}
            for node in json.loads(lms[p].profile_json(ins))["nodes"]:
                name = node["op_name"]
                if name in ("Add", "Mul", "Sub", "OptAddUnicast", "OptMulUnicast",
                            "OptSubUnicast", "OptAddByScalar", "OptMulByScalar"):
                    count[name] = count.get(name, 0) + 1
            ops[p] = count
        out.append({"size": [b, s], "same": same, "ops": ops,
                    "ms": {p: statistics.median(v) * 1000 for p, v in times.items()}})
    return {"rows": out}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--sizes", default="1x16,1x128,8x128,4x500", help="BxS,...")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        paths, sizes, reps = json.loads(a.child[0]), json.loads(a.child[1]), int(a.child[2])
        print(json.dumps(child(paths, [tuple(x) for x in sizes], reps)))
        return
    sizes = [tuple(int(x) for x in s.split("x")) for s in a.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="t2n-bounds-") as work:
        for k, (label, axes) in enumerate(VARIANTS):
            run = sizes if 0 in axes else [(2, s) for _, s in sizes]
            run = list(dict.fromkeys(run))
            with_b = os.path.join(work, f"bert-{k}.nnef.tar")
            without = os.path.join(work, f"bert-{k}-noassert.nnef.tar")
            export_bert(with_b, axes)
            dropped = without_asserts(with_b, without)
            p = subprocess.run([sys.executable, "-m", "bench.bounds_bench", "--child",
                                json.dumps([with_b, without]), json.dumps(run), str(a.reps)],
                               capture_output=True, text=True, cwd=ROOT,
                               env=dict(os.environ, PYTHONPATH=ROOT))
            if p.returncode != 0:
                raise SystemExit(p.stderr[-2000:])
            res = json.loads(p.stdout.strip().splitlines()[-1])
            print(f"\nBERT (hidden 256, 4 layers), {label}; asserts: "
                  + " ".join(x.replace("extension tract_assert ", "") for x in dropped))
            print(f"{'B x S':>9} {'with ms':>9} {'without':>9} {'ratio':>6}  element-wise ops "
                  "with / without asserts")
            for row in res["rows"]:
                x, y = (row["ms"][q] for q in (with_b, without))
                ops = " / ".join(", ".join(f"{k} {v}" for k, v in sorted(row["ops"][q].items()))
                                 for q in (with_b, without))
                print(f"{'x'.join(map(str, row['size'])):>9} {x:>9.2f} {y:>9.2f} "
                      f"{x / y:>6.2f}  {ops}" + ("" if row["same"] else "  OUTPUTS DIFFER"))


if __name__ == "__main__":
    main()
