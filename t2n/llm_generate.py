"""Greedy generation with tract from a ``t2n llm`` archive (numpy and tract only).

The archive computes one step of a causal language model: ``input_ids [1, S]`` and the
states ``past_*`` in, the last position's ``logits [1, 1, V]`` (every position's,
``[1, S, V]``, with ``--all-logits``) and the updated states ``present_*`` out, in the same
order: keys and values ``[1, H_kv, P, D]`` -> ``[1, H_kv, P+S, D]`` for attention layers,
fixed-size conv windows and recurrent states for the layers of hybrid and state-space
models. The same archive serves the prompt (zero states, P = 0, S = prompt length) and
every decoding step (S = 1): :func:`generate` feeds each step's present tensors back as the
next step's past ones. An archive exported with ``kv_cache="inplace"`` (property
``t2n.llm.kv_cache``) keeps the keys and values in tract's ``State``, one state per
sequence (``runnable.spawn_state()``): it takes ``input_ids`` and the fixed-size states of
a hybrid family (none for a plain transformer), and returns the logits and those states.

The layout is read from the archive's ``tract_core_properties`` (``t2n.llm.*`` keys), so
this module needs nothing but the archive. It imports neither torch nor t2n's engine: it is
what ``t2n llm --check`` runs in a child process (a tract panic must not take t2n down) and
a small reference for a runtime of your own.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

PREFIX = "t2n.llm."


def read_layout(model) -> dict:
    """The ``t2n.llm.*`` properties of a loaded tract model as plain Python values."""
    keys = [k for k in model.property_keys() if k.startswith(PREFIX)]
    if not keys:
        raise ValueError("the archive has no t2n.llm.* properties: it was not written by "
                         "'t2n llm'")
    out = {}
    for k in keys:
        v = model.property(k)
        try:
            out[k[len(PREFIX):]] = v.to_numpy().tolist()
        except Exception:  # strings: the Python API only shows them through dump()
            out[k[len(PREFIX):]] = _dumped_strings(v.dump())
    for key in [k for k, v in out.items() if v is _CUT]:
        if key not in _FROM_IO:
            raise ValueError(f"tract shows only the first strings of {PREFIX}{key}")
        out[key] = _FROM_IO[key](model)
    return out


_CUT = object()  # a list of strings tract's dump() shows in part


def _dumped_strings(text: str):
    """``Tensor(,String abc)`` -> 'abc'; ``Tensor(2,String a, b)`` -> ['a', 'b'];
    :data:`_CUT` when the dump shows only the first strings (tract cuts long tensors:
    ``Tensor(60,String a, b, ..., l...)``, e.g. the state lists of 7 layers or more)."""
    head, _, body = text.partition("String ")
    body = body[:-1] if body.endswith(")") else body
    if head.startswith("Tensor(,"):
        return body
    items = body.split(", ") if body else []
    count = head[len("Tensor("):].split(",")[0]
    return _CUT if count.isdigit() and int(count) != len(items) else items


def _state_inputs(model) -> list[int]:
    return [i for i in range(model.input_count()) if model.input_name(i).startswith("past_")]


def _state_shapes(model) -> list[str]:
    """The states' shapes at the prompt from their input facts (``1,2,P,8,f32`` ->
    ``1,2,0,8``: the only symbol of a state is ``P``, 0 before the prompt)."""
    return [",".join(d if d.isdigit() else "0" for d in str(model.input_fact(i)).split(",")[:-1])
            for i in _state_inputs(model)]


def _state_kinds(model) -> list[str]:
    """``past_key_3`` -> ``key``, ``past_conv_0_1`` -> ``conv``."""
    return [model.input_name(i).split("_")[1] for i in _state_inputs(model)]


# the string lists tract may cut, rebuilt from the archive's own inputs and outputs
_FROM_IO = {"inputs": lambda m: [m.input_name(i) for i in range(m.input_count())],
            "outputs": lambda m: [m.output_name(i) for i in range(m.output_count())],
            "state_shapes": _state_shapes, "state_kinds": _state_kinds}


def empty_cache(layout: dict) -> list[np.ndarray]:
    """The state tensors of the first step, in input order: zeros of the shapes in
    ``t2n.llm.state_shapes`` (keys and values with P = 0 positions, conv windows and
    recurrent states of their fixed sizes)."""
    shapes = layout.get("state_shapes")
    if shapes is not None:
        shapes = [shapes] if isinstance(shapes, str) else shapes
        return [np.zeros([int(d) for d in s.split(",")], np.float32) for s in shapes]
    if layout.get("kv_cache") == "inplace":  # every state is kept in tract's State
        return []
    past = []  # archives written before t2n.llm.state_shapes: keys and values only
    keys = zip(layout["kv_heads"], layout["head_dim"])
    # archives before the value sizes were written: values sized as keys
    values = zip(layout.get("value_heads", layout["kv_heads"]),
                 layout.get("value_head_dim", layout["head_dim"]))
    for (h, d), (hv, dv) in zip(keys, values):
        past += [np.zeros((1, h, 0, d), np.float32), np.zeros((1, hv, 0, dv), np.float32)]
    return past


def generate(archive: str, prompt: list[int], new_tokens: int,
             image_encoder: str | None = None, pixel_values=None) -> dict:
    """Greedy generation of ``new_tokens`` tokens after ``prompt`` in tract.

    A vision-language archive (``image_features`` among ``t2n.llm.inputs``) gets the
    ``image_encoder`` archive's features of ``pixel_values [N, C, H, W]`` at the prompt's
    step (none without images) and an empty ``[0, E]`` at every other step.

    Returns ``{"tokens": [...], "prefill_seconds", "decode_seconds", "decode_tokens_per_second",
    "load_seconds"}``: the prompt runs in one step, then one token per step (the decode loop
    the tokens per second are measured on)."""
    import tract

    t0 = time.perf_counter()
    # tract_transformers: the in-place cache's operator (a plain archive loads the same)
    model = tract.nnef().with_tract_transformers().load(archive)
    layout = read_layout(model)
    runnable = model.into_runnable()
    load = time.perf_counter() - t0
    inplace = layout.get("kv_cache") == "inplace"
    # inplace: one State per sequence keeps the keys and values (a new prompt: a new state);
    # the states that remain inputs (a hybrid's fixed-size ones) are fed back either way
    run = runnable.spawn_state().run if inplace else runnable.run
    past = empty_cache(layout)
    ids = np.asarray([prompt], dtype=np.int64)
    images, encode = _image_inputs(layout, image_encoder, pixel_values)
    tokens: list[int] = []
    t_prefill = t_decode = 0.0
    for step in range(new_tokens):
        t = time.perf_counter()
        outs = run([ids, *images(step), *past])
        logits = outs[0].to_numpy()
        past = [o.to_numpy() for o in outs[1:]]
        token = int(np.argmax(logits[0, -1]))
        dt = time.perf_counter() - t
        if step == 0:
            t_prefill = dt
        else:
            t_decode += dt
        tokens.append(token)
        ids = np.asarray([[token]], dtype=np.int64)
    steps = max(new_tokens - 1, 0)
    return {"tokens": tokens, "load_seconds": load, "prefill_seconds": t_prefill,
            **encode,
            "decode_seconds": t_decode,
            "decode_tokens_per_second": steps / t_decode if t_decode > 0 else None}


def _image_inputs(layout: dict, encoder: str | None, pixel_values):
    """``(inputs_of(step), timings)``: the ``image_features`` input of each step of a
    vision-language archive (nothing for a text-only one)."""
    if "image_features" not in layout["inputs"]:
        return (lambda step: []), {}
    import tract

    none = np.zeros((0, int(layout["image_features_dim"])), np.float32)
    if encoder is None:
        return (lambda step: [none]), {}
    t0 = time.perf_counter()
    runnable = tract.nnef().load(encoder).into_runnable()
    t1 = time.perf_counter()
    features = runnable.run([np.asarray(pixel_values, np.float32)])[0].to_numpy()
    timings = {"encoder_load_seconds": t1 - t0,
               "encode_seconds": time.perf_counter() - t1, "images": len(pixel_values)}
    return (lambda step: [features if step == 0 else none]), timings


def _main(argv: list[str]) -> int:
    """``python -m t2n.llm_generate ARCHIVE PROMPT_IDS N [IMAGE_ENCODER PIXELS.npy]``:
    JSON result on stdout."""
    archive, prompt, n, *images = argv
    try:
        pixels = (images[0], np.load(images[1])) if images else (None, None)
        result = generate(archive, [int(t) for t in prompt.split(",") if t], int(n), *pixels)
    except Exception as e:  # tract refused the archive: a message, not a crash
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        if len(lines) > 6:
            lines = lines[:1] + ["..."] + lines[-4:]
        sys.stderr.write((" | ".join(lines) or type(e).__name__) + "\n")
        return 3
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
