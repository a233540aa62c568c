"""``t2n llm --kv-cache inplace``: the key/value cache kept in tract's State
(``tract_transformers_dyn_kv_cache``, :mod:`t2n.passes.stateful_cache`), proved by greedy
generation in tract against transformers' ``generate(do_sample=False)`` (hybrid families
too: their fixed-size states stay inputs/outputs beside the State), and the pass itself
on a small module run step by step in tract (in a child process)."""

import json
import pathlib
import re
import subprocess
import sys
import tarfile
import warnings

import numpy as np
import pytest
import torch

import t2n
from t2n import llm
from t2n.cli import main as cli_main
from t2n.errors import UsageError

import transformers
from fixtures import hybrid_llms

pytestmark = pytest.mark.slow

_COMMON = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128,
               initializer_range=0.3)


def _model(family: str):
    T = transformers
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if family == "llama":
            return T.LlamaForCausalLM(T.LlamaConfig(**_COMMON))
        # a sliding (window 5) and a full layer: the masks read P from the State
        return T.Qwen2ForCausalLM(T.Qwen2Config(**_COMMON, use_sliding_window=True,
                                                sliding_window=5, max_window_layers=1))


def _graph_text(archive) -> str:
    with tarfile.open(archive) as t:
        return t.extractfile("graph.nnef").read().decode()


def _cli(*argv):
    with pytest.raises(SystemExit) as e:
        cli_main(list(map(str, argv)))
    return e.value.code


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_cli_inplace_check_generates_like_transformers(family, tmp_path, capsys):
    d = tmp_path / family
    _model(family).save_pretrained(d)
    out = tmp_path / "out.nnef.tar"
    assert _cli("llm", d, "-o", out, "--kv-cache", "inplace", "--check", "--json") == 0
    res = json.loads(capsys.readouterr().out)
    lm = res["llm"]
    assert lm["passed"] is True and lm["kv_cache"] == "inplace"
    assert lm["tract_tokens"] == lm["reference_tokens"] and len(lm["tract_tokens"]) == 16
    assert len(set(lm["tract_tokens"])) > 3, "a model repeating one token proves little"
    assert [i["name"] for i in res["inputs"]] == ["input_ids"]
    assert [o["name"] for o in res["outputs"]] == ["logits"]
    text = _graph_text(out)
    assert "extension tract_registry tract_transformers;" in text
    assert text.count("tract_transformers_dyn_kv_cache(") == 4  # keys and values, 2 layers
    assert "past_key_0 = external" not in text
    assert '("t2n.llm.kv_cache", "inplace")' in text
    assert '("t2n.llm.inputs", ["input_ids"])' in text


def test_inplace_q4_0_generates_like_the_rounded_model(tmp_path):
    res = llm.export_llm(_model("llama"), tmp_path / "m.nnef.tgz", weights="q4_0",
                         kv_cache="inplace", check=True, quiet=True)
    assert res.passed and res.tract_tokens == res.reference_tokens
    assert res.kv_cache == "inplace" and [i.name for i in res.export.inputs] == ["input_ids"]


def test_concat_archive_says_so(tmp_path):
    llm.export_llm(_model("llama"), tmp_path / "m.nnef.tar", quiet=True)
    text = _graph_text(tmp_path / "m.nnef.tar")
    assert '("t2n.llm.kv_cache", "concat")' in text and "tract_transformers" not in text


def test_docs_state_loop_generates_like_transformers(tmp_path):
    """docs/llm.md's loop over a tract State, run as written: two prompts, one state each."""
    section = (pathlib.Path(__file__).parents[1] / "docs" / "llm.md").read_text()
    code = re.findall(r"```python\n(.*?)```", section, re.S)[1]
    assert "spawn_state" in code
    code = code.replace('"llama-inplace.nnef.tar"', repr(str(tmp_path / "m.nnef.tar")))
    for docs, ours in (("[[1, 450, 4996, 17354]]", "[[5, 17, 99, 3]]"),  # a vocabulary of 128
                       ("[[1, 306, 763]]", "[[7, 30, 63]]")):
        assert docs in code
        code = code.replace(docs, ours)
    model = _model("llama")
    llm.export_llm(model, tmp_path / "m.nnef.tar", kv_cache="inplace", quiet=True)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    prompts = re.findall(r"\[\[[0-9, ]+\]\]", code)
    assert len(got) == len(prompts) == 2
    for tokens, prompt in zip(got, prompts):
        assert tokens == llm.reference_tokens(model, json.loads(prompt)[0], len(tokens))


