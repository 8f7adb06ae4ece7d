"""A crawl worker process: fetch a batch of URLs and judge the bodies, all in this process.

The service's own process keeps the scheduler, the database and the metrics; the fetching
(aiohttp's request and response handling is most of a poll's CPU) and the change detection run
here, so both fit on more than one core. Each worker owns a fixed share of the hosts (the
coordinator sends a host's URLs to one worker only), so its ``Fetcher`` keeps exact per-host
politeness, robots.txt and back-off state, as the in-process fetcher does.

Wire format, both ways: ``crawler.ipc``'s frames (an 8-byte big-endian length, then a
pickle). A request is (seconds to the deadline, seconds a poll in flight then may linger,
the batch's token, a list of ``PollJob``s); the answer is the list of ``PollAnswer``s in the
same order (no bodies: only what the service records), both pickled as plain tuples (see
``crawler.workers._types``). Batches are worked concurrently (their polls share the
fetcher's dispatcher) and answered in the order they came. A poll carried past its batch's
deadline is "running" in that answer; its own answer follows in a frame of its own, unasked:
the tuple (token, [answer]). A request whose jobs are None cuts the batch of its token (its
carried polls end, answered deferred with the reason in the deadline's place); it has no
answer. The worker leaves when its input closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from crawler.detect import judge
from crawler.fetch import FetchConfig, Fetcher, FetchResult
from crawler.gc_policy import tune_gc
from crawler.ipc import encode_pickle, own_fd, read_frame_async, write_frame
from crawler.workers._answers import (
    answer_of,
    body_answer,
    detect_item,
    kept_body,
    running_answer,
)
from crawler.workers._engine import Batch, PollEngine
from crawler.workers._types import PollAnswer, PollJob, jobs_of, plain

#: a request frame: (seconds left until the deadline, or None; seconds a poll in flight at
#: the deadline may go on, or None; the batch's token; the jobs, or None: cut that batch, the
#: deadline's place holding the reason)
Request = tuple[float | str | None, float | None, int, list[PollJob] | None]


def encode_polls(request: Request) -> list[bytes]:
    """A request frame as parts for ``os.writev``."""
    left, linger, token, jobs = request
    return encode_pickle((left, linger, token, None if jobs is None else plain(jobs)))


def poll_answer(result: FetchResult, job: PollJob, text_bytes: int | None) -> PollAnswer:
    """What the service records of one poll: the fetch result without its body, and the
    verdict of the body (``text`` of a changed page kept up to ``text_bytes``; None = none)."""
    if job.want_body:  # a discovery poll: not judged, the body goes back
        return body_answer(result)
    if result.outcome != "ok":
        return answer_of(result, None, text_bytes)
    answer = answer_of(result, judge(detect_item(result, job)), text_bytes)
    return kept_body(answer, result, job)  # a start page discovery reads: its body too


class _Worker:
    """The process's event loop side: read batches, poll them (every batch's polls share the
    fetcher's runners, host by host), write the answers of each batch, in the order the
    batches came, once they are all in (or deferred at its deadline)."""

    def __init__(self, fetcher: Fetcher, text_bytes: int | None) -> None:
        self.text_bytes = text_bytes
        self.engine = PollEngine(fetcher, self._finish, per_turn=True)
        self.batches: deque[tuple[int, Batch]] = deque()
        self.carrying: dict[int, Batch] = {}  # token -> a batch whose polls outlive it
        self.more = asyncio.Event()

    def _finish(self, batch: Batch, j: int, result: FetchResult) -> None:
        batch.set(j, poll_answer(result, batch.jobs[j], self.text_bytes))

    def add(
        self, left: float | None, jobs: list[PollJob], linger: float | None = None, token: int = 0
    ) -> None:
        """Start polling a batch."""
        self.batches.append((token, self.engine.add(jobs, left, None, linger)))
        self.more.set()

    def cut(self, token: int, reason: str) -> None:
        """End the carried polls of the batch ``token`` now."""
        batch = self.carrying.pop(token, None)
        if batch is None:  # not answered yet (the service stopped waiting early)
            batch = next((b for t, b in self.batches if t == token), None)
        if batch is not None:
            self.engine.cut(batch, reason)

    async def read(self, reader: asyncio.StreamReader) -> None:
        """Start every batch as it arrives, until the input closes."""
        while (payload := await read_frame_async(reader)) is not None:
            left, linger, token, jobs = pickle.loads(payload)
            if jobs is None:
                self.cut(token, str(left))
            else:
                self.add(left, jobs_of(jobs), linger, token)

    async def write(self, sink_fd: int) -> None:
        """Answer the batches in the order they came (blocking writes: the service reads its
        end of the pipe all the time; a closed end ends this process); then the answers of
        their carried polls, one frame each, as they come."""
        while True:
            while not self.batches:
                self.more.clear()
                await self.more.wait()
            token, batch = self.batches[0]
            await batch.done
            self.batches.popleft()
            jobs = batch.jobs
            answers: list[Any] = [
                a if a is not None else running_answer(jobs[j]) for j, a in enumerate(batch.answers)
            ]
            write_frame(sink_fd, pickle.dumps(plain(answers), pickle.HIGHEST_PROTOCOL))
            if batch.carried:
                self.carrying[token] = batch
                batch.sink = self._late_writer(sink_fd, token, batch)

    def _late_writer(self, sink_fd: int, token: int, batch: Batch) -> Callable[[PollAnswer], None]:
        def late(answer: PollAnswer) -> None:
            frame = (token, plain([answer]))
            write_frame(sink_fd, pickle.dumps(frame, pickle.HIGHEST_PROTOCOL))
            if batch.finished:
                self.carrying.pop(token, None)

        return late


async def _serve(source_fd: int, sink_fd: int, config: FetchConfig, text_bytes: int | None) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    source = open(source_fd, "rb", buffering=0)  # noqa: SIM115 (the transport closes it)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), source
    )
    async with Fetcher(config) as fetcher:
        worker = _Worker(fetcher, text_bytes)
        writer = asyncio.ensure_future(worker.write(sink_fd))
        try:
            await worker.read(reader)
        finally:
            writer.cancel()
            worker.engine.close()
            with contextlib.suppress(BaseException):
                await asyncio.gather(writer, return_exceptions=True)
            transport.close()


def serve(
    requests: Connection, answers: Connection, config: FetchConfig, text_bytes: int | None
) -> None:
    """Worker entry point (a spawned process): poll batches until the input closes."""
    source_fd, sink_fd = own_fd(requests), own_fd(answers)
    tune_gc(collect=False)  # nothing to collect yet: only imports ran
    try:
        asyncio.run(_serve(source_fd, sink_fd, config, text_bytes))
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        with contextlib.suppress(OSError):
            os.close(sink_fd)
