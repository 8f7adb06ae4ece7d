"""Handing polls to a bounded number of runners, host by host, politely.

Each host has a FIFO queue of items (items submitted ``ahead`` go before those already
queued: a few polls that must not wait behind a host's many). A host is *ready* when it has
items waiting, fewer than ``width`` of its items are in flight, and its gate's next start is
not in the future; ready hosts take turns. At most ``runners`` runner tasks exist; each
takes an item from the next ready host and awaits ``work(item)``, then the next, and ends
when no host is ready. A host that must wait for its delay is parked on a timer instead of
holding a runner.

Why runners rather than a coroutine per item or per host, each waiting for one of the
fetcher's connection slots: a coroutine waiting on an asyncio semaphore costs a future and an
extra wake-up for every request it makes, and with a few hundred waiting that costs more CPU
per request (about a third more on loopback) than the request's own client code. Runners never
wait for a slot (there are no more of them than slots) and never sleep on a host's delay.

The fetcher's own host gates still enforce the per-host limits and delays exactly; the
dispatcher only keeps runners from queueing in them (this is what Scrapy's downloader slots do).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")

log = logging.getLogger("crawler.fetch")


class _Host(Generic[T]):
    __slots__ = ("active", "key", "queue", "waiting")

    def __init__(self, key: str) -> None:
        self.key = key
        self.queue: deque[T] = deque()
        self.active = 0  # items in flight
        self.waiting = False  # in the ready queue, or parked on a timer


class HostDispatcher(Generic[T]):
    """Runs ``work(item)`` for submitted items: per host in order, at most ``width`` at a time
    per host and ``runners`` in all, no host started before ``next_start(host)`` (a
    ``time.monotonic()`` time; None: no delays). An exception from ``work`` is logged and
    the item counts as done."""

    def __init__(
        self,
        work: Callable[[T], Awaitable[None]],
        *,
        width: int,
        runners: int,
        next_start: Callable[[str], float] | None = None,
    ) -> None:
        if width < 1 or runners < 1:
            raise ValueError("width and runners must be at least 1")
        self._work = work
        self.width = width
        self.runners = runners
        self._next_start = next_start
        self._hosts: dict[str, _Host[T]] = {}
        self._ready: deque[_Host[T]] = deque()
        self._running = 0  # runners in their loop
        self._tasks: set[asyncio.Task[None]] = set()
        self._parked: dict[_Host[T], asyncio.TimerHandle] = {}
        self.pending = 0  # items submitted and not yet done
        self._idle: asyncio.Future[None] | None = None  # what join() waits on

    def submit(self, items: Iterable[tuple[str, T]], *, ahead: bool = False) -> None:
        """Queue ``(host key, item)`` pairs (each host's in the order given); ``ahead``:
        before the items its host has queued already (not those in flight)."""
        hosts = self._hosts
        touched: list[_Host[T]] = []
        fronts: dict[str, list[T]] = {}
        for key, item in items:
            host = hosts.get(key)
            if host is None:
                host = hosts[key] = _Host(key)
            if not host.queue and key not in fronts:
                touched.append(host)
            if ahead:
                fronts.setdefault(key, []).append(item)
            else:
                host.queue.append(item)
            self.pending += 1
        for key, front in fronts.items():
            hosts[key].queue.extendleft(reversed(front))
        for host in touched:
            self._offer(host)

    def _offer(self, host: _Host[T]) -> None:
        """Make ``host`` ready if it can take one more item now, and start a runner if one is
        missing."""
        if host.waiting or not host.queue or host.active >= self.width:
            return
        host.waiting = True
        self._ready.append(host)
        if self._running < self.runners:
            self._running += 1
            task = asyncio.ensure_future(self._run())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self) -> None:
        ready, hosts, work, width = self._ready, self._hosts, self._work, self.width
        next_start = self._next_start
        try:
            while ready:
                host = ready.popleft()
                host.waiting = False
                if not host.queue:  # emptied by discard() while it waited
                    if not host.active:
                        hosts.pop(host.key, None)
                    continue
                if next_start is not None:
                    start = next_start(host.key)
                    if start and start > time.monotonic():  # its delay: park it, serve the others
                        self._park(host, start)
                        continue
                item = host.queue.popleft()
                host.active += 1
                if host.active < width:
                    self._offer(host)  # another of its items at once (after the other hosts)
                try:
                    await work(item)
                except Exception:
                    log.exception("a dispatched item failed")
                finally:
                    host.active -= 1
                    self.pending -= 1
                    if not self.pending:
                        self._wake_joiners()
                    if host.queue:
                        self._offer(host)
                    elif not host.active and not host.waiting:
                        hosts.pop(host.key, None)
        finally:
            self._running -= 1

    async def join(self) -> None:
        """Wait until every item submitted so far is done (or dropped by ``close``)."""
        if self.pending:
            if self._idle is None:
                self._idle = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._idle)

    def _wake_joiners(self) -> None:
        if self._idle is not None:
            if not self._idle.done():
                self._idle.set_result(None)
            self._idle = None

    def _park(self, host: _Host[T], start: float) -> None:
        host.waiting = True
        loop = asyncio.get_running_loop()
        when = loop.time() + (start - time.monotonic())
        self._parked[host] = loop.call_at(when, self._unpark, host)

    def _unpark(self, host: _Host[T]) -> None:
        del self._parked[host]
        host.waiting = False
        self._offer(host)

    def discard(self, drop: Callable[[T], bool]) -> list[T]:
        """Take the queued (not started) items for which ``drop`` is true out of their hosts'
        queues, and return them; items in flight are not touched."""
        dropped: list[T] = []
        for host in list(self._hosts.values()):
            if not host.queue:
                continue
            keep: deque[T] = deque()
            for item in host.queue:
                (dropped if drop(item) else keep).append(item)
            host.queue = keep
            if not keep and not host.active:
                timer = self._parked.pop(host, None)
                if timer is not None:
                    timer.cancel()
                    host.waiting = False
                if not host.waiting:  # else it leaves when a runner takes it off the ready queue
                    self._hosts.pop(host.key, None)
        self.pending -= len(dropped)
        if dropped and not self.pending:
            self._wake_joiners()
        return dropped

    def close(self) -> None:
        """Cancel the runners (the items in flight) and drop the queued items."""
        for task in self._tasks:
            task.cancel()
        for timer in self._parked.values():
            timer.cancel()
        self._parked.clear()
        self.pending -= sum(len(host.queue) for host in self._hosts.values())
        self._hosts.clear()
        self._ready.clear()
        if not self.pending:
            self._wake_joiners()
