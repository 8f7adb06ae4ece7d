"""The in-process poller: fetch in the service's own process, judge in the detector's pool.

Used with ``fetch_workers = 0`` (one core, or a debugger). The polls run on the same engine
as a crawl worker's (``crawler.workers._engine``: the dispatcher, the deadline). Bodies go to
the change detector in batches of ``JUDGE_BATCH`` as they arrive (or after ``JUDGE_WAIT_S``,
when slow hosts keep a batch from filling), so its worker processes parse while this process
fetches; answers are yielded as they are set, up to ``JUDGE_BATCH`` at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Sequence

from crawler.detect import ChangeDetector, DetectItem
from crawler.fetch import FetchConfig, Fetcher, FetchResult
from crawler.workers._answers import (
    answer_of,
    body_answer,
    detect_item,
    failed_answer,
    kept_body,
)
from crawler.workers._engine import Batch, PollEngine
from crawler.workers._types import PollAnswer, PollJob

log = logging.getLogger("crawler.service")

#: fetched bodies handed to the change detector at a time, while the slot's fetches go on
JUDGE_BATCH = 64
#: the longest a fetched body waits for more to make up a batch (slow hosts in the same slot)
JUDGE_WAIT_S = 0.05


class InProcessPoller:
    """A ``Poller`` with its own ``Fetcher`` and ``ChangeDetector``."""

    def __init__(
        self, config: FetchConfig, text_bytes: int | None, detector: ChangeDetector
    ) -> None:
        """``text_bytes``: text of changed pages kept per answer (None: none)."""
        self.fetcher = Fetcher(config)
        self.detector = detector
        self.text_bytes = text_bytes
        self.engine = PollEngine(self.fetcher, self._finish)
        self._items: list[DetectItem] = []
        self._held: list[tuple[Batch, int, FetchResult]] = []
        self._judging: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        # the judging pool too, now: started at the first slot's first judging, its spawn
        # took that slot's deadline on a busy machine and the slot judged nothing
        await asyncio.gather(self.fetcher.open(), self.detector.start())

    async def aclose(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.engine.close()
        for task in self._judging:
            task.cancel()
        await self.fetcher.close()
        self.detector.close()

    def _finish(self, batch: Batch, j: int, result: FetchResult) -> None:
        if batch.jobs[j].want_body:  # a discovery poll: not judged, the body goes back
            batch.set(j, body_answer(result))
            return
        if result.outcome != "ok":
            batch.set(j, answer_of(result, None, self.text_bytes))
            return
        self._items.append(detect_item(result, batch.jobs[j]))
        self._held.append((batch, j, result))
        batch.held += 1
        if len(self._items) >= JUDGE_BATCH or batch.held >= batch.left:
            self._judge()  # a full batch, or nothing else of this batch to wait for
        elif self._timer is None:  # a partial batch waits JUDGE_WAIT_S at most
            self._timer = asyncio.get_running_loop().call_later(JUDGE_WAIT_S, self._judge)

    def _judge(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        items, held = self._items, self._held
        if not items:
            return
        self._items, self._held = [], []
        task = asyncio.ensure_future(self._judge_batch(items, held))
        self._judging.add(task)
        task.add_done_callback(self._judging.discard)

    async def _judge_batch(
        self, items: list[DetectItem], held: list[tuple[Batch, int, FetchResult]]
    ) -> None:
        try:
            verdicts = await self.detector.judge_many(items)
        except Exception as exc:  # a bug: these polls fail, the others go on
            log.exception("judging %d pages failed", len(items))
            for batch, j, _ in held:
                batch.held -= 1
                batch.set(j, failed_answer(batch.jobs[j], f"judging failed: {exc!r:.200}"))
            return
        for batch, _, _ in held:
            batch.held -= 1
        text_bytes = self.text_bytes
        for (batch, j, result), verdict in zip(held, verdicts, strict=True):
            answer = answer_of(result, verdict, text_bytes)
            batch.set(j, kept_body(answer, result, batch.jobs[j]))  # a start page: its body too

    async def poll_chunks(
        self, jobs: Sequence[PollJob], deadline: float | None = None, linger: float | None = None
    ) -> AsyncGenerator[Sequence[PollAnswer], None]:
        fresh: asyncio.Queue[PollAnswer] = asyncio.Queue()
        left = None if deadline is None else deadline - time.monotonic()
        batch = self.engine.add(jobs, left, fresh.put_nowait, linger)
        got = 0  # final answers ("running" is a placeholder: the answer follows)
        try:
            while got < len(jobs):
                chunk = [await fresh.get()]
                while not fresh.empty() and len(chunk) < JUDGE_BATCH:
                    chunk.append(fresh.get_nowait())
                got += sum(a.outcome != "running" for a in chunk)
                yield chunk
        finally:
            if not batch.finished:  # closed early: nothing of this batch goes on
                batch.sink = None
                self.engine.cut(batch)
