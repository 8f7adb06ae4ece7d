"""How often a sitemap or feed is read again: at most as often as it changes (no I/O).

A source's listing (a sitemap, a sitemap index, a feed) is one of its start pages, so its
crawl hands it out again every slot. Reading it every slot costs a download and a parse each
time, and a listing that answers with no validators (no ``ETag``, no ``Last-Modified``) cannot
be asked conditionally. :class:`ListingPacer` keeps, per listing URL:

- the **hash of its raw body** (the caller hashes the bytes before parsing): the same bytes
  again are not parsed again, the links read last time stand;
- its **re-read interval** in slots: 1 after a read that changed it, doubled after each read
  that did not (a 304 or the same hash), up to ``max_interval``. A listing that changes every
  slot is read every slot; one that never changes is read every ``max_interval`` slots. This
  is the back-off of the re-polling literature's simplest form (double on no change, reset on
  change), chosen over a learned rate because a listing is one URL per source and its reads
  are cheap once unchanged ones are skipped; the cap bounds how late a change is seen;
- whether its **last read failed** (refused by robots.txt, a 4xx or 5xx, a body that could not
  be read, a sitemap index that loops back to itself), and the reason: a failing listing is
  read again at doubling intervals too (from 2 slots), and :meth:`failed` says whether this
  failure is the first of a run, so the caller warns once and logs the rest at DEBUG.

While a listing is not due, the caller answers its crawl from what it knows (the links read
last time, or a failed fetch) without a request. At most ``max_urls`` listings are remembered
(the least recently read forgotten first): a forgotten one is simply due.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

MAX_INTERVAL_SLOTS = 16
MAX_LISTINGS = 10_000


@dataclass
class _Paced:
    digest: bytes | None = None
    interval: int = 1
    due: int = 0  # the first slot it may be read again
    failing: str | None = None  # the reason of the last read, when it failed


class ListingPacer:
    """Per listing URL: its body's hash, its re-read interval, its failure run."""

    def __init__(self, max_interval: int = MAX_INTERVAL_SLOTS, max_urls: int = MAX_LISTINGS):
        if max_interval < 1 or max_urls < 1:
            raise ValueError("max_interval and max_urls must be >= 1")
        self.max_interval = max_interval
        self.max_urls = max_urls
        self._paced: OrderedDict[str, _Paced] = OrderedDict()

    def __contains__(self, url: object) -> bool:
        return url in self._paced

    def __len__(self) -> int:
        return len(self._paced)

    def due(self, url: str, slot: int) -> bool:
        """Whether ``url`` may be read in ``slot`` (an unknown URL always may)."""
        paced = self._paced.get(url)
        return paced is None or slot >= paced.due

    def interval(self, url: str) -> int:
        """Its current re-read interval in slots (1 when unknown)."""
        paced = self._paced.get(url)
        return 1 if paced is None else paced.interval

    def failing(self, url: str) -> str | None:
        """The reason its last read failed; None when it did not (or is unknown)."""
        paced = self._paced.get(url)
        return None if paced is None else paced.failing

    def same_body(self, url: str, digest: bytes) -> bool:
        """Whether ``digest`` is the hash of the body read last time."""
        paced = self._paced.get(url)
        return paced is not None and paced.digest == digest

    def changed(self, url: str, slot: int, digest: bytes) -> None:
        """Read with a new body: read again in the next slot."""
        paced = self._entry(url)
        paced.digest, paced.interval, paced.failing = digest, 1, None
        paced.due = slot + 1

    def unchanged(self, url: str, slot: int) -> None:
        """Read and found unchanged (a 304 or the same body): the interval doubles."""
        paced = self._entry(url)
        paced.interval = min(self.max_interval, paced.interval * 2)
        paced.failing = None
        paced.due = slot + paced.interval

    def failed(self, url: str, slot: int, reason: str, digest: bytes | None = None) -> bool:
        """The read failed: the interval doubles (from 2); ``digest``: the hash of the body
        that failed (the same bytes then fail again unread). True when this is the first
        failure of a run (warn), False when the last read failed too (log at DEBUG)."""
        paced = self._entry(url)
        paced.digest = digest
        first = paced.failing is None
        paced.interval = 2 if first else min(self.max_interval, paced.interval * 2)
        paced.failing = reason
        paced.due = slot + paced.interval
        return first

    def forget(self, url: str) -> None:
        self._paced.pop(url, None)

    def _entry(self, url: str) -> _Paced:
        paced = self._paced.get(url)
        if paced is None:
            paced = self._paced[url] = _Paced()
            while len(self._paced) > self.max_urls:
                self._paced.popitem(last=False)
        self._paced.move_to_end(url)
        return paced
