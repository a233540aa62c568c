"""``tensor_split`` and the splits built on it: pieces between split points in any order
(negative, past the end, a point before its predecessor), sections that do not divide the
axis, and both on a dynamic axis (hybrid LLMs split the sequence at ``S - k``), checked
in tract at sizes other than the example's."""

import pytest
import torch

from t2n.testing import FunctionModule as Fn
from t2n.testing import assert_exports

pytestmark = pytest.mark.usefixtures("capture")


def r(*shape):
    return torch.randn(*shape)


def _scaled(pieces):
    """Every piece in the output, each scaled differently so a swapped piece shows."""
    return tuple(p * (i + 1) for i, p in enumerate(pieces))


@pytest.mark.parametrize("points", [[2, 5], [5, 2, 4], [-3, 9], [0, 0, 7], [-20, 3]],
                         ids=["ordered", "backwards", "negative_and_past", "empty_first",
                              "before_the_start"])
def test_split_points_on_a_static_axis(points):
    assert_exports(Fn(lambda x: _scaled(torch.tensor_split(x, points, dim=1))), (r(2, 7, 3),))


@pytest.mark.parametrize("sections", [1, 3, 7])
def test_sections_on_a_static_axis(sections):
    assert_exports(Fn(lambda x: _scaled(torch.tensor_split(x, sections, dim=-1))), (r(2, 7),))


class SplitLastPositions(torch.nn.Module):
    """The hybrid-LLM pattern: the first ``S - keep`` positions and the last ``keep``."""

    def __init__(self, keep):
        super().__init__()
        self.keep = keep

    def forward(self, x):
        s = x.shape[1]
        head, tail = torch.tensor_split(x, [s - self.keep], dim=1)
        return head * 2, tail.sum(1)


@pytest.mark.parametrize("keep", [0, 1])
def test_split_at_a_size_on_a_dynamic_axis(keep):
    assert_exports(SplitLastPositions(keep), (r(2, 6, 3),), input_names=["x"],
                   dynamic_axes={"x": {1: "S"}}, more_args=[(r(2, 9, 3),), (r(2, 3, 3),)])


def test_constant_points_on_a_dynamic_axis():
    # pieces [0:2], [2:4], [4:S] of a length-S axis that is at least 4 long
    assert_exports(Fn(lambda x: _scaled(torch.tensor_split(x, [2, 4], dim=1))), (r(2, 6),),
                   input_names=["x"], dynamic_axes={"x": {1: "S"}},
                   more_args=[(r(2, 9),), (r(2, 4),)])


def test_sections_of_a_dynamic_axis():
    # 3 sections of S for S = 9, 10, 11: remainders 0, 1, 2 lengthen the first pieces
    assert_exports(Fn(lambda x: _scaled(torch.tensor_split(x, 3, dim=1))), (r(2, 9),),
                   input_names=["x"], dynamic_axes={"x": {1: "S"}},
                   more_args=[(r(2, 10),), (r(2, 11),), (r(2, 13),)])
