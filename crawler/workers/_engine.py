"""Polling batches of jobs against a deadline: what both pollers share.

A ``Batch`` is a list of jobs, their answers as they come, and a deadline (an event-loop
time). Its polls go to the fetcher's ``HostDispatcher`` (each host's in order, politely,
sharing the runners with every other batch). At the deadline, what is not answered is
answered as *deferred* (not polled; no feedback; not an error): still queued behind its host's
concurrency or delay (in the dispatcher's queue, or at the host's gate), "politeness"; in
flight (a host trickling its headers, a robots.txt that does not come), "timeout", and the
fetch is cancelled. Queued polls leave the dispatcher at
once, so a host that cannot keep up holds back neither the other hosts nor the next slot.

The fetch runs under ``asyncio.timeout_at(deadline)`` (~2 us per poll); a batch without a
deadline runs every poll to its end (the fetcher's own timeouts still bound each one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from crawler.fetch import Fetcher, FetchRequest, FetchResult, HostDispatcher
from crawler.workers._answers import deferred_answer, failed_answer
from crawler.workers._types import PollAnswer, PollJob


class Batch:
    """Jobs, their answers as they come, the in-flight ones, and when all are in."""

    __slots__ = (
        "answers", "done", "expired", "held", "jobs", "left", "running", "sink", "timer", "when",
    )  # fmt: skip

    def __init__(
        self,
        jobs: Sequence[PollJob],
        when: float | None,
        loop: asyncio.AbstractEventLoop,
        sink: Callable[[PollAnswer], None] | None = None,
    ) -> None:
        self.jobs = jobs
        self.when = when
        self.answers: list[PollAnswer | None] = [None] * len(jobs)
        self.left = len(jobs)
        self.running: dict[int, asyncio.Task[Any] | None] = {}  # started, not answered: task
        self.expired = False
        self.timer: asyncio.TimerHandle | None = None
        self.sink = sink  # sees every answer as it is set
        self.held = 0  # fetched, waiting for a verdict (the in-process poller's count)
        self.done: asyncio.Future[None] = loop.create_future()
        if not jobs:
            self.done.set_result(None)

    def set(self, j: int, answer: PollAnswer) -> None:
        """Answer job ``j`` (a second answer, e.g. after the deadline answered it, is ignored)."""
        if self.answers[j] is not None:
            return
        self.answers[j] = answer
        self.running.pop(j, None)
        self.left -= 1
        if self.sink is not None:
            self.sink(answer)
        if not self.left:
            if self.timer is not None:
                self.timer.cancel()
            if not self.done.done():
                self.done.set_result(None)


class PollEngine:
    """Fetches the jobs of batches with ``fetcher``; ``finish(batch, j, result)`` turns a
    fetch result into the job's answer (now, or later: ``batch.set``)."""

    def __init__(self, fetcher: Fetcher, finish: Callable[[Batch, int, FetchResult], None]) -> None:
        self.fetcher = fetcher
        self.finish = finish
        self.dispatch: HostDispatcher[tuple[Batch, int]] = fetcher.dispatcher(self._poll)

    def add(
        self,
        jobs: Sequence[PollJob],
        seconds_left: float | None,
        sink: Callable[[PollAnswer], None] | None = None,
    ) -> Batch:
        """Start polling ``jobs``; whatever is not answered ``seconds_left`` from now (None:
        no deadline) is deferred."""
        loop = asyncio.get_running_loop()
        when = None if seconds_left is None else loop.time() + max(0.0, seconds_left)
        batch = Batch(jobs, when, loop, sink)
        if jobs:
            key = self.fetcher.gate_key
            for job in jobs:
                if job.handed_over_at is not None:  # (a cluster worker's gained host)
                    self.fetcher.gates.handed_over(key(job.url), job.handed_over_at)
            self.dispatch.submit((key(job.url), (batch, j)) for j, job in enumerate(jobs))
            if when is not None:
                batch.timer = loop.call_at(when, self.expire, batch)
        return batch

    def expire(self, batch: Batch) -> None:
        """Answer what is not answered yet as deferred, and drop its queued polls."""
        if batch.expired:
            return
        batch.expired = True
        if batch.timer is not None:
            batch.timer.cancel()
        self.dispatch.discard(lambda item: item[0] is batch)
        running, jobs, at_gate = batch.running, batch.jobs, self.fetcher.waits_at_gate
        for j, answer in enumerate(batch.answers):
            if answer is None:
                started = j in running and not at_gate(running[j])
                batch.set(j, deferred_answer(jobs[j], "timeout" if started else "politeness"))

    async def _poll(self, item: tuple[Batch, int]) -> None:
        batch, j = item
        if batch.expired:
            return
        job = batch.jobs[j]
        batch.running[j] = asyncio.current_task()
        request = FetchRequest(job.url_id, job.url, job.etag, job.last_modified)
        try:
            if batch.when is None:
                result = await self.fetcher.fetch(request)
            else:
                async with asyncio.timeout_at(batch.when):
                    result = await self.fetcher.fetch(request)
            if not batch.expired:
                self.finish(batch, j, result)
        except TimeoutError:  # the deadline (the fetcher itself never raises one)
            batch.set(j, deferred_answer(job, "timeout"))
        except Exception as exc:  # a bug, not a network problem: one failed poll
            batch.set(j, failed_answer(job, f"poll failed: {type(exc).__name__}: {exc}"))

    def close(self) -> None:
        """Cancel every poll in flight and drop the queued ones."""
        self.dispatch.close()
