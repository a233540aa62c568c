"""The ``native_*`` normalisations, which also return their statistics (mean, rstd/invstd,
empty tensors in evaluation mode, updated running stats for the functional variant):
torch eager vs tract."""

import pytest
import torch
import torch.nn.functional as F

from opcases import assert_cases

aten = torch.ops.aten


def test_native_layer_norm():
    assert_cases({
        "last dim, affine": lambda x, w, b: aten.native_layer_norm(x, [4], w[0], b[0], 1e-5),
        "last two dims, no affine": lambda x, w, b: aten.native_layer_norm(x, [3, 4], None,
                                                                          None, 1e-3),
        "all dims, weight only": lambda x, w, b: aten.native_layer_norm(x, [2, 3, 4], w.expand(
            2, 3, 4), None, 1e-5),
        "rank 1": lambda x, w, b: aten.native_layer_norm(x[0, 0], [4], None, b[0], 1e-5),
    }, (torch.randn(2, 3, 4) * 3 + 1, torch.randn(3, 4), torch.randn(3, 4)))


def test_native_group_norm():
    assert_cases({
        "3 groups 2d affine": lambda x, w, b: aten.native_group_norm(x, w, b, 2, 6, 12, 3, 1e-5),
        "1 group no affine": lambda x, w, b: aten.native_group_norm(x, None, None, 2, 6, 12, 1,
                                                                    1e-5),
        "6 groups flat": lambda x, w, b: aten.native_group_norm(x.flatten(2), w, None, 2, 6, 12,
                                                                6, 1e-3),
        "no spatial axes": lambda x, w, b: aten.native_group_norm(
            x[:, :, 0, 0].contiguous(), w, b, 2, 6, 1, 2, 1e-5),
    }, (torch.randn(2, 6, 4, 3) * 2 - 1, torch.randn(6), torch.randn(6)))


# training-mode cases get copies of the running stats: eager PyTorch updates them in place
# (the exported graph does not, see t2n/mappings/normalization_stats.py)


def _bn_args():
    return (torch.randn(4, 3, 5) * 2 + 1, torch.randn(3), torch.randn(3), torch.randn(3),
            torch.rand(3) + 0.5)


def test_native_batch_norm_training_and_eval():
    assert_cases({
        "native train": lambda x, w, b, m, v: aten.native_batch_norm(
            x, w, b, m.clone(), v.clone(), True, 0.1, 1e-5),
        "native train no stats no affine": lambda x, w, b, m, v: aten.native_batch_norm(
            x, None, None, None, None, True, 0.1, 1e-5),
        "native eval (empty stats)": lambda x, w, b, m, v: aten.native_batch_norm(
            x, w, b, m, v, False, 0.1, 1e-3),
        "native train rank 2": lambda x, w, b, m, v: aten.native_batch_norm(
            x[:, :, 0], w, b, m.clone(), v.clone(), True, 0.1, 1e-5),
        "native train rank 4": lambda x, w, b, m, v: aten.native_batch_norm(
            x.reshape(2, 3, 2, 5), w, None, None, None, True, 0.1, 1e-5),
        "legit train": lambda x, w, b, m, v: aten._native_batch_norm_legit(
            x, w, b, m.clone(), v.clone(), True, 0.1, 1e-5),
        "legit eval": lambda x, w, b, m, v: aten._native_batch_norm_legit(x, w, b, m, v, False,
                                                                          0.1, 1e-5),
        "legit no_stats": lambda x, w, b, m, v: aten._native_batch_norm_legit(x, w, b, True,
                                                                              0.1, 1e-5),
        "legit no_training": lambda x, w, b, m, v: aten._native_batch_norm_legit_no_training(
            x, w, b, m, v, 0.1, 1e-5),
        "with_update": lambda x, w, b, m, v: aten._batch_norm_with_update(
            x, w, b, m.clone(), v.clone(), 0.1, 1e-5),
        "no_update": lambda x, w, b, m, v: aten._batch_norm_no_update(x, w, b, m, v, 0.1, 1e-5),
        "functional train (updated stats)": lambda x, w, b, m, v:
            aten._native_batch_norm_legit_functional(x, w, b, m, v, True, 0.3, 1e-5),
        "functional eval": lambda x, w, b, m, v: aten._native_batch_norm_legit_functional(
            x, w, b, m, v, False, 0.3, 1e-5),
    }, _bn_args())


def test_batch_norm_empty_rank1_input():
    assert_cases({
        "train": lambda x, w: F.batch_norm(x, w, w, training=True),
        "eval": lambda x, w: F.batch_norm(x, w, w, training=False),
    }, (torch.randn(0), torch.randn(0)))


def test_native_norms_dynamic_batch():
    """Statistics shapes follow a symbolic batch axis ([N, G] for group norm)."""
    from opcases import Cases
    from t2n.testing import assert_exports

    model = Cases({
        "layer": lambda x: aten.native_layer_norm(x, [3, 2], None, None, 1e-5),
        "batch train": lambda x: aten.native_batch_norm(x, None, None, None, None, True, 0.1,
                                                        1e-5),
    }).eval()
    assert_exports(model, (torch.randn(2, 4, 3, 2),), input_names=["x"],
                   dynamic_axes={"x": {0: "B"}}, more_args=[(torch.randn(5, 4, 3, 2),)])
    # group norm's N argument is the batch size read in Python: torch.export follows it as a
    # size, the trace bakes the example's (its graph changes with B: refused, see below)
    group = Cases({
        "group": lambda x: aten.native_group_norm(x, None, None, x.shape[0], 4, 6, 2, 1e-5),
    }).eval()
    assert_exports(group, (torch.randn(2, 4, 3, 2),), input_names=["x"], capture="export",
                   dynamic_axes={"x": {0: "B"}}, more_args=[(torch.randn(5, 4, 3, 2),)])


def test_native_group_norm_of_a_traced_batch_size_is_refused(tmp_path):
    """The trace writes ``x.shape[0]`` into native_group_norm's N as the example's number:
    the size probe sees the graph change with B and refuses it, naming the op. torch.export
    records N as the size B itself: the archive is right at every B."""
    import t2n
    from opcases import Cases
    from t2n.errors import ConversionError
    from t2n.testing import assert_exports

    group = Cases({
        "group": lambda x: aten.native_group_norm(x, None, None, x.shape[0], 4, 6, 2, 1e-5),
    }).eval()
    with pytest.raises(ConversionError, match="aten::native_group_norm.*dynamic axis B"):
        t2n.export(group, (torch.randn(2, 4, 3, 2),), str(tmp_path / "g.nnef"),
                   input_names=["x"], dynamic_axes={"x": {0: "B"}}, capture="trace")
    assert_exports(group, (torch.randn(2, 4, 3, 2),), input_names=["x"],
                   dynamic_axes={"x": {0: "B"}}, capture="export",
                   more_args=[(torch.randn(5, 4, 3, 2),), (torch.randn(1, 4, 3, 2),)])
