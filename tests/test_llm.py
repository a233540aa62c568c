"""``t2n llm``: causal LMs of every supported family, saved with ``save_pretrained`` to a
temporary directory (small configs, random weights, no download), exported as one archive
for prefill and decoding, then checked by generating greedily in tract (in a child process)
against transformers' ``generate(do_sample=False)``.

``initializer_range=0.3`` gives random models whose greedy tokens vary (with the default
0.02 many tiny models repeat one token, which would prove little about the cache).
Sliding-window families get a window of 5 with a prompt of 8 and 16 new tokens, so most
steps attend through the window; a test checks that the window changes the tokens.
"""

import json
import tarfile
import warnings

import pytest
import torch

from t2n import llm
from t2n.cli import main as cli_main
from t2n.errors import CheckFailedError, ModelLoadError, UsageError

import transformers

pytestmark = pytest.mark.slow

_COMMON = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128,
               initializer_range=0.3)
WINDOW = 5


def _families():
    T = transformers
    return {
        "llama": lambda: T.LlamaForCausalLM(T.LlamaConfig(**_COMMON)),
        "mistral": lambda: T.MistralForCausalLM(T.MistralConfig(**_COMMON,
                                                                sliding_window=WINDOW)),
        "qwen2": lambda: T.Qwen2ForCausalLM(T.Qwen2Config(
            **_COMMON, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1)),
        "qwen3": lambda: T.Qwen3ForCausalLM(T.Qwen3Config(**_COMMON, head_dim=16)),
        "phi3": lambda: T.Phi3ForCausalLM(T.Phi3Config(**_COMMON, pad_token_id=0)),
        "gemma2": lambda: T.Gemma2ForCausalLM(T.Gemma2Config(**_COMMON, head_dim=8,
                                                             sliding_window=WINDOW)),
        "gemma3": lambda: T.Gemma3ForCausalLM(T.Gemma3TextConfig(
            **_COMMON, head_dim=8, sliding_window=WINDOW, sliding_window_pattern=2)),
        "gpt2": lambda: T.GPT2LMHeadModel(T.GPT2Config(
            vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=128,
            initializer_range=0.3, bos_token_id=1, eos_token_id=2)),
    }


def _saved(name, tmp_path):
    torch.manual_seed(0)
    d = tmp_path / name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _families()[name]().save_pretrained(d)
    return d


def _cli(*argv):
    with pytest.raises(SystemExit) as e:
        cli_main(list(map(str, argv)))
    return e.value.code


def _graph_text(archive) -> str:
    with tarfile.open(archive) as t:
        return t.extractfile("graph.nnef").read().decode()


@pytest.mark.parametrize("family", ["llama", "qwen3", "gpt2"])
def test_cli_check_generates_like_transformers(family, tmp_path, capsys):
    out = tmp_path / "out.nnef.tgz"
    assert _cli("llm", _saved(family, tmp_path), "-o", out, "--check", "--json") == 0
    res = json.loads(capsys.readouterr().out)
    lm = res["llm"]
    assert lm["passed"] is True
    assert lm["tract_tokens"] == lm["reference_tokens"] and len(lm["tract_tokens"]) == 16
    assert len(set(lm["tract_tokens"])) > 3, "a model repeating one token proves little"
    assert lm["generation"]["decode_tokens_per_second"] > 0
    names = [i["name"] for i in res["inputs"]]
    assert names == ["input_ids", "past_key_0", "past_value_0", "past_key_1", "past_value_1"]
    assert res["inputs"][0]["shape"] == [1, "S"]
    assert res["inputs"][1]["shape"][2] == "P"
    assert [o["name"] for o in res["outputs"]][:2] == ["logits", "present_key_0"]
    assert res["outputs"][0]["shape"][:2] == [1, 1], "the last position's logits by default"
    assert res["outputs"][1]["shape"][2] == "P + S"
    text = _graph_text(out)
    assert "fragment tract_core_properties(" in text
    assert '("t2n.llm.layers", 2)' in text
    assert '("t2n.llm.inputs", ["input_ids", "past_key_0", "past_value_0"' in text
    # tract's bounds: the prompt runs with an empty cache, every step adds a token
    assert "extension tract_assert P >= 0;" in text and "extension tract_assert S >= 1;" in text


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_cli_check_q4_0_generates_like_the_rounded_model(family, tmp_path, capsys):
    """With --weights the reference is transformers on the same rounded weights."""
    out = tmp_path / "out.nnef.tar"
    code = _cli("llm", _saved(family, tmp_path), "-o", out, "--weights", "q4_0", "--check",
                "--json")
    assert code == 0
    res = json.loads(capsys.readouterr().out)
    lm = res["llm"]
    assert lm["passed"] and lm["weights"] == "q4_0" and len(lm["tract_tokens"]) == 16
    plan = res["weights"]
    assert plan["compressed"] and plan["bytes_after"] < plan["bytes_before"] / 3
    assert '("t2n.llm.weights", "q4_0")' in _graph_text(out)