@pytest.mark.parametrize("family", ["jamba", "bamba", "qwen3_next"])
def test_inplace_hybrid_keeps_keys_and_values_in_the_state(family, tmp_path):
    """Mamba / Mamba 2 / gated delta net + attention (Jamba and Qwen3-Next with experts,
    Bamba with positions from P): the attention layer's keys and values in the State, the
    conv window and recurrent state as inputs/outputs."""
    path = tmp_path / "m.nnef.tar"
    res = llm.export_llm(hybrid_llms.make(family), path, kv_cache="inplace", check=True,
                         quiet=True)
    assert res.passed and res.tract_tokens == res.reference_tokens
    assert len(set(res.tract_tokens)) > 3, "a model repeating one token proves little"
    assert [i.name for i in res.export.inputs] == ["input_ids", "past_conv_0",
                                                   "past_recurrent_0"]
    assert [o.name for o in res.export.outputs] == ["logits", "present_conv_0",
                                                    "present_recurrent_0"]
    text = _graph_text(path)
    assert text.count("tract_transformers_dyn_kv_cache(") == 2  # layer 1's keys and values
    assert '("t2n.llm.state_kinds", ["conv", "recurrent"])' in text
    assert '("t2n.llm.inputs", ["input_ids", "past_conv_0", "past_recurrent_0"])' in text
    assert "State" in res.report()


def test_docs_state_loop_runs_a_hybrid(tmp_path):
    """docs/llm.md's State loop, run as written on a Jamba archive: its conv window and
    SSM state start from their input facts and are fed back beside the State."""
    section = (pathlib.Path(__file__).parents[1] / "docs" / "llm.md").read_text()
    code = re.findall(r"```python\n(.*?)```", section, re.S)[1]
    code = code.replace('"llama-inplace.nnef.tar"', repr(str(tmp_path / "m.nnef.tar")))
    code = code.replace("[[1, 450, 4996, 17354]]", "[[5, 17, 99, 3]]")
    code = code.replace("[[1, 306, 763]]", "[[7, 30, 63]]")
    model = hybrid_llms.make("jamba")
    llm.export_llm(model, tmp_path / "m.nnef.tar", kv_cache="inplace", quiet=True)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got[0] == llm.reference_tokens(model, [5, 17, 99, 3], 16)
    assert got[1] == llm.reference_tokens(model, [7, 30, 63], 16)


class _Step(torch.nn.Module):
    """A cache step: the past along axis 1 plus a new chunk, and a value read from P."""

    def forward(self, x, past):
        present = torch.cat([past, x * 2.0], dim=1)
        return present.sum(dim=1, keepdim=True) + past.shape[1], present


_RUN_STEPS = """
import json, sys, numpy as np, tract
lm = tract.nnef().with_tract_transformers().load(sys.argv[1]).into_runnable()
out = []
for chunks in ([2, 1, 3], [1]):  # a new State starts from an empty cache
    state = lm.spawn_state()
    for n in chunks:
        x = np.arange(n * 3, dtype=np.float32).reshape(1, n, 3) + len(out)
        out.append([o.to_numpy().tolist() for o in state.run([x])])
print(json.dumps(out))
"""


def test_stateful_cache_pass_runs_step_by_step(tmp_path):
    path = tmp_path / "step.nnef.tar"
    res = t2n.export(_Step(), (torch.ones(1, 2, 3), torch.ones(1, 4, 3)), path,
                     input_names=["x", "past"], output_names=["y", "present"],
                     dynamic_axes={"x": {1: "S"}, "past": {1: ("P", 0)}},
                     stateful_caches={"past": "present"}, quiet=True)
    assert [i.name for i in res.inputs] == ["x"] and [o.name for o in res.outputs] == ["y"]
    p = subprocess.run([sys.executable, "-c", _RUN_STEPS, str(path)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    step = _Step()
    for chunks, first in (([2, 1, 3], 0), ([1], 3)):
        past = torch.zeros(1, 0, 3)
        for k, n in enumerate(chunks):
            x = torch.arange(n * 3, dtype=torch.float32).reshape(1, n, 3) + first + k
            y, past = step(x, past)
            assert np.array_equal(np.array(got[first + k][0], np.float32), y.numpy())


class _NotACache(torch.nn.Module):
    def forward(self, x, past):
        return past + x


def test_stateful_cache_refusals(tmp_path):
    args = (torch.ones(1, 2, 3), torch.ones(1, 2, 3))
    with pytest.raises(UsageError, match="'past' is not only the first operand"):
        t2n.export(_NotACache(), args, tmp_path / "a.nnef.tar", input_names=["x", "past"],
                   output_names=["y"], stateful_caches={"past": "y"}, quiet=True)
    with pytest.raises(UsageError, match="no graph output"):
        t2n.export(_Step(), args, tmp_path / "b.nnef.tar", input_names=["x", "past"],
                   dynamic_axes={"x": {1: "S"}, "past": {1: ("P", 0)}},
                   stateful_caches={"past": "nope"}, quiet=True)
    with pytest.raises(UsageError, match="check=True"):
        t2n.export(_Step(), args, tmp_path / "c.nnef.tar", input_names=["x", "past"],
                   output_names=["y", "present"], check=True,
                   dynamic_axes={"x": {1: "S"}, "past": {1: ("P", 0)}},
                   stateful_caches={"past": "present"}, quiet=True)
    with pytest.raises(UsageError, match="kv_cache must be one of"):
        llm.export_llm(_model("llama"), tmp_path / "d.nnef.tar", kv_cache="paged")
    # no attention layer: no key/value cache to keep (its states stay inputs/outputs)
    with pytest.raises(UsageError, match="MambaForCausalLM has no key/value cache"):
        llm.export_llm(hybrid_llms.make("mamba"), tmp_path / "e.nnef.tar", kv_cache="inplace")
