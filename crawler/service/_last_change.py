"""A poll's version age from the page's ``Last-Modified``, when it is believable.

A page's ``Last-Modified`` tells the scheduler more than the poll's hit or miss: a first poll
learns that the version it saw has not changed for that long, and a poll that found a change
learns when it happened. Real servers often send a ``Last-Modified`` that says nothing (the
response time of a page generated for every request) or that moves while the page does not,
so a URL's header is believed only while its polls bear it out (docs/detect.md,
"Last-Modified: the version's age"):

- it is read against the response's own ``Date`` (the server's clock: no skew), and is
  never later than it (by more than ``NOW_S``: both have whole seconds);
- a poll that found the page unchanged (a miss, a 304) must show the same ``Last-Modified``
  as the poll before, and not one within ``NOW_S`` of its ``Date`` (a page "generated now");
- a poll that found a change must show a ``Last-Modified`` later than the poll before's;
- a URL that broke a rule once is distrusted for as long as this process runs.

HTTP dates have whole seconds: the age is ``Date - Last-Modified`` less one second (at most
the error of the two), in slots. A first poll whose version is at most ``NOW_S`` old says
nothing (it cannot be told from a page generated now). Misses need no age: their interval
already says that nothing changed.
"""

from __future__ import annotations

import math
from datetime import UTC
from email.utils import parsedate_to_datetime
from functools import lru_cache

from crawler.service._records import changed_of
from crawler.store import UrlRecord
from crawler.workers import PollAnswer

#: a Last-Modified within this many seconds of the response's Date: "generated now"
NOW_S = 1.0
#: the error of ``Date - Last-Modified`` with whole-second dates, taken off every age
RESOLUTION_S = 1.0


@lru_cache(maxsize=8192)
def http_time(value: str) -> float | None:
    """An HTTP date (RFC 9110: IMF-fixdate and the obsolete forms) as a POSIX time; None
    when it is not one. Cached: a URL's Last-Modified repeats at every poll that found no
    change, and a busy slot's Dates share their seconds."""
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, no zone said (RFC 5322)
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


class LastChanges:
    """Each poll's version age in slots (NaN: unknown or not believed), and the URLs whose
    ``Last-Modified`` is not believed."""

    def __init__(self, slot_seconds: float) -> None:
        self.slot_seconds = slot_seconds
        #: URL ids whose Last-Modified broke a rule (module docstring)
        self.distrusted: set[int] = set()

    def age(self, answer: PollAnswer, record: UrlRecord) -> float:
        """Slots since the version ``answer`` saw last changed (``record``: the URL as its
        previous poll left it); NaN when unknown or not believed. A poll that breaks a rule
        marks its URL distrusted."""
        if answer.outcome not in ("ok", "not_modified") or answer.url_id in self.distrusted:
            return math.nan
        lm_text, date_text = answer.last_modified, answer.date
        if lm_text is None or date_text is None:
            return math.nan
        modified, date = http_time(lm_text), http_time(date_text)
        if modified is None or date is None:
            return math.nan
        before = http_time(record.last_modified) if record.last_modified else None
        if answer.outcome == "not_modified":
            changed = None if record.last_hash is None else False
        else:
            changed = changed_of(answer.changed, answer.content_hash, record)
        old = date - modified
        if old < -NOW_S:  # modified after the response was dated (a second's leeway)
            return self._distrust(answer.url_id)
        if changed is None:  # a first poll: how old its version is
            return (old - RESOLUTION_S) / self.slot_seconds if old > NOW_S else math.nan
        if not changed:  # the same version: the same Last-Modified, not "now"
            if (before is not None and modified != before) or old <= NOW_S:
                return self._distrust(answer.url_id)
            return math.nan
        if before is not None and modified <= before:  # a change must be later than before
            return self._distrust(answer.url_id)
        return max(0.0, old - RESOLUTION_S) / self.slot_seconds

    def _distrust(self, url_id: int) -> float:
        self.distrusted.add(url_id)
        return math.nan
