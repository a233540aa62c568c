"""Tensor creation: torch eager vs tract. ``_like``/``new_*`` forms take their shape from a
tensor; plain ``zeros/ones/full/arange`` reach the mappings only with symbolic sizes, so
those are exported with a dynamic batch axis and checked at two batch sizes."""

import torch

from opcases import assert_cases


LIKE = {
    "zeros_like": lambda x: torch.zeros_like(x),
    "ones_like int dtype": lambda x: torch.ones_like(x, dtype=torch.int32),
    "full_like float": lambda x: torch.full_like(x, -2.5),
    "full_like bool": lambda x: torch.full_like(x, 1, dtype=torch.bool),
    "new_zeros": lambda x: x.new_zeros(2, 3),
    "new_ones int64": lambda x: x.new_ones((4,), dtype=torch.int64),
    "new_full": lambda x: x.new_full((3, 1), 7.0),
    "zeros_like + x": lambda x: torch.zeros_like(x) + x,
}


def test_like_forms():
    # every form but the last reads only x's shape: constant in a static export
    assert_cases(LIKE, (torch.randn(2, 3, 4),), constant_outputs=[
        f"c{i}_{name.replace(' ', '_')}_out0" for i, name in enumerate(LIKE) if "+ x" not in name])


def test_like_forms_of_int_tensor():
    assert_cases({
        "zeros_like int": lambda i: torch.zeros_like(i),
        "full_like int": lambda i: torch.full_like(i, 3),
        "ones_like int -> float": lambda i: torch.ones_like(i, dtype=torch.float32),
        "new_full int": lambda i: i.new_full((2,), 5),
    }, (torch.arange(6).reshape(2, 3),), constant_outputs=[  # they read i's shape only
        "c0_zeros_like_int_out0", "c1_full_like_int_out0", "c2_ones_like_int_float_out0",
        "c3_new_full_int_out0"])


DYNAMIC = {
    "zeros(B, 3)": lambda x: torch.zeros(x.shape[0], 3),
    "ones(B) int64": lambda x: torch.ones(x.shape[0], dtype=torch.int64),
    "full(B, 2) float": lambda x: torch.full((x.shape[0], 2), 1.5),
    "new_zeros(B, 4)": lambda x: x.new_zeros(x.shape[0], 4) + x[:, :1],
    "arange(B)": lambda x: torch.arange(x.shape[0]),
    "arange(B) float": lambda x: torch.arange(x.shape[0], dtype=torch.float32),
    "arange(1, B, 2)": lambda x: torch.arange(1, x.shape[0], 2),
    "arange(B, 0, -1)": lambda x: torch.arange(x.shape[0], 0, -1),
    "arange(B+1, -2, -3) float": lambda x: torch.arange(x.shape[0] + 1, -2, -3.0),
    "arange(0, B*2, 3) float": lambda x: torch.arange(0, x.shape[0] * 2, 3, dtype=torch.float32),
}


def test_creation_with_symbolic_size():
    r = assert_cases(DYNAMIC, (torch.randn(5, 4),), more_args=[(torch.randn(8, 4),)],
                     dynamic_axes={"input_0": {0: "B"}})
    # one ramp per arange case whatever the size (a range, or the builder's cumsum ramp)
    hist = r.op_histogram
    assert hist.get("tract_core_range", 0) + hist.get("tract_core_cumsum", 0) == 6


def test_static_creation_is_folded_to_constants():
    r = assert_cases({
        "arange + x": lambda x: x + torch.arange(4),
        "arange negative step": lambda x: torch.arange(10, 0, -3) + x.sum().int(),
        "arange float": lambda x: torch.arange(0.0, 1.0, 0.25) * x,
        "full int * x": lambda x: torch.full((2, 4), 3) * x,
    }, (torch.randn(2, 4),))
    assert "tract_core_range" not in r.op_histogram


def test_empty_like_fully_overwritten():
    """empty_like's values are unspecified; code that writes every element (an inverse
    permutation, as transformers' MoE blocks build) gets exact results."""

    def inverse(x):
        perm = torch.argsort(x)
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.shape[0])
        return inv, torch.empty_like(x).copy_(x) * 2

    assert_cases({"inverse permutation": inverse}, (torch.randn(9),))


def test_new_empty_fully_overwritten():
    """new_empty's values are unspecified; DeepSeek-V3 builds its keys this way, writing
    every element through two slices."""

    def keys(a, b):
        k = a.new_empty(*a.shape[:-1], a.shape[-1] + b.shape[-1])
        k[..., :a.shape[-1]].copy_(a)
        k[..., a.shape[-1]:].copy_(b)
        return k

    assert_cases({"concatenated by writes": keys}, (torch.randn(2, 3, 4), torch.randn(2, 3, 2)))
