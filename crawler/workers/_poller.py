"""The one contract between the crawl loop and whatever fetches and judges its polls.

The loop hands a slot's ``PollJob``s to a ``Poller`` and records the ``PollAnswer``s chunk by
chunk as they come; it does not know (and never branches on) where the work is done. Two
implementations, chosen by the ``fetch_workers`` setting when the service is built (as a
crawler engine loads its downloader class from its settings, ``crawler.service`` picks the
class; nothing else names them):

* ``InProcessPoller`` (``fetch_workers = 0``): fetches in the service's own process and judges
  in the change detector's pool;
* ``CrawlWorkers`` (``fetch_workers >= 1``): worker processes that each own a share of the
  hosts and fetch and judge there.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Protocol

from crawler.workers._types import PollAnswer, PollJob


class Poller(Protocol):
    """Fetches and judges polls. ``start`` before the first slot, ``aclose`` at the end."""

    async def start(self) -> None:
        """Get ready (start processes, open connections); later polls do not wait for it."""

    def poll_chunks(
        self, jobs: Sequence[PollJob], deadline: float | None = None, linger: float | None = None
    ) -> AsyncGenerator[Sequence[PollAnswer], None]:
        """Every job's answer, a chunk at a time in no particular order, as they come (an
        async generator). What is not done by ``deadline`` (a ``time.monotonic()`` time; None:
        none) is answered as deferred right then; with ``linger`` (seconds), a poll then in
        flight is answered "running" right then and goes on for up to ``linger`` seconds
        more, its own answer following in the same stream. Closing the generator early cuts
        every poll of it (queued, in flight, carried)."""
        ...

    async def aclose(self) -> None:
        """Release everything (idempotent)."""
