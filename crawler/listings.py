"""Sitemaps and feeds read in a worker process, with a deadline, off the event loop.

The service's discovery reads every sitemap and feed it fetches (``crawler.discovery``'s
``read_listing``: bytes in, entries out). Read on the event loop, a hostile listing stalled
every slot: a gzip body of a few hundred KB inflating to a valid 49 MB sitemap took the loop
4.7 s and the process 300 MB more (the whole document built, then cut to its first entries); a
5 MB feed of 100,000 items blocked the loop 8-12 s a read. The reader now streams and stops at
its caps (``crawler.discovery``), and runs here, in one worker process of its own:

- **A process, not a thread.** Parsing is pure Python (expat's callbacks, feedparser), so a
  thread holds the GIL for most of it and the loop still waits. Measured with
  ``benchmarks/listing_reads.py`` (the longest event-loop stall while one listing is read,
  median of 3 interleaved rounds, the machine shared with other jobs): the 49 MB sitemap,
  streamed to 50,000 entries, 1.8 s inline, 0.14 s in a thread, 0.027 s in the process; the
  100,000-item feed, cut at 1,000 items, 0.43 s inline, 0.031 s in a thread, 0.018 s in the
  process (what is left is the pickling of the body and of the answer). The process costs
  about 40 MB (``crawler.discovery`` and its imports, not the service's) and a second to
  start, once, with the service when it has sources.
- **A deadline** (``timeout_s``). A read that takes longer is abandoned: the worker is killed
  (it is busy in C or Python code that cannot be interrupted otherwise) and started again for
  the next read, and the read is a failure (``timeout``) of that listing, never a crash. A
  worker that dies (its memory limit, a crash in a C library) fails the read with
  ``worker_lost`` the same way.
- **The pipe protocol** is ``crawler.ipc``'s (the judging and crawl workers' own), driven by
  the event loop without helper threads; requests and answers are small pickles (a body of at
  most the fetcher's bound; at most ``newest`` entries back).

The worker imports only ``crawler.discovery`` and ``crawler.ipc``, not the service: it starts
in a second with a third of the service's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from crawler.discovery import Listed, Listing, SitemapError, read_listing
from crawler.ipc import (
    PipeWorker,
    WorkerLostError,
    encode_pickle,
    frame_header,
    own_fd,
    preload,
    read_frame,
)

#: the longest the worker may take to start and answer its first (empty) request
START_TIMEOUT_S = 60.0

# The fork server (started by whichever worker comes first) imports this module: each listing
# worker is then a fork of it, not an import of the parsers, at its start and after every
# read killed at its deadline.
preload(__name__)

#: a read's answer: ("ok", kind, ((url, lastmod), ...), truncated, too_large) or
#: ("error", reason, detail)
Answer = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class ListingLimits:
    """What one read may cost: inflated bytes, entries read, entries kept (the most recent)."""

    max_bytes: int
    max_entries: int
    newest: int


def read_one(body: bytes, base_url: str, limits: ListingLimits) -> Answer:
    """One listing read, as a compact answer (what the worker sends back)."""
    listing = read_listing(
        body,
        base_url,
        max_bytes=limits.max_bytes,
        max_entries=limits.max_entries,
        newest=limits.newest,
    )
    if isinstance(listing, SitemapError):
        return ("error", listing.reason, listing.detail)
    items = tuple((item.url, item.lastmod) for item in listing.items)
    return ("ok", listing.kind, items, listing.truncated, listing.too_large)


def answer_of(answer: Answer) -> Listing | SitemapError:
    """The listing (or its error) from a compact answer."""
    if answer[0] == "error":
        return SitemapError(str(answer[1]), str(answer[2]))
    items = tuple(Listed(url, lastmod) for url, lastmod in answer[2])
    return Listing(answer[1], items, bool(answer[3]), bool(answer[4]))


def serve(requests: Connection, answers: Connection) -> None:
    """Worker entry point (a spawned process): read listings until the input closes. A
    request is a pickled list of ``(body, base_url, limits)``; the answer, their answers."""
    source_fd, sink_fd = own_fd(requests), own_fd(answers)
    try:
        with open(source_fd, "rb", buffering=1 << 20) as source, open(sink_fd, "wb") as sink:
            while (payload := read_frame(source)) is not None:
                jobs = pickle.loads(payload)
                out = pickle.dumps([read_one(*job) for job in jobs], pickle.HIGHEST_PROTOCOL)
                sink.write(frame_header(len(out)))
                sink.write(out)
                sink.flush()
    except BrokenPipeError:
        # The reader stopped (the service is stopping) while an answer was on its way: nobody
        # is left to tell. Caught around the files too, since closing the sink flushes what
        # the failed write left in its buffer and fails again.
        return


class ListingReader:
    """Reads listings in a worker process of its own, one at a time, each within
    ``timeout_s``; the worker is started at the first read (or by :meth:`start`)."""

    def __init__(self, limits: ListingLimits, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.limits = limits
        self.timeout_s = timeout_s
        self._worker: PipeWorker | None = None
        self._ready: asyncio.Future[list[Any]] | None = None
        self._lock: asyncio.Lock | None = None
        #: reads asked, reads abandoned at the deadline, workers lost, since the start
        self.reads = 0
        self.timeouts = 0
        self.lost = 0

    def start(self) -> None:
        """Start the worker now (it takes a second) if it is not running."""
        if self._worker is None or not self._worker.alive:
            self._worker = PipeWorker(asyncio.get_running_loop(), serve, encode_pickle)
            self._ready = self._worker.submit([])

    async def ready(self) -> bool:
        """Start the worker and wait until it answers; False when it did not start."""
        self.start()
        ready = self._ready
        assert ready is not None
        try:
            await asyncio.wait_for(asyncio.shield(ready), START_TIMEOUT_S)
        except (TimeoutError, WorkerLostError):
            self._discard()
            return False
        return True

    async def read(self, body: bytes, base_url: str) -> Listing | SitemapError:
        """The listing ``body`` holds, or why it could not be read (``timeout`` past the
        deadline, ``worker_lost`` when the worker died)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # one read at a time: the deadline is the read's own
            if not await self.ready():
                return SitemapError("worker_lost", "the listing worker did not start")
            worker = self._worker
            assert worker is not None
            self.reads += 1
            future = worker.submit([(body, base_url, self.limits)])
            try:
                answers = await asyncio.wait_for(future, self.timeout_s)
            except TimeoutError:
                self.timeouts += 1
                self._discard()
                return SitemapError("timeout", f"not read within {self.timeout_s:g} s")
            except WorkerLostError as exc:
                self.lost += 1
                self._discard()
                return SitemapError("worker_lost", str(exc))
            return answer_of(answers[0])

    def _discard(self) -> None:
        """Kill the worker (busy with a read past its deadline, or gone); the next read
        starts another."""
        worker, self._worker, self._ready = self._worker, None, None
        if worker is None:
            return
        with contextlib.suppress(OSError):
            worker.process.kill()
        worker.close(wait=False)

    def close(self) -> None:
        """Stop the worker: it leaves by itself when idle; one busy with a read is killed."""
        worker, self._worker, self._ready = self._worker, None, None
        if worker is None:
            return
        if worker.load:
            with contextlib.suppress(OSError):
                worker.process.kill()
        worker.close(wait=not worker.load)
