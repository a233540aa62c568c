"""``t2n llm`` on a vision-language model (SmolVLM, small config, random weights): the
decoder step and the image encoder as two archives of one call; greedy generation in tract
from a prompt with images equals transformers' ``generate(input_ids, pixel_values)`` (f32,
and q4_0 against the model with both archives' rounded weights)."""

import json
import pathlib
import re
import subprocess
import sys
import tarfile

import pytest
import torch

from fixtures.vision_llms import IMAGE_TOKEN, TOKENS_PER_IMAGE, images, make
from t2n import llm
from t2n.cli import main as cli_main
from t2n.errors import UsageError
from t2n.llm_vision import encoder_path

pytestmark = pytest.mark.slow


def _graph_text(archive) -> str:
    with tarfile.open(archive) as t:
        return t.extractfile("graph.nnef").read().decode()


@pytest.fixture(scope="module")
def cli_export(tmp_path_factory):
    """``t2n llm FOLDER -o smolvlm.nnef.tar --check --json`` on a save_pretrained folder:
    (the JSON report, the folder holding both archives)."""
    import contextlib
    import io

    d = tmp_path_factory.mktemp("vlm")
    make().save_pretrained(d / "saved")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as e:
        cli_main(["llm", str(d / "saved"), "-o", str(d / "smolvlm.nnef.tar"), "--check",
                  "--json"])
    assert e.value.code == 0
    return json.loads(out.getvalue()), d


def test_cli_check_generates_like_transformers(cli_export):
    """f32 from a save_pretrained folder (loaded as image-text-to-text): two archives, the
    check's prompt holds two images."""
    res, tmp_path = cli_export
    out = tmp_path / "smolvlm.nnef.tar"
    lm = res["llm"]
    assert lm["passed"] is True and len(lm["tract_tokens"]) == 16
    assert lm["tract_tokens"] == lm["reference_tokens"]
    assert len(set(lm["tract_tokens"])) > 3, "a model repeating one token proves little"
    assert lm["prompt"].count(IMAGE_TOKEN) == 2 * TOKENS_PER_IMAGE
    assert lm["generation"]["images"] == 2
    assert [i["name"] for i in res["inputs"]][:3] == ["input_ids", "image_features",
                                                      "past_key_0"]
    assert res["inputs"][1]["shape"] == ["M", 32]
    enc = lm["image_encoder"]
    assert enc["path"] == str(tmp_path / "smolvlm.vision.nnef.tar")
    assert [i["shape"] for i in enc["inputs"]] == [["N", 3, 32, 32]]
    assert enc["outputs"][0]["name"] == "image_features"
    text = _graph_text(out)
    assert '("t2n.llm.inputs", ["input_ids", "image_features", "past_key_0"' in text
    assert '("t2n.llm.image_token_id", 100)' in text
    assert '("t2n.vision.tokens_per_image", 4)' in _graph_text(
        tmp_path / "smolvlm.vision.nnef.tar")


def test_q4_0_generates_like_the_rounded_model(tmp_path):
    """q4_0 rounds the decoder's and the encoder's weights; the reference model holds both."""
    res = llm.export_llm(make(), tmp_path / "m.nnef.tgz", weights="q4_0", check=True,
                         quiet=True, image_encoder=tmp_path / "enc.nnef.tgz")
    assert res.passed and res.tract_tokens == res.reference_tokens
    assert res.tract_tokens != res.generation["original_tokens"], "q4_0 changed nothing"
    assert (tmp_path / "enc.nnef.tgz").is_file() and (tmp_path / "m.nnef.tgz").is_file()
    for archive in (res.export, res.image_encoder):
        plan = archive.extras["weights"]
        assert plan["compressed"] and plan["bytes_after"] < plan["bytes_before"] / 3


def test_the_images_change_the_tokens():
    """Other pixels give other tokens, so the checks above prove the image encoder."""
    model = make()
    prompt = [5, 17, 3] + [IMAGE_TOKEN] * TOKENS_PER_IMAGE + [9, 41]
    a = llm.reference_tokens(model, prompt, 16, pixel_values=images(1, seed=1))
    b = llm.reference_tokens(model, prompt, 16, pixel_values=images(1, seed=2))
    assert a != b


def test_docs_loop_runs_one_image(cli_export):
    """docs/llm.md's vision loop, run as written, with one image (N = 1: neither the
    trace's 3 nor the check's 2), generates transformers' tokens."""
    import numpy as np

    block = [b for b in re.findall(r"```python\n(.*?)```", (pathlib.Path(__file__).parents[1]
                                                             / "docs" / "llm.md").read_text(),
                                   re.S) if "smolvlm.vision.nnef.tar" in b]
    assert len(block) == 1
    model, tmp_path = make(), cli_export[1]
    prompt = [5, 17, 3] + [IMAGE_TOKEN] * TOKENS_PER_IMAGE + [9, 41]
    np.save(tmp_path / "ids.npy", np.array([prompt], np.int64))
    np.save(tmp_path / "pixels.npy", images(1).numpy())
    p = subprocess.run([sys.executable, "-c", block[0]], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    tokens = json.loads(p.stdout.strip().splitlines()[-1])
    assert tokens == llm.reference_tokens(model, prompt, 32, pixel_values=images(1))


def test_image_tokens_without_features_embed_as_text(cli_export):
    """With an empty image_features (M = 0, every step of the tract loop here) image
    tokens embed as text tokens, as in transformers without pixels: a generated image
    token while decoding reads no feature row."""
    model, archive = make(), cli_export[1] / "smolvlm.nnef.tar"
    prompt = [5, IMAGE_TOKEN, 17, 3, IMAGE_TOKEN, 9]
    assert llm.generate_in_tract(archive, prompt, 16)["tokens"] \
        == llm.reference_tokens(model, prompt, 16)


def test_refusals(tmp_path):
    import transformers as T

    from fixtures.hybrid_llms import make as make_text

    with pytest.raises(UsageError, match="each image takes 4"):
        llm.export_llm(make(), tmp_path / "a.nnef.tar", prompt=[1, IMAGE_TOKEN, 2])
    with pytest.raises(UsageError, match="is the decoder's path"):
        llm.export_llm(make(), tmp_path / "a.nnef.tar", image_encoder=tmp_path / "a.nnef.tar")
    with pytest.raises(UsageError, match="has no image encoder"):
        llm.export_llm(make_text("lfm2"), tmp_path / "b.nnef.tar",
                       image_encoder=tmp_path / "e.nnef.tar")
    torch.manual_seed(0)
    llava = T.LlavaForConditionalGeneration(T.LlavaConfig(
        vision_config=dict(model_type="clip_vision_model", hidden_size=32,
                           intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                           image_size=32, patch_size=8),
        text_config=dict(model_type="llama", vocab_size=128, hidden_size=32,
                         num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=64), image_token_id=100))
    with pytest.raises(UsageError, match="LlavaForConditionalGeneration has an image encoder"):
        llm.export_llm(llava, tmp_path / "c.nnef.tar")
    assert not list(tmp_path.glob("*.nnef.tar"))


@pytest.mark.parametrize("out, enc", [
    ("a/m.nnef.tar", "a/m.vision.nnef.tar"), ("m.tgz", "m.vision.tgz"),
    ("m.tar.gz", "m.vision.tar.gz"), ("m.nnef.tgz", "m.vision.nnef.tgz"),
    ("dir/", "dir.vision/"), ("m.nnef", "m.vision.nnef"), ("plain", "plain.vision")])
def test_encoder_path(out, enc):
    assert encoder_path(out) == enc
