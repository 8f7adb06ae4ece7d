"""What a poll is asked and what it answers: ``PollJob`` in, ``PollAnswer`` out.

Both are ``NamedTuple``s: read by name (``answer.content_hash``), and as cheap to read as the
plain tuples they replaced (an attribute read is ~35 ns against ~28 ns for an index, both
dwarfed by the rest of a poll). They cross the crawl workers' pipes as *plain* tuples,
though: pickling a NamedTuple names its class and rebuilds it through ``__new__``, measured at
2.6 us + 0.9 us per answer against 0.5 us + 0.14 us for a plain tuple (17 fields, Python 3.11),
so the sender strips the class (``tuple(answer)`` is not even needed: ``plain`` below) and the
receiver puts it back with ``tuple.__new__`` (~0.2 us per answer).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

#: why a poll was deferred (answered without being made), as the metrics count them
DEFERRED_REASONS: dict[str, str] = {
    "politeness": "queued behind its host's concurrency or delay (Crawl-delay) at the deadline",
    "backoff": "its host is backed off after a 429 or 503 with Retry-After",
    "timeout": "still in flight at the slot's deadline (a slow or trickling host)",
    "shutdown": "still in flight when the service was told to stop",
    "lease": "not sent, or cancelled, when this cluster worker passed its renew deadline",
}


class PollJob(NamedTuple):
    """One poll to make: the URL, its validators, its watch rules and its last hashes."""

    url_id: int
    url: str
    #: the store's ``host[:port]`` of the URL (who owns the host: see ``crawler.sites``)
    host: str
    etag: str | None
    last_modified: str | None
    selector: str | None
    ignore_patterns: tuple[str, ...]
    previous_hash: str | None
    previous_raw_hash: str | None
    #: a discovery poll (crawler.service._discovery): not judged, the body comes back in
    #: ``PollAnswer.body`` (the links are what it is for)
    want_body: bool = False
    #: a re-polling poll of a page discovery reads links from (a source's start page): judged
    #: as usual, and when it changed (or is a first poll) its body comes back in
    #: ``PollAnswer.body`` too (crawler.service._discovery: the scheduler's hits feed discovery)
    keep_body: bool = False
    #: when (``time.time()``) another process that polled the URL's host last asked it,
    #: the host having been handed over to this one since (a cluster worker gaining a
    #: site): the fetcher starts no request to the host before this plus the host's
    #: delay (None: no hand-over)
    handed_over_at: float | None = None


class PollAnswer(NamedTuple):
    """What the service records of one poll (no body). The five verdict fields are None
    unless ``outcome`` is "ok"; ``text`` is the readable text of a changed page or of a first
    poll (a line per block element: docs/history.md), when kept. A poll not
    made has ``outcome`` "deferred" and the reason in ``deferred``; a poll still in flight at
    a lingering deadline has ``outcome`` "running" (a placeholder: its answer follows)."""

    url_id: int
    #: the fetch outcome: "ok", "not_modified" or "error" (or "deferred", "running")
    outcome: str
    status: int | None
    content_type: str | None
    etag: str | None
    last_modified: str | None
    error_kind: str | None
    error: str | None
    duration_s: float
    bytes_received: int
    retry_after_s: float | None
    final_url: str
    content_hash: str | None
    raw_hash: str | None
    #: None: a first poll (a baseline), else whether the page changed
    changed: bool | None
    text: bytes | None
    parsed: bool | None
    #: not polled now, and why (``DEFERRED_REASONS``): no outcome, no feedback, not an error
    deferred: str | None = None
    #: the page was judged cut at a parse limit (a change past the cut goes unseen)
    truncated: bool = False
    #: the host's delay between requests when robots.txt raised it (Crawl-delay), else None
    #: (what the service derives its host caps from: ``crawler.service._caps``)
    host_delay_s: float | None = None
    #: the response body of a ``want_body`` job that was fetched ("ok"), else None
    body: bytes | None = None
    #: the response's ``Date`` header, None when it sent none (or the poll failed): its
    #: ``Last-Modified`` is read against it (crawler.service._last_change)
    date: str | None = None


_new = tuple.__new__


def plain(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``rows`` as plain tuples, for a pickle that does not name their class."""
    return [_new(tuple, r) for r in rows]


def answers_of(rows: Iterable[tuple[Any, ...]]) -> list[PollAnswer]:
    """Plain tuples back as ``PollAnswer``s (no copy of the fields, no checks)."""
    return [_new(PollAnswer, r) for r in rows]


def jobs_of(rows: Iterable[tuple[Any, ...]]) -> list[PollJob]:
    """Plain tuples back as ``PollJob``s."""
    return [_new(PollJob, r) for r in rows]
