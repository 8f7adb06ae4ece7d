"""Polling batches of jobs against a deadline: what both pollers share.

A ``Batch`` is a list of jobs, their answers as they come, and a deadline (an event-loop
time). Its polls go to the fetcher's ``HostDispatcher`` (each host's in order, politely,
sharing the runners with every other batch). At the deadline, what is not answered is
answered as *deferred* (not polled; no feedback; not an error): still queued behind its host's
concurrency or delay (in the dispatcher's queue, or at the host's gate), "politeness"; in
flight (a host trickling its headers, a robots.txt that does not come), "timeout", and the
fetch is cancelled. Queued polls leave the dispatcher at
once, so a host that cannot keep up holds back neither the other hosts nor the next slot.

A batch may *linger*: then a poll in flight at the deadline (its request made, not waiting at
its host's gate) is not cut but *carried*: it is answered "running" at the deadline (a
placeholder: its answer follows) and goes on for up to ``linger`` seconds more, its real
answer set when it ends (the fetcher's own timeout usually ends it first). The crawl loop
lets a slot end on time that way while a trickling host's poll finishes in the background
and lands in a later slot (docs/pipeline.md).

A poll has no timer of its own: the batch's deadline cuts the polls then inside the fetcher
(in flight, or waiting at their host's gate) by cancelling their tasks, as ``asyncio.timeout``
would, and the poll answers "timeout". A per-poll ``asyncio.timeout_at`` cost 4-6 us of CPU per
poll (its timer handle, pushed on and cancelled out of the loop's heap) for a deadline that
almost never ends a poll: the fetcher's own budget (a timer per request anyway) comes first.
A lingering batch keeps one timer for its carried polls' end. A batch without a deadline runs
every poll to its end (the fetcher's own timeouts still bound each one).

An engine may finish its polls *a loop turn at a time* (``per_turn``: the crawl workers'):
a poll whose fetch ended waits for the end of the event loop's turn, and the polls that
ended in the turn are then finished together (judged, in a crawl worker), before any timer
or I/O of the next turn. Judged one by one between the requests' own steps, a nonce page
cost the worker 27-108 us more CPU per poll than judged a turn's worth together (4 of 4
interleaved rounds, 2026-11-27): the judge's regexes and automaton run warm. A deadline
(``expire``, ``cut``) finishes the polls that ended first, so a poll fetched before its
deadline is answered as it was fetched, as when it was finished at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from crawler.fetch import Fetcher, FetchRequest, FetchResult, HostDispatcher
from crawler.workers._answers import deferred_answer, failed_answer, running_answer
from crawler.workers._types import PollAnswer, PollJob


class Batch:
    """Jobs, their answers as they come, the in-flight ones, and when all are in."""

    __slots__ = (
        "answers", "carried", "cut", "done", "ending", "expired", "fetching", "held", "jobs",
        "left", "linger", "running", "sink", "timer", "when",
    )  # fmt: skip

    def __init__(
        self,
        jobs: Sequence[PollJob],
        when: float | None,
        loop: asyncio.AbstractEventLoop,
        sink: Callable[[PollAnswer], None] | None = None,
        linger: float = 0.0,
    ) -> None:
        self.jobs = jobs
        self.when = when
        #: seconds a poll in flight at ``when`` may go on (0: cut at the deadline)
        self.linger = linger
        #: the jobs in flight at the deadline that go on (answered "running" there)
        self.carried: set[int] = set()
        #: the polls inside the fetcher now (a deadline cuts them there): their tasks
        self.fetching: dict[int, asyncio.Task[Any]] = {}
        self.cut: set[int] = set()  # the polls whose tasks the deadline cancelled
        self.answers: list[PollAnswer | None] = [None] * len(jobs)
        self.left = len(jobs)
        self.running: dict[int, asyncio.Task[Any] | None] = {}  # started, not answered: task
        self.expired = False
        self.timer: asyncio.TimerHandle | None = None  # the deadline's
        self.ending: asyncio.TimerHandle | None = None  # the end of the carried polls' linger
        self.sink = sink  # sees every answer as it is set
        self.held = 0  # fetched, waiting for a verdict (the in-process poller's count)
        self.done: asyncio.Future[None] = loop.create_future()
        if not jobs:
            self.done.set_result(None)

    def set(self, j: int, answer: PollAnswer) -> None:
        """Answer job ``j`` (a second answer, e.g. after the deadline answered it, is ignored).
        A carried job's answer comes after ``done``: the sink sees it then."""
        if self.answers[j] is not None:
            return
        self.answers[j] = answer
        self.running.pop(j, None)
        if j in self.carried:
            self.carried.discard(j)
            if not self.carried and self.ending is not None:
                self.ending.cancel()
        else:
            self.left -= 1
        if self.sink is not None:
            self.sink(answer)
        if not self.left:
            if self.timer is not None:
                self.timer.cancel()
            if not self.done.done():
                self.done.set_result(None)

    def cancel(self, j: int) -> None:
        """End poll ``j`` now if it is inside the fetcher (its task is cancelled there, and
        the poll answers "timeout", unless answered already)."""
        task = self.fetching.pop(j, None)
        if task is not None:
            self.cut.add(j)
            task.cancel()

    def carry(self, j: int) -> None:
        """Job ``j`` goes on past the deadline: "running" now, its answer later."""
        self.carried.add(j)
        self.left -= 1
        if self.sink is not None:
            self.sink(running_answer(self.jobs[j]))
        if not self.left and not self.done.done():
            self.done.set_result(None)

    @property
    def finished(self) -> bool:
        """Every job has its answer (carried ones included)."""
        return not self.left and not self.carried


