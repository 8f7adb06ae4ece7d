"""ChangeDetector: the exact pre-check in the caller, the rest batched over worker processes."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from crawler.detect._judge import DetectItem, Verdict, judge_batch, precheck
from crawler.detect._pool import WorkerLostError, WorkerPool
from crawler.detect._worker import job
from crawler.detect._worker import verdict as to_verdict

log = logging.getLogger(__name__)

#: jobs per batch sent to one worker, at least (fewer, larger writes and wake-ups)
_MIN_PART = 16


class ChangeDetector:
    """Judges batches of fetched bodies.

    ``workers``: processes for normalization (None = one per CPU, 0 = inline in the caller's
    thread). Bodies whose raw bytes equal the previous version are answered in the caller
    without parsing; the others go to the pool, split over the least-loaded workers (batches
    smaller than ``min_pool_batch`` are judged inline: the IPC would cost more than it saves).
    The pool is driven by the caller's event loop (no helper threads); it is started on first
    use, and again after a worker died (that batch is judged inline).
    """

    def __init__(self, workers: int | None = None, *, min_pool_batch: int = 4) -> None:
        if workers is None:
            workers = os.cpu_count() or 1
        if workers < 0:
            raise ValueError("workers must be >= 0")
        self.workers = workers
        self.min_pool_batch = min_pool_batch
        self._pool: WorkerPool | None = None

    def _executor(self) -> WorkerPool:
        pool = self._pool
        if pool is not None and not pool.usable:
            self._shutdown(wait=False)
            pool = None
        if pool is None:
            pool = self._pool = WorkerPool(self.workers)
        return pool

    async def start(self) -> None:
        """Start the worker processes now (they take a second or two to spawn)."""
        if self.workers == 0:
            return
        await self._executor().ready()

    def judge_inline(self, items: Sequence[DetectItem]) -> list[Verdict]:
        out: list[Verdict] = []
        for item in items:
            exact, verdict = precheck(item)
            out.append(verdict if verdict is not None else judge_batch([(item, exact)])[0])
        return out

    async def judge_many(self, items: Sequence[DetectItem]) -> list[Verdict]:
        """Verdicts in the same order as ``items``."""
        results: list[Verdict | None] = [None] * len(items)
        pending: list[tuple[int, DetectItem, str]] = []
        for i, item in enumerate(items):
            exact, verdict = precheck(item)
            if verdict is None:
                pending.append((i, item, exact))
            else:
                results[i] = verdict
        if pending:
            for i, verdict in zip(
                [p[0] for p in pending], await self._judge_pending(pending), strict=True
            ):
                results[i] = verdict
        return [v for v in results if v is not None]

    async def _judge_pending(self, pending: list[tuple[int, DetectItem, str]]) -> list[Verdict]:
        batch = [(item, exact) for _, item, exact in pending]
        if self.workers == 0 or len(batch) < self.min_pool_batch:
            return judge_batch(batch)
        jobs = [job(item, exact) for item, exact in batch]
        parts = min(self.workers, max(1, len(jobs) // _MIN_PART))
        try:
            answers = await self._executor().judge(jobs, parts)
        except WorkerLostError:
            log.warning("change-detection worker died; judging this batch inline")
            self._shutdown(wait=False)
            return judge_batch(batch)
        return [to_verdict(a) for a in answers]

    def _shutdown(self, wait: bool) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool.close(wait)

    def close(self) -> None:
        """Stop the worker processes (idempotent)."""
        self._shutdown(wait=True)

    def __enter__(self) -> ChangeDetector:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
