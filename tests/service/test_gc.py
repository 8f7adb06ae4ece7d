"""The service process's garbage-collector set-up."""

from __future__ import annotations

import gc

from crawler.service import tune_gc


def test_tune_gc_freezes_start_up_and_collects_the_young_less_often() -> None:
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (20_000, 20, 20)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