@pytest.mark.parametrize("family", ["mistral", "qwen2", "phi3", "gemma2", "gemma3"])
def test_family_generates_like_transformers(family, tmp_path):
    res = llm.export_llm(_saved(family, tmp_path), tmp_path / "m.nnef.tar", check=True,
                         quiet=True)
    assert res.passed and res.tract_tokens == res.reference_tokens
    windows = {c.sliding_window for c in res.layers}
    if family in ("mistral", "qwen2", "gemma2", "gemma3"):
        assert WINDOW in windows, f"{family}: the sliding window was not recognised"
    if family in ("qwen2", "gemma2", "gemma3"):
        assert 0 in windows, f"{family}: full-attention layers were not recognised"


def test_sliding_window_changes_the_tokens(tmp_path):
    """The window matters for the checked prompt: without it transformers generates other
    tokens, so the mistral check above proves that the archive keeps it."""
    d = _saved("mistral", tmp_path)
    model = llm.load_causal_lm(d)
    prompt = llm.default_prompt(128)
    windowed = llm.reference_tokens(model, prompt, 16)
    model.config.sliding_window = None
    assert llm.reference_tokens(model, prompt, 16) != windowed


def test_prompt_and_length_options(tmp_path, capsys):
    out = tmp_path / "out.nnef.tgz"
    code = _cli("llm", _saved("llama", tmp_path), "-o", out, "--check", "--max-length", 5,
                "--prompt", "3,1,4,1,5,9,2,6,5,3,5", "--json")
    assert code == 0
    lm = json.loads(capsys.readouterr().out)["llm"]
    assert lm["prompt"] == [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    assert len(lm["tract_tokens"]) == 5 and lm["passed"]


def test_token_mismatch_fails_the_check(tmp_path, monkeypatch):
    real = llm.reference_tokens

    def shifted(model, prompt, n):
        toks = real(model, prompt, n)
        return toks[:-1] + [(toks[-1] + 1) % 128]

    monkeypatch.setattr(llm, "reference_tokens", shifted)
    aside = tmp_path / "rejected" / "m.nnef.tgz"
    with pytest.raises(CheckFailedError, match="greedy tokens differ") as e:
        llm.export_llm(_saved("qwen3", tmp_path), tmp_path / "m.nnef.tgz", check=True,
                       max_new_tokens=4, quiet=True, keep_failed=aside)
    assert e.value.report.passed is False
    assert not (tmp_path / "m.nnef.tgz").exists()  # an archive that failed is not shipped
    assert e.value.kept_archive == str(aside) and aside.is_file()


def test_user_model_is_left_as_it_was(tmp_path):
    model = _families()["llama"]().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    llm.export_llm(model, tmp_path / "m.nnef.tgz", quiet=True)
    assert model.training
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k])
                                                 for k in before)


