"""ChangeDetector: the exact pre-check in the caller, the rest batched over worker processes."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from crawler.detect._judge import DetectItem, Verdict, judge_batch, precheck

log = logging.getLogger(__name__)

#: Linux fcntl F_SETPIPE_SZ, and the pipe size asked for the pool's call queue
_F_SETPIPE_SZ = 1031
_CALL_PIPE_BYTES = 1 << 20


def _widen_pipe(pool: ProcessPoolExecutor) -> None:
    """Enlarge the pipe that carries the batches (~0.5 MB of bodies each) to the workers, so
    one is written in one system call instead of 64 KB at a time with a wake-up per piece.
    Best effort: where it is not possible (not Linux, a lower pipe-max-size) nothing changes."""
    try:
        import fcntl

        writer = pool._call_queue._writer  # type: ignore[attr-defined]
        fcntl.fcntl(writer.fileno(), _F_SETPIPE_SZ, _CALL_PIPE_BYTES)
    except (ImportError, AttributeError, OSError, ValueError):
        pass


class ChangeDetector:
    """Judges batches of fetched bodies.

    ``workers``: processes for normalization (None = one per CPU, 0 = inline in the caller's
    thread). Bodies whose raw bytes equal the previous version are answered in the caller
    without parsing; the others go to the pool in ``workers * 2`` chunks (batches smaller than
    ``min_pool_batch`` are judged inline: the IPC would cost more than it saves).
    """

    def __init__(self, workers: int | None = None, *, min_pool_batch: int = 4) -> None:
        if workers is None:
            workers = os.cpu_count() or 1
        if workers < 0:
            raise ValueError("workers must be >= 0")
        self.workers = workers
        self.min_pool_batch = min_pool_batch
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers, mp_context=multiprocessing.get_context("spawn")
            )
            _widen_pipe(self._pool)
        return self._pool

    async def start(self) -> None:
        """Start the worker processes now (they take a second or two to spawn)."""
        if self.workers == 0:
            return
        loop = asyncio.get_running_loop()
        pool = self._executor()
        await asyncio.gather(
            *(loop.run_in_executor(pool, judge_batch, []) for _ in range(self.workers))
        )

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
        chunks = max(1, min(len(batch), self.workers * 2))
        size = -(-len(batch) // chunks)
        loop = asyncio.get_running_loop()
        try:
            pool = self._executor()
            parts = await asyncio.gather(
                *(
                    loop.run_in_executor(pool, judge_batch, batch[k : k + size])
                    for k in range(0, len(batch), size)
                )
            )
        except BrokenProcessPool:
            log.warning("change-detection worker pool broke; judging this batch inline")
            self._shutdown(wait=False)
            return judge_batch(batch)
        return [verdict for part in parts for verdict in part]

    def _shutdown(self, wait: bool) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        """Stop the worker processes (idempotent)."""
        self._shutdown(wait=True)

    def __enter__(self) -> ChangeDetector:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
