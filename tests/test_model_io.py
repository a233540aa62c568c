"""Models as they are: outputs flattened by name (dicts, ModelOutputs, key/value caches) and
keyword inputs bound by name (``input_names`` or a dict of example inputs)."""

import json
import warnings

import pytest
import torch
from click.testing import CliRunner

import t2n
from t2n.capture import model_io
from t2n.cli import cli
from t2n.testing import assert_exports


class Named(torch.nn.Module):
    """Keyword-style forward: the mask is the third parameter."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(6, 6)

    def forward(self, x, scale=None, mask=None):
        y = self.proj(x)
        if mask is not None:
            y = y * mask
        if scale is not None:
            y = y * scale
        return {"hidden": y, "pooled": (y.sum(1), y.amax(1)), "nothing": None}


def test_dict_outputs_are_named_by_key_and_tuples_under_a_key_by_index(tmp_path):
    x = torch.randn(2, 4, 6)
    r = assert_exports(Named().eval(), (x,))
    assert [o.name for o in r.outputs] == ["hidden", "pooled_0", "pooled_1"]


def test_input_names_bind_forward_parameters_by_keyword():
    x, mask = torch.randn(2, 4, 6), (torch.rand(2, 4, 6) > 0.5).float()
    model = Named().eval()
    # positionally, mask would land on `scale`: named, it reaches `mask`
    r = assert_exports(model, (x, mask), input_names=["x", "mask"],
                       dynamic_axes={"x": {0: "B"}, "mask": {0: "B"}},
                       more_args=[(torch.randn(3, 4, 6), torch.zeros(3, 4, 6))])
    assert [i.name for i in r.inputs] == ["x", "mask"]
    b = model_io.bind(model, (x, mask), ["x", "mask"])
    assert b.n_positional == 0 and b.keywords == ["x", "mask"]
    # a leading name that is no parameter stays positional
    b = model_io.bind(model, (x, mask), ["ids", "mask"])
    assert b.n_positional == 1 and b.keywords == ["mask"]
    # a name that would also be filled positionally keeps the call positional
    b = model_io.bind(model, (x, mask), ["a", "x"])
    assert b.n_positional == 2


def test_dict_of_example_inputs():
    model = Named().eval()
    args = {"x": torch.randn(2, 4, 6), "scale": torch.tensor(3.0)}
    r = assert_exports(model, args, more_args=[{"x": torch.randn(2, 4, 6),
                                                "scale": torch.tensor(-1.0)}])
    assert [i.name for i in r.inputs] == ["x", "scale"]


def test_dict_inputs_name_unknown_parameters(tmp_path):
    with pytest.raises(t2n.UsageError, match="not parameters of Named.forward"):
        t2n.export(Named(), {"x": torch.randn(2, 4, 6), "maks": torch.ones(1)},
                   tmp_path / "m.nnef")
    with pytest.raises(t2n.UsageError, match="differ from the keys"):
        t2n.export(Named(), {"x": torch.randn(2, 4, 6)}, tmp_path / "m.nnef",
                   input_names=["y"])


def test_output_names_override_and_identifiers():
    class Weird(torch.nn.Module):
        def forward(self, x):
            return {"a-b": x + 1, "1st": x * 2, "inf": x - 1}

    r = assert_exports(Weird(), (torch.randn(3),))
    assert [o.name for o in r.outputs] == ["a_b", "o_1st", "o_inf"]
    r = assert_exports(Weird(), (torch.randn(3),), output_names=["p", "q", "r"])
    assert [o.name for o in r.outputs] == ["p", "q", "r"]


def test_flatten_caches_by_structure():
    class Layer:
        def __init__(self, k, v):
            self.keys, self.values = k, v

    class DynamicCache:
        def __init__(self, layers):
            self.layers = layers

    class EncoderDecoderCache:
        def __init__(self, a, b):
            self.self_attention_cache, self.cross_attention_cache = a, b

    t = [torch.full((1,), float(i)) for i in range(8)]
    self_c = DynamicCache([Layer(t[0], t[1]), Layer(t[2], t[3])])
    cross = DynamicCache([Layer(t[4], t[5]), Layer(t[6], t[7])])
    names, flat = model_io.flatten({"logits": t[0], "past_key_values":
                                    EncoderDecoderCache(self_c, cross)})
    assert names == ["logits", "present_key_0", "present_value_0", "present_key_1",
                     "present_value_1", "present_cross_key_0", "present_cross_value_0",
                     "present_cross_key_1", "present_cross_value_1"]
    assert [float(x) for x in flat[1:]] == list(range(8))
    # legacy tuple-of-pairs caches under past_key_values
    names, _ = model_io.flatten({"past_key_values": ((t[0], t[1]), (t[2], t[3]))})
    assert names == ["present_key_0", "present_value_0", "present_key_1", "present_value_1"]
    # recurrent-state layers (Mamba, linear attention): one state per layer, or several
    class StateLayer:
        def __init__(self, conv, rec):
            self.conv_states, self.recurrent_states = conv, rec

    names, _ = model_io.flatten({"cache_params": DynamicCache([
        StateLayer([t[0]], [t[1]]), StateLayer({0: t[2], 1: t[3]}, [t[4]])])})
    assert names == ["present_conv_state_0", "present_recurrent_state_0",
                     "present_conv_state_1_0", "present_conv_state_1_1",
                     "present_recurrent_state_1"]
    with pytest.raises(t2n.UsageError, match=r"output \['n'\] is a int"):
        model_io.flatten({"y": t[0], "n": 3})


import transformers


@pytest.mark.slow
def test_qwen3_causal_lm_as_it_is_with_cache_outputs():
    """transformers 5 returns a ModelOutput holding a DynamicCache (use_cache defaults to
    true); exported as logits plus per-layer key/value tensors, keyword attention mask."""
    import cli_models

    model = cli_models.make_qwen3_causal_lm()
    ids = torch.randint(0, 1000, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0

    def inputs(b, s):
        m = torch.ones(b, s, dtype=torch.long)
        m[-1, s // 2:] = 0
        return {"input_ids": torch.randint(0, 1000, (b, s)), "attention_mask": m}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = assert_exports(model, {"input_ids": ids, "attention_mask": mask},
                           dynamic_axes={"input_ids": {0: "B", 1: "S"},
                                         "attention_mask": {0: "B", 1: "S"}},
                           more_args=[inputs(3, 11), inputs(1, 4)], rtol=1e-3, atol=1e-4)
    assert [o.name for o in r.outputs] == ["logits", "present_key_0", "present_value_0",
                                          "present_key_1", "present_value_1"]
    assert [str(d) for d in r.outputs[1].shape] == ["B", "2", "S", "8"]


@pytest.mark.slow
def test_cli_exports_qwen3_causal_lm(tmp_path, monkeypatch):
    monkeypatch.chdir(__import__("os").path.dirname(__file__))
    out = tmp_path / "q.nnef.tgz"
    r = CliRunner().invoke(cli, ["export", "cli_models:make_qwen3_causal_lm", "-o", str(out),
                                 "--input", "ids:1x8:i64", "--int-range", "0:1000",
                                 "--check", "--rtol", "1e-3", "--atol", "1e-4", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert [o["name"] for o in res["outputs"]] == ["logits", "present_key_0",
                                                   "present_value_0", "present_key_1",
                                                   "present_value_1"]
    assert all(c["ok"] for c in res["checks"])