def test_bad_models_are_refused(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _cli("llm", empty, "-o", tmp_path / "x.nnef.tgz") == 2
    assert "no config.json" in capsys.readouterr().err
    with pytest.raises(ModelLoadError, match="neither a directory"):
        llm.export_llm(str(tmp_path / "missing"), tmp_path / "x.nnef.tgz")
    t5 = transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2))
    with pytest.raises(UsageError, match="decoder-only"):
        llm.export_llm(t5, tmp_path / "x.nnef.tgz")
    with pytest.raises(UsageError, match="is not a weight format"):
        llm.export_llm(t5, tmp_path / "x.nnef.tgz", weights="int3")
    model = _families()["llama"]()
    with pytest.raises(UsageError, match="prompt must be"):
        llm.export_llm(model, tmp_path / "x.nnef.tgz", check=True, prompt=[500])
    with pytest.raises(UsageError, match="exceed the model's 16 positions"):
        llm.export_llm(transformers.LlamaForCausalLM(transformers.LlamaConfig(
            **dict(_COMMON, max_position_embeddings=16))), tmp_path / "x.nnef.tgz", check=True)
    with pytest.raises(UsageError, match="float32 models"):
        llm.export_llm(_families()["llama"]().to(torch.bfloat16), tmp_path / "x.nnef.tgz")
    assert not list(tmp_path.glob("x.nnef.tgz*")), "nothing is written for a refused model"


@pytest.mark.parametrize("rope", ["longrope", "dynamic"])
def test_sequence_dependent_rope_is_refused(rope, tmp_path):
    """Their frequencies switch past the pretraining length; a trace would freeze the
    short-context ones (the generation check showed tract diverging at that position)."""
    T = transformers
    if rope == "longrope":
        model = T.Phi3ForCausalLM(T.Phi3Config(
            **dict(_COMMON, max_position_embeddings=64), pad_token_id=0,
            original_max_position_embeddings=16,
            rope_scaling={"rope_type": "longrope", "short_factor": [1.0] * 4,
                          "long_factor": [4.0] * 4}))
    else:
        model = T.LlamaForCausalLM(T.LlamaConfig(
            **_COMMON, rope_scaling={"rope_type": "dynamic", "factor": 4.0}))
    with pytest.raises(UsageError, match=f"rope_type {rope}"):
        llm.export_llm(model, tmp_path / "x.nnef.tgz")


def test_properties_refuse_what_tract_cannot_parse():
    from t2n.write.writer import render_properties

    assert render_properties({"a": 1, "b": ["x", "y"], "c": "z"})[3] == \
        '  properties = [("a", 1), ("b", ["x", "y"]), ("c", "z")];'
    for bad in ({"a": 'say "hi"'}, {"a": []}, {"a": [1, "x"]}, {"a": 1.5}, {"a": 2**40}):
        with pytest.raises(UsageError, match="property"):
            render_properties(bad)


def test_layout_reader_parses_tract_string_dumps():
    from t2n.llm_generate import _dumped_strings

    assert _dumped_strings("Tensor(,String abc)") == "abc"
    assert _dumped_strings("Tensor(2,String input_ids, past_key_0)") == \
        ["input_ids", "past_key_0"]


def test_docs_loop_generates_like_transformers(tmp_path):
    """docs/llm.md's ten-line tract loop, run as written (prompt and path substituted)."""
    import pathlib
    import re
    import subprocess
    import sys

    section = (pathlib.Path(__file__).parents[1] / "docs" / "llm.md").read_text()
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    prompt = [5, 17, 99, 3]
    code = code.replace('"llama.nnef.tar"', repr(str(tmp_path / "m.nnef.tar")))
    code, n = re.subn(r"np\.array\(\[\[1, 450, 4996, 17354\]\]\)", f"np.array([{prompt}])", code)
    assert n == 1
    model = llm.load_causal_lm(_saved("llama", tmp_path))
    llm.export_llm(model, tmp_path / "m.nnef.tar", quiet=True)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == llm.reference_tokens(model, prompt, 32)


