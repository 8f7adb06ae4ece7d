"""Polls that outlive their slot: each slot's answer stream, read in the background.

A slot's polls end at its deadline (by default the slot's length), but a poll then in flight
(its request made: a host that trickles its headers or its body) is not cut: the poller
answers it "running" and lets it go on, bounded by the fetcher's own timeout (``linger``).
Its answer lands in the slot in which it arrives (poll record, feedback, counters, commit),
so one slow host no longer stretches every slot to the fetch timeout.

``InFlight`` reads every slot's answer stream (``Poller.poll_chunks``) in a task of its own
into one inbox; the loop takes from the inbox what the slot's own polls answer, and with it
whatever earlier slots' carried polls answered meanwhile. What it keeps per stream: the URL
records its answers are recorded against, which of its polls are answered, which are still
running (their URLs are not selected again meanwhile; their hosts' polls count against the
host's cap: ``crawler.service._caps``).

The budget: a carried poll is a poll of the slot that started it. In a later slot its URL is
not polled again (a pick of it is dropped and that slot makes one poll fewer), so no slot
starts more than its capacity of polls. A stream whose carried polls do not answer within
``linger`` plus the loop's grace (a stuck crawl worker) is cut and they count as deferred;
so are the carried polls at a stop, at a lapsed cluster permit, and those of URLs that left
the watch list. A cluster worker also cuts those of a site lost and regained (the commit's
fence checks the leases of the slot that commits, and a poll started under an older lease
must land nothing) and keeps those of the sites it still holds under the same lease: a
lease change elsewhere (a join, a move) does not drop answers the sites have served. Those
of a site asked of it (moved to another worker) are waited for: the site is released once
they landed (``crawler/service/_cluster.py``). A
single service keeps those of the URLs it still watches (discovery adds pages to the watch
list slot after slot: each addition would otherwise cut every slow poll in flight).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from crawler.store import UrlRecord
from crawler.workers import PollAnswer, Poller, PollJob

#: what the inbox holds: the stream a chunk of answers belongs to, and the chunk
Arrival = tuple["Stream", Sequence[PollAnswer]]

#: how long past its deadline a slot waits for a poller that overruns it (a crawl worker
#: that is stuck) before it cuts the slot's polls that are still queued
GRACE_S = 5.0


@dataclass(eq=False, slots=True)
class Stream:
    """One slot's polls as they are answered."""

    jobs: Sequence[PollJob]
    #: the URL records its answers are recorded against (empty for polls recorded
    #: elsewhere: discovery's)
    records: dict[int, UrlRecord]
    #: when its carried polls are given up (a ``time.monotonic()`` time)
    expires: float
    answered: set[int] = field(default_factory=set)
    #: url_id -> host of the polls answered "running" and not yet for good
    running: dict[int, str] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    #: cut: what of it is still in the inbox is dropped
    closed: bool = False
    #: carried polls cut one by one (their URL left the watch list): answers dropped
    dropped: set[int] = field(default_factory=set)
    #: url_id -> host of its job (``_host``)
    hosts: dict[int, str] | None = None

    @property
    def settled(self) -> bool:
        """Every poll answered, or running on past the deadline."""
        return len(self.answered) + len(self.running) >= len(self.jobs)

    def unanswered(self) -> Iterator[PollJob]:
        """The polls neither answered nor running (when the stream is cut short)."""
        answered, running = self.answered, self.running
        return (j for j in self.jobs if j.url_id not in answered and j.url_id not in running)

    def take(self, answers: Sequence[PollAnswer]) -> list[PollAnswer]:
        """Note ``answers``; returns those that are polls to record (not "running")."""
        final: list[PollAnswer] = []
        running, dropped = self.running, self.dropped
        for a in answers:
            if a.url_id in dropped:
                continue
            if a.outcome == "running":
                running[a.url_id] = self._host(a.url_id)
                continue
            running.pop(a.url_id, None)
            self.answered.add(a.url_id)
            final.append(a)
        return final

    def _host(self, url_id: int) -> str:
        """The stored host of ``url_id``'s poll (its job carries it, as its record does)."""
        if self.hosts is None:  # built at the first carried poll: most streams have none
            self.hosts = {j.url_id: j.host for j in self.jobs}
        return self.hosts[url_id]