class PollEngine:
    """Fetches the jobs of batches with ``fetcher``; ``finish(batch, j, result)`` turns a
    fetch result into the job's answer (now, or later: ``batch.set``)."""

    def __init__(
        self,
        fetcher: Fetcher,
        finish: Callable[[Batch, int, FetchResult], None],
        *,
        per_turn: bool = False,
    ) -> None:
        """``per_turn``: finish the polls that ended in a loop turn together, at its end."""
        self.fetcher = fetcher
        self.finish = finish
        self.dispatch: HostDispatcher[tuple[Batch, int]] = fetcher.dispatcher(self._poll)
        self.per_turn = per_turn
        #: polls whose fetch ended in this loop turn, not finished yet (``per_turn``)
        self._ended: list[tuple[Batch, int, FetchResult]] = []

    def add(
        self,
        jobs: Sequence[PollJob],
        seconds_left: float | None,
        sink: Callable[[PollAnswer], None] | None = None,
        linger: float | None = None,
    ) -> Batch:
        """Start polling ``jobs``; whatever is not answered ``seconds_left`` from now (None:
        no deadline) is deferred, except (``linger`` seconds, None or 0: none) the polls then
        in flight, which are carried (``Batch.carry``)."""
        loop = asyncio.get_running_loop()
        when = None if seconds_left is None else loop.time() + max(0.0, seconds_left)
        batch = Batch(jobs, when, loop, sink, max(0.0, linger or 0.0))
        if jobs:
            key = self.fetcher.gate_key
            # discovery's few polls go before a host's queued re-polls: on a host that takes
            # one poll a slot they would otherwise wait behind the scheduler's every slot
            queued: list[tuple[str, tuple[Batch, int]]] = []
            ahead: list[tuple[str, tuple[Batch, int]]] = []
            for j, job in enumerate(jobs):
                host = key(job.url)
                if job.handed_over_at is not None:  # (a cluster worker's gained host)
                    self.fetcher.gates.handed_over(host, job.handed_over_at)
                (ahead if job.want_body else queued).append((host, (batch, j)))
            self.dispatch.submit(queued)
            if ahead:
                self.dispatch.submit(ahead, ahead=True)
            if when is not None:
                batch.timer = loop.call_at(when, self.expire, batch)
        return batch

    def expire(self, batch: Batch, *, carry: bool = True) -> None:
        """Answer what is not answered yet as deferred, and drop its queued polls; a
        lingering batch's polls in flight are carried instead (unless not ``carry``)."""
        if batch.expired:
            return
        if self._ended:  # the polls fetched before the deadline are answered as fetched
            self.settle()
        batch.expired = True
        if batch.timer is not None:
            batch.timer.cancel()
        self.dispatch.discard(lambda item: item[0] is batch)
        running, jobs, at_gate = batch.running, batch.jobs, self.fetcher.waits_at_gate
        carry = carry and batch.linger > 0
        for j, answer in enumerate(batch.answers):
            if answer is None:
                started = j in running and not at_gate(running[j])
                if started and carry:
                    batch.carry(j)
                    continue
                batch.cancel(j)
                batch.set(j, deferred_answer(jobs[j], "timeout" if started else "politeness"))
        if batch.carried and batch.when is not None:  # they go on until the linger ends
            loop = asyncio.get_running_loop()
            batch.ending = loop.call_at(batch.when + batch.linger, self._end_carried, batch)

    def _end_carried(self, batch: Batch) -> None:
        """The linger is over: the carried polls still in flight end (answered "timeout")."""
        batch.ending = None
        for j in list(batch.carried):
            batch.cancel(j)

    def cut(self, batch: Batch, reason: str = "timeout") -> None:
        """End the batch now: what is queued or in flight (carried polls too) is answered
        deferred (``reason`` for the polls in flight)."""
        if self._ended:  # a carried poll fetched already is answered as fetched
            self.settle()
        self.expire(batch, carry=False)
        for j in list(batch.carried):
            batch.cancel(j)
            batch.set(j, deferred_answer(batch.jobs[j], reason))

    async def _poll(self, item: tuple[Batch, int]) -> None:
        batch, j = item
        if batch.expired:
            return
        job = batch.jobs[j]
        task = asyncio.current_task()
        assert task is not None
        batch.running[j] = task
        request = FetchRequest(job.url_id, job.url, job.etag, job.last_modified)
        cancelling = task.cancelling()
        if batch.when is not None:  # a deadline may cut it (``Batch.cancel``)
            batch.fetching[j] = task
        try:
            try:
                result = await self.fetcher.fetch(request)
            finally:
                batch.fetching.pop(j, None)
                # a cut's cancellation is ours to take back (as ``asyncio.timeout`` does)
                cut = j in batch.cut and task.uncancel() <= cancelling
            if not batch.expired or j in batch.carried:
                if self.per_turn:
                    if not self._ended:
                        asyncio.get_running_loop().call_soon(self.settle)
                    self._ended.append((batch, j, result))
                else:
                    self.finish(batch, j, result)
        except asyncio.CancelledError:
            if not cut:  # not (only) the deadline: the task itself is cancelled
                raise
            batch.set(j, deferred_answer(job, "timeout"))  # the deadline cut it
        except Exception as exc:  # a bug, not a network problem: one failed poll
            batch.set(j, failed_answer(job, f"poll failed: {type(exc).__name__}: {exc}"))

    def settle(self) -> None:
        """Finish the polls whose fetch ended and that wait for it (``per_turn``)."""
        ended, self._ended = self._ended, []
        for batch, j, result in ended:
            try:
                self.finish(batch, j, result)
            except Exception as exc:  # a bug, not a network problem: one failed poll
                job = batch.jobs[j]
                batch.set(j, failed_answer(job, f"poll failed: {type(exc).__name__}: {exc}"))

    def close(self) -> None:
        """Cancel every poll in flight and drop the queued ones."""
        self.dispatch.close()
