"""The slot clock: slot k starts at t0 + k * L on the monotonic clock, so it never drifts.

A plain monotonic clock rather than APScheduler's interval trigger: slots may be as short
as 50 ms, a slot's work must finish before the next one starts (the scheduler learns from
the previous slot's outcomes), and a slot that overruns must be counted and the missed
boundaries skipped, not queued up. APScheduler runs the service's periodic housekeeping.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Tick:
    """One slot start: its sequence number, its planned start and how late it started."""

    seq: int
    planned: float
    lag_s: float
    skipped: int  # boundaries missed since the previous tick because a slot overran


class SlotClock:
    """Yields slot starts every ``slot_seconds`` on a fixed grid."""

    def __init__(self, slot_seconds: float, *, first_seq: int = 0) -> None:
        if not math.isfinite(slot_seconds) or slot_seconds <= 0:
            raise ValueError("slot_seconds must be a positive number")
        self.slot_seconds = slot_seconds
        self._origin = time.monotonic()
        self._next_index = 0
        self._seq = first_seq

    def overran(self, started: float) -> bool:
        """Whether work that began at the slot start ``started`` ran past the next boundary."""
        return time.monotonic() > started + self.slot_seconds

    async def wait(self, stop: asyncio.Event | None = None) -> Tick | None:
        """Sleep until the next slot boundary; None if ``stop`` was set meanwhile."""
        now = time.monotonic()
        index = self._next_index
        skipped = 0
        latest = math.floor((now - self._origin) / self.slot_seconds)
        if latest > index:  # boundaries passed while the previous slot was still running
            skipped = latest - index
            index = latest
        planned = self._origin + index * self.slot_seconds
        delay = planned - now
        if delay > 0:
            if stop is None:
                await asyncio.sleep(delay)
            else:
                try:
                    await asyncio.wait_for(stop.wait(), timeout=delay)
                    return None
                except TimeoutError:
                    pass
        if stop is not None and stop.is_set():
            return None
        self._next_index = index + 1
        self._seq += 1
        return Tick(self._seq, planned, max(0.0, time.monotonic() - planned), skipped)
