"""Delivery paces itself while other work keeps the machine busy.

>>> pace = CpuPace(share=0.05, busy_above=0.6)
>>> await asyncio.sleep(pace.pause())   # between two passes of the deliverer

Why: a niceness of 19 was meant to give delivery only the CPU the crawl leaves, and it does
not. Measured with ``benchmarks/delivery.py`` on an idle 2-core machine (slots back to back,
every poll an event, docs/results.md): the niced delivery process took 30 % to 45 % of a
core in the crawl's gaps, and the crawl lost 14 % to 19 % of its polls/s (the median of the
on phases); the idle scheduling class (``SCHED_IDLE``) instead of nice 19 changed little (14 %
to 17 %). The crawl is a pipeline of processes that wait on each other (the service, its
crawl workers, the database), so the CPU it leaves idle is what keeps its own wake-ups
prompt, and delivery's database work (SQLite's one write lock, PostgreSQL's backends at their
own priority) does not follow the delivery process's niceness at all.

So delivery limits itself, the way PostgreSQL's autovacuum limits its I/O with a cost budget
and a delay: while the other processes use more than ``busy_above`` of all the machine's
cores (measured over the last ``window_s``), the delivery process keeps its own CPU time under
``share`` of one core, sleeping between passes when it is over. When the machine has room
(a paced crawl between its slots, a crawl that is not CPU-bound) the limit is off and delivery
runs at full speed. Events never wait in memory for this: they wait in the outbox.

The machine's busy time is read from the kernel's counters with psutil (``cpu_times``: every
core's busy time since boot); the process's own with ``time.process_time`` (all its threads).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

#: seconds over which the machine's load and the process's own CPU are measured
WINDOW_S = 1.0
#: a shorter debt is not worth a sleep (it is carried to the next pass)
MIN_PAUSE_S = 0.001
#: the longest single pause (a larger debt is paid over several passes, so a stop is prompt)
MAX_PAUSE_S = 1.0


def machine_busy_seconds() -> float:
    """CPU seconds all cores have been busy since boot (not idle, not waiting for I/O)."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


@dataclass
class Load:
    """One window's measure: the other processes' share of all cores, and whether the limit
    applies."""

    others: float
    limited: bool


class CpuPace:
    """How long the deliverer waits before its next pass; ``share`` 0 disables the limit."""

    def __init__(
        self,
        share: float,
        busy_above: float,
        *,
        window_s: float = WINDOW_S,
        cores: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        own_cpu: Callable[[], float] = time.process_time,
        machine_busy: Callable[[], float] = machine_busy_seconds,
    ) -> None:
        if share < 0 or busy_above < 0:
            raise ValueError("share and busy_above must be >= 0")
        self.share = share
        self.busy_above = busy_above
        self.window_s = window_s
        self.cores = cores or psutil.cpu_count() or 1
        self._clock = clock
        self._own_cpu = own_cpu
        self._machine_busy = machine_busy
        now = clock()
        self._window_at = now
        self._window_own = own_cpu()
        self._window_machine = machine_busy()
        # limited until the first window is measured: a delivery process that starts beside
        # a busy crawl would otherwise run a whole window at full speed
        self.load = Load(0.0, share > 0)
        # the budget: CPU seconds the process may still use while limited (it grows by
        # ``share`` a second, up to one window's worth, so an idle spell does not bank more)
        self._credit = share * window_s
        self._credit_at = now
        self._credit_own = self._window_own

    @property
    def enabled(self) -> bool:
        return self.share > 0

    def pause(self) -> float:
        """Seconds to sleep before the next pass (0 when the machine has room or the budget
        allows another pass)."""
        if not self.enabled:
            return 0.0
        now = self._clock()
        own = self._own_cpu()
        if now - self._window_at >= self.window_s:
            self._measure(now, own)
        full = self.share * self.window_s
        if self.load.limited:
            earned = self.share * (now - self._credit_at) - (own - self._credit_own)
            self._credit = min(full, self._credit + earned)
        else:  # the limit starts afresh when the machine next gets busy
            self._credit = full
        self._credit_at, self._credit_own = now, own
        pause = -self._credit / self.share
        return 0.0 if pause < MIN_PAUSE_S else min(MAX_PAUSE_S, pause)

    def _measure(self, now: float, own: float) -> None:
        machine = self._machine_busy()
        elapsed = now - self._window_at
        others = max(0.0, (machine - self._window_machine) - (own - self._window_own))
        share_of_cores = others / (elapsed * self.cores)
        self.load = Load(share_of_cores, share_of_cores > self.busy_above)
        self._window_at, self._window_own, self._window_machine = now, own, machine
