"""When to try an event again: the settings' schedule, jittered, and Retry-After."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

#: the jitter: a delay is drawn uniformly within this share of its scheduled value, so
#: that the events a receiver's outage failed together do not all come back at once
JITTER = 0.2


@dataclass
class RetryPolicy:
    """``schedule[n]``: seconds before attempt ``n + 1`` (``schedule[0]`` before the first);
    an event failed ``len(schedule)`` times is dead-lettered."""

    schedule: Sequence[float]
    jitter: float = JITTER
    rng: random.Random = field(default_factory=random.Random)

    @property
    def first_delay(self) -> float:
        return float(self.schedule[0])

    @property
    def longest(self) -> float:
        return float(max(self.schedule))

    def next_delay(self, attempts_done: int, retry_after: float | None = None) -> float | None:
        """Seconds until the next attempt after ``attempts_done`` failed ones, None when the
        schedule is spent. A receiver's Retry-After replaces the scheduled delay (capped at
        the schedule's longest step: a receiver cannot park an event for ever)."""
        if attempts_done >= len(self.schedule):
            return None
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.longest)
        base = float(self.schedule[attempts_done])
        return base * self.rng.uniform(1 - self.jitter, 1 + self.jitter)
