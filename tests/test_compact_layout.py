"""Channel compaction through pooling, reductions and a flatten into a linear head
(t2n/passes/compact_layout.py): outputs stay equal to PyTorch's and the archive shrinks."""

import torch
import torch.nn as nn
import torch.nn.utils.prune as prune
from batch_norms import random_batch_norms

from t2n.testing import assert_exports


def _layers(result):
    return {s.name: s for s in result.extras["layers"]}


def _pruned(model):
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            prune.ln_structured(m, "weight", amount=0.5, n=2, dim=0)
    return model.eval()


def pooled_cnn(head="avg"):
    """conv-bn-relu-maxpool blocks, then global average pooling (or a flatten of the last
    4x4 map) and a linear head: no residuals."""
    torch.manual_seed(0)
    layers, c = [], 3
    for w in (16, 32, 64):
        layers += [nn.Conv2d(c, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(2)]
        c = w
    if head == "avg":
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10)]
    else:
        layers += [nn.AvgPool2d(2), nn.Flatten(), nn.Linear(c * 4, 10)]
    return _pruned(random_batch_norms(nn.Sequential(*layers)))


def test_pooled_cnn_with_global_pool_head_compacts_to_about_half():
    model = pooled_cnn("avg")
    x = torch.randn(2, 3, 32, 32)
    full = assert_exports(model, (x,), filename="m.nnef.tar")
    small = assert_exports(model, (x,), compact=True, filename="m.nnef.tar")
    layers = _layers(small)
    assert all(s.channels_after == s.channels_before // 2 for n, s in layers.items()
               if s.kind == "conv"), layers
    head = [s for s in layers.values() if s.kind == "linear"][0]
    assert head.params_after == 10 * 32 + 10, head.line()  # half its input features
    assert small.archive_bytes <= 0.55 * full.archive_bytes, \
        (small.archive_bytes, full.archive_bytes)


def test_flatten_of_a_spatial_map_removes_blocks_of_linear_features():
    model = pooled_cnn("flatten")
    x = torch.randn(1, 3, 32, 32)
    r = assert_exports(model, (x,), compact=True)
    head = [s for s in r.extras["layers"] if s.kind == "linear"][0]
    assert head.params_after == 10 * 32 * 4 + 10, head.line()  # 32 of 64 channels x 2x2


def test_padded_average_pool_counting_zeros_is_not_followed():
    """avg_pool counting its zero padding turns a constant channel into a border-dependent
    map: compaction stops there (the conv before it keeps its channels)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AvgPool2d(3, 1, 1),
                          nn.Conv2d(8, 4, 1))
    model = _pruned(model)
    with torch.no_grad():
        model[0].bias.fill_(0.5)  # zeroed channels hold relu(0.5) = 0.5
    r = assert_exports(model, (torch.randn(1, 3, 9, 9),), compact=True)
    assert _layers(r)["0"].channels_removed == 0
