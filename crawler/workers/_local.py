"""The in-process poller: fetch in the service's own process, judge in the detector's pool.

Used with ``fetch_workers = 0`` (one core, or a debugger). Bodies go to the change detector
in batches of ``JUDGE_BATCH`` as they arrive, so its worker processes parse while this
process fetches; each batch's answers are yielded once judged, failed and unchanged-by-304
polls as soon as they are done (in chunks of up to ``JUDGE_BATCH`` too).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence

from crawler.detect import ChangeDetector, DetectItem, WatchRules
from crawler.fetch import FetchConfig, Fetcher, FetchRequest, FetchResult
from crawler.workers._process import answer_of
from crawler.workers._types import PollAnswer, PollJob

#: fetched bodies handed to the change detector at a time, while the slot's fetches go on
JUDGE_BATCH = 64

_NO_RULES = WatchRules()


class InProcessPoller:
    """A ``Poller`` with its own ``Fetcher`` and ``ChangeDetector``."""

    def __init__(
        self, config: FetchConfig, text_bytes: int | None, detector: ChangeDetector
    ) -> None:
        """``text_bytes``: text of changed pages kept per answer (None: none)."""
        self.fetcher = Fetcher(config)
        self.detector = detector
        self.text_bytes = text_bytes

    async def start(self) -> None:
        await self.fetcher.open()

    async def aclose(self) -> None:
        await self.fetcher.close()
        self.detector.close()

    async def poll_chunks(
        self, jobs: Sequence[PollJob]
    ) -> AsyncGenerator[Sequence[PollAnswer], None]:
        fetcher, text_bytes = self.fetcher, self.text_bytes
        chunks: asyncio.Queue[list[PollAnswer] | None] = asyncio.Queue()
        items: list[DetectItem] = []
        held: list[FetchResult] = []
        plain: list[PollAnswer] = []
        judging: list[asyncio.Task[None]] = []

        async def judge(batch: list[DetectItem], results: list[FetchResult]) -> None:
            verdicts = await self.detector.judge_many(batch)
            chunks.put_nowait(
                [answer_of(r, v, text_bytes) for r, v in zip(results, verdicts, strict=True)]
            )

        def submit() -> None:
            nonlocal items, held
            judging.append(asyncio.ensure_future(judge(items, held)))
            items, held = [], []

        async def one(job: PollJob) -> None:
            nonlocal plain
            request = FetchRequest(job.url_id, job.url, job.etag, job.last_modified)
            res = await fetcher.fetch(request)
            if res.outcome != "ok":
                plain.append(answer_of(res, None, text_bytes))
                if len(plain) >= JUDGE_BATCH:
                    chunks.put_nowait(plain)
                    plain = []
                return
            selector, patterns = job.selector, job.ignore_patterns
            rules = (
                _NO_RULES if selector is None and not patterns else WatchRules(selector, patterns)
            )
            items.append(
                DetectItem(
                    res.body, res.content_type, rules, job.previous_hash, job.previous_raw_hash
                )
            )
            held.append(res)
            if len(items) >= JUDGE_BATCH:
                submit()

        async def run() -> None:
            try:
                key = fetcher.gate_key
                dispatch.submit((key(job.url), job) for job in jobs)
                await dispatch.join()
                if items:
                    submit()
                if plain:
                    chunks.put_nowait(plain)
                await asyncio.gather(*judging)
            finally:
                chunks.put_nowait(None)

        # each host's polls in order, by the fetcher's runners (see HostDispatcher)
        dispatch = fetcher.dispatcher(one)
        runner = asyncio.ensure_future(run())
        try:
            while (chunk := await chunks.get()) is not None:
                yield chunk
            await runner  # a failure of the judging is raised here
        finally:
            runner.cancel()
            dispatch.close()
            for task in judging:
                task.cancel()
