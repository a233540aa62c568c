"""torchvision classifiers quantized in FX mode (x86 engine, random weights with batch-norm
statistics of a trained network's scale) give PyTorch's quantized output exactly in tract:
every op they use (convolutions in each kernel form, residual adds, batch norm, hardswish,
hardsigmoid, sigmoid, ReLU6, cat, pools) computes PyTorch's integers, so the
dequantized outputs are equal bit for bit, on the example and on another input."""

import copy
import warnings

import numpy as np
import pytest
import torch

import t2n
from t2n.check.tract_runner import run_in_tract

warnings.filterwarnings("ignore", message=".*quantiz.*")
warnings.filterwarnings("ignore", message=".*migrat.*")

MODELS = ["mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "densenet121",
          "regnet_x_400mf", "shufflenet_v2_x1_0", "resnet18"]


def _fx_int8(name):
    import torchvision
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None, num_classes=10).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
    batch = (2, 3, 96, 96)
    p = prepare_fx(copy.deepcopy(model), get_default_qconfig_mapping("x86"),
                   (torch.randn(*batch),))
    with torch.no_grad():
        for _ in range(2):
            p(torch.randn(*batch))
    return convert_fx(p)


@pytest.mark.parametrize("name", MODELS)
def test_fx_int8_torchvision_model_equals_pytorch(tmp_path, name):
    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = "x86"
    try:
        q = _fx_int8(name)
        x = torch.randn(1, 3, 96, 96)
        out = tmp_path / f"{name}.nnef.tar"
        r = t2n.export(q, (x,), out, check=True)
        assert r.passed, name
        for k, xi in enumerate((x, torch.randn(1, 3, 96, 96) * 2)):
            got = run_in_tract(str(out), [xi.numpy()])[0]
            want = q(xi).detach().numpy()
            assert np.array_equal(got, want), (name, k, int((got != want).sum()))
    finally:
        torch.backends.quantized.engine = old
