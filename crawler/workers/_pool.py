"""Crawl workers: processes that fetch and judge, each owning a share of the hosts.

A ``Poller``: the crawl loop hands a slot's polls to ``poll_chunks``; every host is given to one
worker the first time it is seen (the least-loaded one) and stays there, so per-host
concurrency, delays, Crawl-delay, back-off and the robots.txt cache stay exact. A worker that
dies fails its outstanding polls (recorded as errors of kind "other"; no feedback) and is
started again for the next batch.

A worker's share of a slot goes to it in chunks of ``ANSWER_CHUNK`` polls, each answered in
its own frame: the crawl loop records a chunk's outcomes while the rest are still being
fetched, instead of all of them in the pause between two slots. The worker takes the chunks'
connection slots first come first served, so the first chunks are answered first.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from crawler.fetch import FetchConfig
from crawler.ipc import PipeWorker, WorkerLostError, preload
from crawler.sites import host_key
from crawler.workers._answers import failed_answer
from crawler.workers._process import encode_polls, serve
from crawler.workers._types import PollAnswer, PollJob, answers_of

preload(serve.__module__)  # in the fork server whichever worker starts it

log = logging.getLogger("crawler.service")

LOST = "the crawl worker process exited during the poll; the URL is polled again later"
#: polls per request frame (and answer frame) sent to a worker
ANSWER_CHUNK = 128
#: the reason a carried poll cut by its stream's close is answered with (nobody reads it)
CUT_REASON = "timeout"


def _put(
    queue: asyncio.Queue[tuple[int, list[PollAnswer] | None]],
    token: int,
    answers: list[PollAnswer] | None,
) -> None:
    queue.put_nowait((token, answers))


class CrawlWorkers:
    """``size`` crawl worker processes bound to the running event loop (started on first use,
    or by ``start``)."""

    def __init__(
        self,
        size: int,
        config: FetchConfig,
        text_bytes: int | None,
        chunk: int | None = None,
    ) -> None:
        """``chunk``: polls per frame (None: ``ANSWER_CHUNK``)."""
        if chunk is None:
            chunk = ANSWER_CHUNK
        if size < 1:
            raise ValueError("a crawl worker pool needs at least one worker")
        if chunk < 1:
            raise ValueError("a chunk holds at least one poll")
        self.size = size
        self.chunk = chunk
        self.config = config
        self.text_bytes = text_bytes
        self._workers: list[PipeWorker | None] = [None] * size
        self._owner: dict[str, int] = {}
        self._load = [0] * size  # polls routed to each worker so far
        self.restarts = 0
        self._tokens = itertools.count(1)
        #: token -> (worker, where a carried poll's own answer goes: None when it is lost)
        self._late: dict[int, tuple[int, Callable[[list[PollAnswer] | None], None]]] = {}

    def _worker(self, k: int) -> PipeWorker:
        worker = self._workers[k]
        if worker is not None and worker.alive:
            return worker
        if worker is not None:
            worker.close(wait=False)
            self.restarts += 1
            log.warning("crawl worker %d exited; starting a new one", k)
        worker = self._workers[k] = PipeWorker(
            asyncio.get_running_loop(),
            serve,
            encode_polls,
            (self.config, self.text_bytes),
            functools.partial(self._unasked, k),
        )
        return worker

    def _unasked(self, k: int, message: tuple[int, list[tuple[object, ...]]] | None) -> None:
        """A frame worker ``k`` sent by itself: a carried poll's answer (None: the worker was
        lost, with every carried poll of it)."""
        if message is None:
            for token, (kk, late) in list(self._late.items()):
                if kk == k:
                    del self._late[token]
                    late(None)
            return
        token, answers = message
        entry = self._late.get(token)
        if entry is not None:  # else: its stream was closed (cut) meanwhile
            entry[1](answers_of(answers))

    async def start(self) -> None:
        """Start every worker and wait until each answers (spawning takes a second or two)."""
        await asyncio.gather(
            *(self._worker(k).submit((None, None, 0, []), 0) for k in range(self.size))
        )

    def owners(self, hosts: Sequence[str]) -> list[int]:
        """The worker of each host; a new host goes to the worker with the fewest polls so far
        (the hosts new in this batch largest first)."""
        keys = [host_key(h) for h in hosts]
        new: dict[str, int] = {}
        for key in keys:
            if key not in self._owner:
                new[key] = new.get(key, 0) + 1
        load = list(self._load)
        for key, count in sorted(new.items(), key=lambda kv: -kv[1]):
            k = min(range(self.size), key=load.__getitem__)
            self._owner[key] = k
            load[k] += count
        owner = self._owner
        return [owner[key] for key in keys]

    async def poll(
        self, jobs: Sequence[PollJob], deadline: float | None = None
    ) -> list[PollAnswer]:
        """The answers of ``jobs``, in order."""
        answers: list[PollAnswer | None] = [None] * len(jobs)
        async with contextlib.aclosing(self.indexed_chunks(jobs, deadline)) as chunks:
            async for indexes, chunk in chunks:
                for j, answer in zip(indexes, chunk, strict=True):
                    answers[j] = answer
        return [a for a in answers if a is not None]

    async def poll_chunks(
        self, jobs: Sequence[PollJob], deadline: float | None = None, linger: float | None = None
    ) -> AsyncGenerator[Sequence[PollAnswer], None]:
        """The answers of ``jobs`` a chunk at a time, as the workers send them (``Poller``)."""
        async with contextlib.aclosing(self.indexed_chunks(jobs, deadline, linger)) as chunks:
            async for _, answers in chunks:
                yield answers

    async def indexed_chunks(
        self, jobs: Sequence[PollJob], deadline: float | None = None, linger: float | None = None
    ) -> AsyncGenerator[tuple[list[int], list[PollAnswer]], None]:
        """The answers of ``jobs`` a chunk at a time, as the workers send them: (the chunk's
        indexes in ``jobs``, their answers; a carried poll's own answer comes later, alone).
        A worker that dies fails its outstanding chunks and carried polls (answers of kind
        "other"); it is started again for the next call."""
        parts: list[list[int]] = [[] for _ in range(self.size)]
        for j, k in enumerate(self.owners([job.host for job in jobs])):
            parts[k].append(j)
        pending: dict[asyncio.Future[list[PollAnswer]], tuple[int, list[int], int]] = {}
        step = self.chunk
        for k, part in enumerate(parts):
            if not part:
                continue
            self._load[k] += len(part)
            worker = self._worker(k)
            for c in range(0, len(part), step):
                indexes = part[c : c + step]
                left = None if deadline is None else deadline - time.monotonic()
                chunk = [jobs[j] for j in indexes]
                token = next(self._tokens)
                request = (left, linger, token, chunk)
                pending[worker.submit(request, len(chunk))] = (k, indexes, token)
        lost: set[int] = set()
        # carried polls: token -> url_id -> its index in ``jobs``; their answers come here
        carried: dict[int, dict[int, int]] = {}
        late: asyncio.Queue[tuple[int, list[PollAnswer] | None]] = asyncio.Queue()
        if linger:  # before any answer: a carried poll's may follow its chunk's at once
            for k, _, token in pending.values():
                self._late[token] = (k, functools.partial(_put, late, token))
        try:
            while pending or carried:
                waits: set[asyncio.Future[Any]] = set(pending)
                getting = asyncio.ensure_future(late.get()) if carried else None
                if getting is not None:
                    waits.add(getting)
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if getting is not None:
                    done.discard(getting)
                for future in done:  # first: a chunk's answer comes before its late ones
                    k, indexes, token = pending.pop(future)
                    error = future.exception()
                    if isinstance(error, WorkerLostError):
                        self._late.pop(token, None)
                        if k not in lost:
                            lost.add(k)
                            outstanding = len(indexes) + sum(
                                len(ix) for kk, ix, _ in pending.values() if kk == k
                            )
                            log.error(
                                "crawl worker %d exited with %d polls outstanding", k, outstanding
                            )
                        yield indexes, [failed_answer(jobs[j], LOST) for j in indexes]
                    elif error is not None:
                        raise error
                    else:
                        answers = answers_of(future.result())
                        running = {
                            a.url_id: j
                            for j, a in zip(indexes, answers, strict=True)
                            if a.outcome == "running"
                        }
                        if running:
                            carried[token] = running
                        else:
                            self._late.pop(token, None)
                        yield indexes, answers
                if getting is None:
                    continue
                if not getting.done():
                    getting.cancel()
                    continue
                token, got = getting.result()
                index = carried.get(token, {})
                if got is None:  # the worker was lost with these polls
                    got = [failed_answer(jobs[j], LOST) for j in index.values()]
                got = [a for a in got if a.url_id in index]
                indexes = [index.pop(a.url_id) for a in got]
                if not index:
                    carried.pop(token, None)
                    self._late.pop(token, None)
                if got:
                    yield indexes, got
        finally:
            for future in pending:
                future.cancel()
            for token in [*carried, *(t for _, _, t in pending.values())]:
                entry = self._late.pop(token, None)  # closed early: carried polls end now
                owner = self._workers[entry[0]] if entry is not None else None
                if owner is not None:
                    owner.send((CUT_REASON, None, token, None))

    async def aclose(self) -> None:
        """Stop the processes (``Poller``)."""
        self.close()

    def close(self, wait: bool = True) -> None:
        """Stop the processes (idempotent)."""
        for k, worker in enumerate(self._workers):
            if worker is not None:
                self._workers[k] = None
                worker.close(wait)
