"""A crawl worker process: fetch a batch of URLs and judge the bodies, all in this process.

The service's own process keeps the scheduler, the database and the metrics; the fetching
(aiohttp's request and response handling is most of a poll's CPU) and the change detection run
here, so both fit on more than one core. Each worker owns a fixed share of the hosts (the
coordinator sends a host's URLs to one worker only), so its ``Fetcher`` keeps exact per-host
politeness, robots.txt and back-off state, as the in-process fetcher does.

Wire format, both ways: ``crawler.ipc``'s frames (an 8-byte big-endian length, then a
pickle). A request is a list of ``PollJob``s; the answer is the list of
``PollAnswer``s in the same order (no bodies: only what the service records), both pickled as
plain tuples (see ``crawler.workers._types``). Batches are
worked concurrently (their polls share the fetcher's dispatcher) and answered in the order
they came. The worker leaves when its input
closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
from collections import deque
from multiprocessing.connection import Connection

from crawler.detect import DetectItem, Verdict, WatchRules
from crawler.detect._judge import judge
from crawler.fetch import FetchConfig, Fetcher, FetchRequest, FetchResult, HostDispatcher
from crawler.gc_policy import tune_gc
from crawler.ipc import encode_pickle, own_fd, read_frame_async, write_frame
from crawler.workers._types import PollAnswer, PollJob, jobs_of, plain

_NO_RULES = WatchRules()


def encode_polls(jobs: list[PollJob]) -> list[bytes]:
    """A request frame as parts for ``os.writev``."""
    return encode_pickle(plain(jobs))


def poll_answer(result: FetchResult, job: PollJob, text_bytes: int | None) -> PollAnswer:
    """What the service records of one poll: the fetch result without its body, and the
    verdict of the body (``text`` of a changed page kept up to ``text_bytes``; None = none)."""
    if result.outcome != "ok":
        return answer_of(result, None, text_bytes)
    selector, patterns = job.selector, job.ignore_patterns
    rules = _NO_RULES if selector is None and not patterns else WatchRules(selector, patterns)
    item = DetectItem(
        result.body, result.content_type, rules, job.previous_hash, job.previous_raw_hash
    )
    verdict = judge(item)
    return answer_of(result, verdict, text_bytes)


def answer_of(result: FetchResult, verdict: Verdict | None, text_bytes: int | None) -> PollAnswer:
    """The answer of a fetch result and the verdict of its body (None unless "ok")."""
    r = result
    if verdict is None:
        return PollAnswer(
            r.url_id, r.outcome, r.status, r.content_type, r.etag, r.last_modified, r.error_kind,
            r.error, r.duration_s, r.bytes_received, r.retry_after_s, r.final_url,
            None, None, None, None, None,
        )  # fmt: skip
    v = verdict
    text = v.text[:text_bytes] if v.text is not None and text_bytes is not None else None
    return PollAnswer(
        r.url_id, r.outcome, r.status, r.content_type, r.etag, r.last_modified, r.error_kind,
        r.error, r.duration_s, r.bytes_received, r.retry_after_s, r.final_url,
        v.content_hash, v.raw_hash, v.changed, text, v.parsed,
    )  # fmt: skip


def failed_answer(job: PollJob, message: str) -> PollAnswer:
    """An error answer (kind "other") for a poll that could not be done."""
    return PollAnswer(
        job.url_id, "error", None, None, None, None, "other", message, 0.0, 0, None, job.url,
        None, None, None, None, None,
    )  # fmt: skip


class _Batch:
    """One request frame: its jobs, their answers as they come, and when all are in."""

    __slots__ = ("answers", "done", "jobs", "left")

    def __init__(self, jobs: list[PollJob], done: asyncio.Future[None]) -> None:
        self.jobs = jobs
        self.answers: list[PollAnswer | None] = [None] * len(jobs)
        self.left = len(jobs)
        self.done = done
        if not jobs:
            done.set_result(None)


class _Worker:
    """The process's event loop side: read batches, hand their polls to the fetcher's
    dispatcher (every batch's polls share its runners, host by host), write the answers of each
    batch, in the order the batches came, once they are all in."""

    def __init__(self, fetcher: Fetcher, text_bytes: int | None) -> None:
        self.fetcher = fetcher
        self.text_bytes = text_bytes
        self.dispatch: HostDispatcher[tuple[_Batch, int]] = fetcher.dispatcher(self._poll)
        self.batches: deque[_Batch] = deque()
        self.more = asyncio.Event()

    def add(self, jobs: list[PollJob]) -> None:
        """Start polling a batch."""
        batch = _Batch(jobs, asyncio.get_running_loop().create_future())
        key = self.fetcher.gate_key
        self.dispatch.submit((key(job.url), (batch, j)) for j, job in enumerate(jobs))
        self.batches.append(batch)
        self.more.set()

    async def _poll(self, item: tuple[_Batch, int]) -> None:
        batch, j = item
        job = batch.jobs[j]
        try:
            request = FetchRequest(job.url_id, job.url, job.etag, job.last_modified)
            result = await self.fetcher.fetch(request)
            batch.answers[j] = poll_answer(result, job, self.text_bytes)
        except Exception as exc:  # a bug, not a network problem: one failed poll
            batch.answers[j] = failed_answer(job, f"crawl worker: {type(exc).__name__}: {exc}")
        batch.left -= 1
        if not batch.left:
            batch.done.set_result(None)

    async def read(self, reader: asyncio.StreamReader) -> None:
        """Start every batch as it arrives, until the input closes."""
        while (payload := await read_frame_async(reader)) is not None:
            self.add(jobs_of(pickle.loads(payload)))

    async def write(self, sink_fd: int) -> None:
        """Answer the batches in the order they came (blocking writes: the service reads its
        end of the pipe all the time; a closed end ends this process)."""
        while True:
            while not self.batches:
                self.more.clear()
                await self.more.wait()
            batch = self.batches[0]
            await batch.done
            self.batches.popleft()
            answers = plain(batch.answers)  # type: ignore[arg-type]
            write_frame(sink_fd, pickle.dumps(answers, pickle.HIGHEST_PROTOCOL))


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
            worker.dispatch.close()
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