class InFlight:
    """Every slot's answer stream, read in the background into one inbox."""

    def __init__(self, poller: Poller, linger_s: float | None, grace_s: float) -> None:
        """``linger_s``: how long a poll in flight at its slot's deadline may go on (None:
        none, it is answered deferred at the deadline)."""
        self.poller = poller
        self.linger_s = linger_s
        self.grace_s = grace_s
        self.inbox: asyncio.Queue[Arrival] = asyncio.Queue()
        #: streams with polls still running past their slot
        self.carrying: list[Stream] = []

    def start(
        self, jobs: Sequence[PollJob], records: dict[int, UrlRecord], deadline: float
    ) -> Stream:
        """Poll ``jobs`` (deadline: a ``time.monotonic()`` time); answers go to the inbox."""
        stream = Stream(jobs, records, deadline + (self.linger_s or 0.0) + self.grace_s)
        chunks = self.poller.poll_chunks(jobs, deadline, self.linger_s)
        stream.task = asyncio.ensure_future(self._read(stream, chunks))
        return stream

    async def _read(
        self, stream: Stream, chunks: AsyncGenerator[Sequence[PollAnswer], None]
    ) -> None:
        async with contextlib.aclosing(chunks):
            async for answers in chunks:
                self.inbox.put_nowait((stream, answers))

    async def next(self, timeout: float, stop: asyncio.Event | None) -> Arrival | None:
        """The next chunk of answers; None after ``timeout`` seconds or once ``stop`` is set."""
        if stop is not None and stop.is_set():
            return None
        with contextlib.suppress(asyncio.QueueEmpty):
            return self.inbox.get_nowait()
        getting = asyncio.ensure_future(self.inbox.get())
        waits: set[asyncio.Future[Any]] = {getting}
        stopping = asyncio.ensure_future(stop.wait()) if stop is not None else None
        if stopping is not None:
            waits.add(stopping)
        try:
            await asyncio.wait(waits, timeout=max(0.0, timeout), return_when="FIRST_COMPLETED")
        finally:
            if stopping is not None:
                stopping.cancel()
        if getting.done():
            return getting.result()
        getting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await getting
        return None

    async def poll_until(
        self, stream: Stream, deadline: float, stop: asyncio.Event | None
    ) -> AsyncIterator[Arrival]:
        """The arrivals in the inbox (``stream``'s, and carried polls' of earlier streams)
        until ``stream`` is settled, or ``deadline`` plus the grace has passed (a poller that
        overruns its deadline), or ``stop`` is set. What of ``stream`` is then neither
        answered nor running is the caller's to cut (``close``) and count as not polled."""
        while not stream.settled:
            arrival = await self.next(deadline + self.grace_s - time.monotonic(), stop)
            if arrival is None:
                return
            yield arrival

    def arrived(self) -> list[Arrival]:
        """What is in the inbox now (without waiting)."""
        got: list[Arrival] = []
        while True:
            try:
                got.append(self.inbox.get_nowait())
            except asyncio.QueueEmpty:
                return got

    def keep(self, stream: Stream) -> None:
        """The slot of ``stream`` ends: its running polls go on in the background."""
        if stream.running:
            self.carrying.append(stream)

    def landed(self) -> None:
        """Forget the streams whose carried polls all answered."""
        self.carrying = [s for s in self.carrying if s.running]

    def url_ids(self) -> set[int]:
        """The URLs with a poll running past its slot (not to be selected now)."""
        return {uid for s in self.carrying for uid in s.running}

    def hosts(self) -> Counter[str]:
        """Polls running past their slot, per stored host."""
        return Counter(h for s in self.carrying for h in s.running.values())

    def overdue(self) -> list[Stream]:
        """The carried streams past their expiry (a stuck poller)."""
        now = time.monotonic()
        return [s for s in self.carrying if s.running and now > s.expires]

    async def cut(self, streams: Sequence[Stream]) -> list[str]:
        """End ``streams`` now; returns the hosts of their polls that were still running (no
        answer of them lands)."""
        hosts: list[str] = []
        for stream in streams:
            hosts += stream.running.values()
            stream.running.clear()
            stream.closed = True
            await _cancel(stream.task)
        ids = {id(s) for s in streams}
        self.carrying = [s for s in self.carrying if id(s) not in ids]
        return hosts

    def drop(self, keep: Callable[[int], bool]) -> list[str]:
        """Cut the carried polls whose URL ``keep`` refuses (it left the watch list; no
        answer of them lands); returns their hosts."""
        hosts: list[str] = []
        for stream in self.carrying:
            for url_id in [u for u in stream.running if not keep(u)]:
                hosts.append(stream.running.pop(url_id))
                stream.dropped.add(url_id)
        self.landed()
        return hosts

    async def close(self, stream: Stream) -> None:
        """Stop reading ``stream`` (its polls not answered yet are cut)."""
        await _cancel(stream.task)

    async def aclose(self) -> None:
        """Cut every stream still carried."""
        await self.cut(list(self.carrying))


async def _cancel(task: asyncio.Task[None] | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
