"""Models quantized with torchao's ``quantize_`` and a weight-only config, exported and run in
tract: ``Int8WeightOnlyConfig`` (per-row int8 weights, cast in aten ops) and
``IntxWeightOnlyConfig`` (int8 per channel; int4 values in groups of 32, dequantized by
``torchao::dequantize_affine``). The int8 tensors are stored as such (the walker does not fold
their widening: t2n/walk/registry.py ``stores_integers``), so the archive holds about a
quarter of the float bytes, and tract's outputs are PyTorch's (float products of the same
dequantized weights)."""

import copy

import pytest
import torch
from torch import nn
from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, quantize_
from torchao.quantization.granularity import PerAxis, PerGroup

import t2n
from fixtures.models import _seeded, make_mlp
from t2n.archive_info import inspect_archive
from t2n.testing import assert_exports

CONFIGS = {
    "int8": (Int8WeightOnlyConfig, {}, 0.4),
    "intx-int8-per-channel": (IntxWeightOnlyConfig,
                              {"weight_dtype": torch.int8, "granularity": PerAxis(0)}, 0.4),
    # int4 values held in int8 (exact); tract's Q4_0 would round torchao's float32 group
    # scales to float16
    "intx-int4-group32": (IntxWeightOnlyConfig,
                          {"weight_dtype": torch.int4, "granularity": PerGroup(32)}, 0.4),
}


def quantized(model, config: str):
    cls, kwargs, _ = CONFIGS[config]
    model = copy.deepcopy(model)
    quantize_(model, cls(**kwargs))
    return model


@pytest.mark.parametrize("capture", ["export", "trace"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_weight_only_mlp_stores_int8_and_checks(config, capture, tmp_path):
    model = make_mlp(64, 256)
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    qmodel = quantized(model, config)
    q = t2n.export(qmodel, (x,), tmp_path / "q.nnef", capture=capture, check=True)
    assert all(c.ok for c in q.checks), [c.line() for c in q.checks]
    stored = inspect_archive(str(tmp_path / "q.nnef"), macs=False).by_format()
    assert stored["i8"]["params"] == 64 * 256 + 256 * 256 + 256 * 10, stored
    f = t2n.export(model, (x,), tmp_path / "f.nnef")
    ratio = q.archive_bytes / f.archive_bytes
    assert ratio <= CONFIGS[config][2], (config, ratio)


def test_weight_only_int8_with_a_dynamic_batch():
    """The weight-only layers on a batch axis of any size (the export capture)."""
    qmodel = quantized(make_mlp(64, 256), "int8")
    assert_exports(qmodel, (torch.randn(4, 1, 8, 8),), capture="export", input_names=["x"],
                   dynamic_axes={"x": {0: "B"}}, more_args=[(torch.randn(7, 1, 8, 8),)])


class ConvAndLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 3, padding=1)
        self.fc = nn.Linear(64, 128)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


def test_int8_weight_only_of_linear_layers_leaves_the_convolution_float(tmp_path):
    """quantize_ swaps linear weights only: the convolution's weight stays float32 in the
    archive, the linear one int8."""
    qmodel = quantized(_seeded(0, ConvAndLinear), "int8")
    x = torch.randn(2, 3, 8, 8)
    t2n.export(qmodel, (x,), tmp_path / "q.nnef", check=True)
    stored = inspect_archive(str(tmp_path / "q.nnef"), macs=False).by_format()
    assert stored["i8"]["params"] == 64 * 128, stored
    assert stored["f32"]["params"] == 3 * 64 * 9 + 64 + 128 + 128, stored  # + the scales


def test_a_config_quantizing_activations_is_refused_naming_what_is_supported(tmp_path):
    """With the export capture (PyTorch's tracer itself fails on this model: an internal
    assertion in TraceTypeManual.cpp, reported as t2n's TraceError)."""
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig

    from t2n.errors import UnsupportedOperatorsError

    model = make_mlp(64, 256)
    quantize_(model, Int8DynamicActivationInt8WeightConfig())
    with pytest.raises(UnsupportedOperatorsError) as e:
        t2n.export(model, (torch.randn(4, 1, 8, 8),), tmp_path / "q.nnef", capture="export")
    text = str(e.value)
    assert "torchao::choose_qparams_affine" in text and \
        "Int8DynamicActivationInt8WeightConfig" in text and "weight-only" in text, text
    assert not (tmp_path / "q.nnef").exists()
