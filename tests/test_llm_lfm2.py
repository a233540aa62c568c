"""``t2n llm`` on LFM2 (short convolutions + attention): the conv layers' windows are
step inputs/outputs of fixed size beside the attention layers' keys and values; greedy
generation in tract equals transformers' (f32, and q4_0 against the rounded model)."""

import pytest

from fixtures.hybrid_llms import exported

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("weights", ["f32", "q4_0"])
def test_lfm2_generates_like_transformers(weights, tmp_path):
    res, text = exported("lfm2", weights, tmp_path / "m.nnef.tar")
    assert res.passed and res.tract_tokens == res.reference_tokens
    assert len(set(res.tract_tokens)) > 3, "a model repeating one token proves little"
    names = [i.name for i in res.export.inputs]
    assert names == ["input_ids", "past_conv_0", "past_key_1", "past_value_1"]
    assert [list(i.shape) for i in res.export.inputs][1] == [1, 32, 3]
    assert '("t2n.llm.state_shapes", ["1,32,3", "1,2,0,8", "1,2,0,8"])' in text
    assert '("t2n.llm.state_kinds", ["conv", "key", "value"])' in text


def test_docs_loop_runs_a_hybrid(tmp_path):
    """docs/llm.md's tract loop, run as written on an LFM2 archive: every state starts
    from its input fact, whatever the family."""
    import json
    import pathlib
    import re
    import subprocess
    import sys

    from fixtures.hybrid_llms import make
    from t2n import llm

    code = re.search(r"```python\n(.*?)```",
                     (pathlib.Path(__file__).parents[1] / "docs" / "llm.md").read_text(),
                     re.S).group(1)
    prompt = [5, 17, 99, 3]
    code = code.replace('"llama.nnef.tar"', repr(str(tmp_path / "m.nnef.tar")))
    code, n = re.subn(r"np\.array\(\[\[1, 450, 4996, 17354\]\]\)", f"np.array([{prompt}])", code)
    assert n == 1
    model = make("lfm2")
    llm.export_llm(model, tmp_path / "m.nnef.tar", quiet=True)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == llm.reference_tokens(model, prompt, 32)
