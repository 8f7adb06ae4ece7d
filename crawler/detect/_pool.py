"""A pool of judging processes driven by the event loop itself (see ``crawler.ipc``).

A worker that dies fails its outstanding batches with ``WorkerLostError``; the pool is then
discarded and the caller judges inline.
"""

from __future__ import annotations

import asyncio
from typing import Any

from crawler.detect._worker import encode_jobs, serve
from crawler.ipc import PipeWorker, WorkerLostError, preload

preload(serve.__module__)  # in the fork server whichever worker starts it

__all__ = ["PipeWorker", "WorkerLostError", "WorkerPool"]


class WorkerPool:
    """``size`` judging processes bound to the running event loop."""

    def __init__(self, size: int) -> None:
        self.loop = asyncio.get_running_loop()
        self.workers = [PipeWorker(self.loop, serve, encode_jobs) for _ in range(size)]

    @property
    def usable(self) -> bool:
        return all(w.alive for w in self.workers) and asyncio.get_running_loop() is self.loop

    async def ready(self) -> None:
        """Wait until every worker answers (spawning takes a second or two)."""
        await asyncio.gather(*(w.submit([]) for w in self.workers))

    async def judge(self, jobs: list[Any], parts: int) -> list[Any]:
        """The answers of ``jobs``, in order, split in up to ``parts`` batches over the
        least-loaded workers. Raises ``WorkerLostError`` if a worker died meanwhile."""
        parts = max(1, min(parts, len(jobs)))
        size = -(-len(jobs) // parts)
        futures = []
        for k in range(0, len(jobs), size):
            worker = min(self.workers, key=_load)
            futures.append(worker.submit(jobs[k : k + size]))
        done: list[Any] = await asyncio.gather(*futures)
        return [a for part in done for a in part]

    def close(self, wait: bool = True) -> None:
        for worker in self.workers:
            worker.close(wait)


def _load(worker: PipeWorker) -> int:
    return worker.load if worker.alive else 1 << 62
