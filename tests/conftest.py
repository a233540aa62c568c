"""Shared test set-up: deterministic seeds; tract always runs in a child process
(``t2n.testing.assert_exports``), so a tract abort fails one test only.

The registry's torchvision wheel is linked against CUDA torch: on the CPU torch of these
machines its C++ extension does not load and ``import torchvision`` (hence ``import timm``,
and ``transformers`` once torchvision is installed) fails with ``operator torchvision::nms
does not exist``. The model classes are pure Python, so declaring the two operator schemas
before the first import makes them importable. This stays in the test set-up: the t2n
package never touches another library's operator namespace."""

import pytest
import torch


def _declare_torchvision_schemas():
    try:
        torch._C._get_schema("torchvision::nms", "")
        return  # already declared (a torchvision whose extension loads)
    except RuntimeError:
        pass
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _declare_torchvision_schemas.library = lib  # keep the registration alive


_declare_torchvision_schemas()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
