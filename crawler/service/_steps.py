"""The slot's hooks: what a feature sees of a slot, without the loop branching on it.

A first step towards the slot as named steps (caps, constraints, discovery and the outbox
each hanging on a small protocol the loop calls in order): every chunk of answers a slot
lands (its own polls' and those of earlier slots' polls that ended in it) goes to each
``AnswerObserver`` in turn. ``HostCaps.observe`` is one as it is; discovery's ``heard``
takes the URLs by a lookup, so it is adapted here rather than changed in its own module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from crawler.service._discovery import DiscoverySide
from crawler.store import UrlRecord
from crawler.workers import PollAnswer


class AnswerObserver(Protocol):
    """Sees each chunk of answers a slot lands, with the URL records they were polled for."""

    def observe(self, answers: Sequence[PollAnswer], records: dict[int, UrlRecord]) -> None:
        """Learn from ``answers`` (never "running": only polls that ended)."""
        ...


class DiscoveryHeard:
    """Discovery's ``heard`` (changed start pages) as an ``AnswerObserver``; ``side`` gives
    the loop's discovery side at each call (it may be replaced)."""

    def __init__(self, side: Callable[[], DiscoverySide]) -> None:
        self.side = side

    def observe(self, answers: Sequence[PollAnswer], records: dict[int, UrlRecord]) -> None:
        self.side().heard(answers, _url_of(records))


def _url_of(records: dict[int, UrlRecord]) -> Callable[[int], str | None]:
    """A URL id's URL (None if unknown), for ``DiscoverySide.heard``."""
    return lambda url_id: r.url if (r := records.get(url_id)) is not None else None