def test_module_callable_model(tmp_path, monkeypatch, capsys):
    (tmp_path / "tiny_lm_for_t2n.py").write_text(
        "import torch, transformers\n"
        "def build():\n"
        "    torch.manual_seed(0)\n"
        "    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(\n"
        f"        **{_COMMON!r}))\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = _cli("llm", "tiny_lm_for_t2n:build", "-o", "out.nnef.tgz", "--check",
                "--max-length", 4, "--json")
    assert code == 0
    lm = json.loads(capsys.readouterr().out)["llm"]
    assert lm["passed"] and [c["heads"] for c in lm["layers"]] == [2, 2]


class _LlamaWithoutLogitsToKeep(transformers.LlamaForCausalLM):
    """A causal LM whose forward has no ``logits_to_keep``: t2n slices its logits."""

    def forward(self, input_ids=None, cache=None, use_cache=None, return_dict=None, **kwargs):
        assert "logits_to_keep" not in kwargs
        return super().forward(input_ids=input_ids, cache=cache, use_cache=use_cache,
                               return_dict=return_dict, **kwargs)


@pytest.mark.parametrize("logits", ["last", "all", "last_sliced"])
def test_prompt_logits_match_transformers(logits, tmp_path):
    """The default archive returns the last position's logits (the head runs on it alone,
    through the model's logits_to_keep, or sliced when it has none); --all-logits every
    position's. Both equal transformers' logits of the prompt."""
    import numpy as np

    from t2n.check.tract_runner import run_in_tract

    torch.manual_seed(0)
    cls = _LlamaWithoutLogitsToKeep if logits == "last_sliced" else transformers.LlamaForCausalLM
    model = cls(transformers.LlamaConfig(**_COMMON)).eval()
    out = tmp_path / "m.nnef.tar"
    llm.export_llm(model, out, all_logits=logits == "all", quiet=True)
    ids = torch.tensor([[5, 17, 99, 3, 8, 41]])
    empty = np.zeros((1, 2, 0, 8), np.float32)  # 2 key/value heads of 8, no past
    got = run_in_tract(str(out), [ids.numpy()] + [empty] * 4)[0]
    with torch.no_grad():
        want = model(input_ids=ids).logits.numpy()
    if logits != "all":
        want = want[:, -1:]
    assert got.shape == want.shape, (logits, got.shape, want.shape)
    assert abs(got - want).max() < 1e-4, (logits, abs(got - want).max())
    assert f'("t2n.llm.logits", "{logits[:4].rstrip("_")}")' in _graph_text(out)


def test_output_over_a_user_folder_is_refused_before_loading(tmp_path, capsys):
    # t2n.write.output_paths: checked before the model is even loaded; nothing changes
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "notes.txt").write_text("mine")
    model = _saved("llama", tmp_path)
    with pytest.raises(UsageError, match="refusing to replace .*proj.*notes.txt"):
        llm.export_llm(str(model), proj)
    assert _cli("llm", model, "-o", tmp_path / "lm.zip") == 2
    assert "slash" in capsys.readouterr().err
    assert _cli("llm", model, "-o", tmp_path / "lm.tar", "--check", "--keep-failed",
                proj / "notes.txt") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llama", "proj"]
    assert sorted(p.name for p in proj.iterdir()) == ["notes.txt"]
    assert (proj / "notes.txt").read_text() == "mine"


def test_re_export_replaces_the_previous_archive(tmp_path):
    model = _saved("llama", tmp_path)
    out = tmp_path / "lm.nnef.tar"
    for _ in range(2):
        llm.export_llm(str(model), out, quiet=True)
    assert "graph.nnef" in tarfile.open(out).getnames()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llama", "lm.nnef.tar"]
