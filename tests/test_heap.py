"""An export leaves the garbage collector as it found it (t2n.heap): nothing stays frozen,
a caller's own frozen objects stay frozen, and a failed export thaws too."""

import gc

import pytest
import torch

import t2n
from t2n.errors import T2NError
from t2n.heap import collect_young_only


def test_objects_before_the_block_are_frozen_within_it_only():
    assert gc.get_freeze_count() == 0
    with collect_young_only():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_a_callers_freeze_is_left_alone():
    """Neither thawed (the count would fall to 0) nor frozen again (the young lists would
    join it); the count may fall a little: frozen objects other threads release leave it."""
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        young = [[] for _ in range(1000)]  # noqa: F841 (what a second freeze would take)
        with collect_young_only():
            assert 0 < gc.get_freeze_count() <= frozen
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        with collect_young_only():
            assert gc.get_freeze_count() == 0
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_export_thaws_after_success_and_failure(tmp_path):
    t2n.export(torch.nn.Linear(3, 2), (torch.randn(1, 3),), tmp_path / "a.nnef.tar")
    assert gc.get_freeze_count() == 0
    with pytest.raises(T2NError):
        t2n.export(torch.nn.Linear(3, 2), (torch.randn(1, 4),), tmp_path / "b.nnef.tar")
    assert gc.get_freeze_count() == 0 and gc.isenabled()
