"""Per-host politeness: concurrency limit, minimum delay between request starts, back-off.

A host taken over from another process that polled it (``handed_over``) is treated as
requested at the hand-over: its first request here waits the host's delay from then. The
delay may be learned only afterwards (robots.txt's Crawl-delay, read before the first
request): the gate adds it when the request passes, so the wait is the host's real one.

A request that can pass its host's gate at once (a free slot, nobody queued before it, its
delay already waited out) takes it without a coroutine (``enter_now``, then ``leave``): the
awaited way (``slot``) cost 2.5 us per request, the synchronous one about 0.6 us, and almost
every request of a crawl spread over many hosts passes at once (2026-11-27).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field


@dataclass
class HostState:
    semaphore: asyncio.Semaphore | None
    min_delay_s: float
    next_start: float = 0.0
    backoff_until: float = 0.0
    users: int = 0
    last_used: float = field(default_factory=time.monotonic)
    #: ``time.monotonic()`` time another process may have last requested the host (a
    #: hand-over); no request starts before it plus the delay
    handed_at: float = -math.inf


class HostGates:
    """One gate per host name. ``concurrency`` 0 = unlimited; with no limit and no delay a gate
    costs a dict lookup."""

    def __init__(self, concurrency: int, min_delay_s: float, max_hosts: int = 50_000) -> None:
        self.concurrency = concurrency
        self.min_delay_s = min_delay_s
        self.max_hosts = max_hosts
        self._hosts: dict[str, HostState] = {}
        self.robots_delays = False  # set once any host gets a Crawl-delay

    @property
    def trivial(self) -> bool:
        """True when no host can have a limit: gates may be skipped entirely."""
        return self.concurrency == 0 and self.min_delay_s <= 0 and not self.robots_delays

    def state(self, host: str) -> HostState:
        st = self._hosts.get(host)
        if st is None:
            if len(self._hosts) >= self.max_hosts:
                self._prune()
            sem = asyncio.Semaphore(self.concurrency) if self.concurrency > 0 else None
            st = self._hosts[host] = HostState(sem, self.min_delay_s)
        return st

    def _prune(self) -> None:
        now = time.monotonic()
        for host, st in list(self._hosts.items()):
            if (
                st.users == 0
                and st.backoff_until < now
                and st.next_start < now
                and st.handed_at + st.min_delay_s < now
            ):
                del self._hosts[host]

    def set_min_delay(self, host: str, delay_s: float) -> None:
        """Raise a host's delay (e.g. robots.txt Crawl-delay); never below the configured one."""
        self.robots_delays = True
        self.state(host).min_delay_s = max(self.min_delay_s, delay_s)

    def delay_of(self, host: str) -> float | None:
        """The host's delay when a Crawl-delay raised it above the configured one, else None."""
        st = self._hosts.get(host)
        if st is None or st.min_delay_s <= self.min_delay_s:
            return None
        return st.min_delay_s

    def handed_over(self, host: str, at: float) -> None:
        """Another process may have requested ``host`` as late as ``at`` (``time.time()``):
        its hand-over to this one. No request to it starts before then plus its delay."""
        st = self.state(host)
        st.handed_at = max(st.handed_at, time.monotonic() - max(0.0, time.time() - at))

    def back_off(self, host: str, seconds: float) -> None:
        st = self.state(host)
        st.backoff_until = max(st.backoff_until, time.monotonic() + seconds)

    def backoff_remaining(self, host: str) -> float:
        st = self._hosts.get(host)
        if st is None or not st.backoff_until:  # never backed off: no clock read
            return 0.0
        return max(0.0, st.backoff_until - time.monotonic())

    def next_start(self, host: str) -> float:
        """The ``time.monotonic()`` time before which the host's delay lets no request start
        (0.0 for a host with no delay, or not seen yet)."""
        st = self._hosts.get(host)
        return (
            0.0
            if st is None or st.min_delay_s <= 0
            else max(st.next_start, st.handed_at + st.min_delay_s)
        )

    def enter_now(self, host: str) -> HostState | None:
        """Take one of the host's slots now if it can be taken without waiting (a free slot,
        nobody waiting for one, no delay left to wait): its state, to give to ``leave``; else
        None (then ``slot``, which waits). Exactly what ``slot`` does when nothing waits."""
        st = self._hosts.get(host)
        if st is None:
            st = self.state(host)
        sem = st.semaphore
        if sem is not None and sem.locked():
            return None
        if st.min_delay_s > 0:
            now = time.monotonic()
            start = max(now, st.next_start, st.handed_at + st.min_delay_s)
            if start > now:
                return None
            st.next_start = start + st.min_delay_s
        if sem is not None:
            _acquire_free(sem)
        st.users += 1
        return st

    @staticmethod
    def leave(st: HostState) -> None:
        """Give back a slot taken by ``enter_now``."""
        if st.semaphore is not None:
            st.semaphore.release()
        st.users -= 1
        st.last_used = time.monotonic()

    def slot(self, host: str) -> HostSlot:
        """Hold one of the host's concurrent slots, started no sooner than its delay allows
        (``async with gates.slot(host): ...``)."""
        return HostSlot(self.state(host))


def _acquire_free(sem: asyncio.Semaphore) -> None:
    """Acquire ``sem``, which is not ``locked()``, without awaiting: ``acquire`` then
    decrements the counter and returns at once (as documented), so one step of its coroutine
    runs it to its end."""
    step = sem.acquire()
    try:
        step.send(None)
    except StopIteration:
        return
    step.close()  # not reached: a semaphore that is not locked never suspends
    raise RuntimeError("a free semaphore suspended its acquire")


class HostSlot:
    """One use of a host's gate: an async context manager written out as a class (this runs
    around every request; a generator-based one costs several times more)."""

    __slots__ = ("_st",)

    def __init__(self, st: HostState) -> None:
        self._st = st

    async def __aenter__(self) -> None:
        st = self._st
        st.users += 1
        try:
            if st.semaphore is not None:
                await st.semaphore.acquire()
            try:
                if st.min_delay_s > 0:
                    now = time.monotonic()
                    start = max(now, st.next_start, st.handed_at + st.min_delay_s)
                    st.next_start = start + st.min_delay_s
                    if start > now:
                        await asyncio.sleep(start - now)
            except BaseException:
                if st.semaphore is not None:
                    st.semaphore.release()
                raise
        except BaseException:
            st.users -= 1
            st.last_used = time.monotonic()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        st = self._st
        if st.semaphore is not None:
            st.semaphore.release()
        st.users -= 1
        st.last_used = time.monotonic()
