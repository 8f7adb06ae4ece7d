"""The slot clock keeps a fixed grid, skips boundaries after an overrun, and stops."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from crawler.service import SlotClock


async def test_ticks_follow_the_grid_without_drift() -> None:
    clock = SlotClock(0.02)
    began = time.monotonic()
    ticks = [await clock.wait() for _ in range(25)]
    elapsed = time.monotonic() - began
    assert [t.seq for t in ticks if t] == list(range(1, 26))
    # 25 ticks on a 20 ms grid, the first at t=0: at least 24 intervals, no drift. A tick
    # that came late (a loaded machine) skips to the next boundary and says so.
    assert elapsed >= 0.47
    planned = [t.planned for t in ticks if t]
    for (a, b), tick in zip(itertools.pairwise(planned), ticks[1:], strict=True):
        assert tick is not None
        assert b - a == pytest.approx(0.02 * (1 + tick.skipped), abs=1e-9)


async def test_an_overrun_skips_the_missed_boundaries() -> None:
    clock = SlotClock(0.02)
    first = await clock.wait()
    assert first is not None
    await asyncio.sleep(0.065)  # the slot's work takes three slots
    assert clock.overran(first.planned)
    nxt = await clock.wait()
    assert nxt is not None
    assert nxt.skipped >= 2
    assert nxt.seq == first.seq + 1


async def test_stop_interrupts_the_wait() -> None:
    clock = SlotClock(10.0)
    await clock.wait()
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, stop.set)
    began = time.monotonic()
    assert await clock.wait(stop) is None
    assert time.monotonic() - began < 1.0


def test_bad_slot_length() -> None:
    with pytest.raises(ValueError):
        SlotClock(0)
