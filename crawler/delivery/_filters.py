"""Which events a destination receives: its event types, tags and URL pattern (RE2)."""

from __future__ import annotations

import functools
from typing import Any

import re2

from crawler.store import DestinationRow, EventRow

#: the longest URL pattern accepted (RE2 compiles it once per process)
MAX_PATTERN_LENGTH = 1000


@functools.lru_cache(maxsize=256)
def compile_pattern(pattern: str) -> Any:
    """The compiled RE2 pattern; ValueError if RE2 refuses it."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ValueError(f"URL pattern longer than {MAX_PATTERN_LENGTH} characters")
    try:
        return re2.compile(pattern)
    except re2.error as exc:
        raise ValueError(f"URL pattern {pattern!r} is not a valid RE2 expression: {exc}") from None


def matches(destination: DestinationRow, event: EventRow) -> bool:
    """The destination wants the event: its type is subscribed (no list: every type), it
    carries one of the destination's tags (no list: any), its URL matches the pattern
    (searched anywhere in the URL; no pattern: any)."""
    spec = destination.spec
    if spec.event_types and event.type not in spec.event_types:
        return False
    if spec.tags and not set(spec.tags).intersection(event.tags):
        return False
    if spec.url_pattern:
        if event.url is None:
            return False
        try:
            return compile_pattern(spec.url_pattern).search(event.url) is not None
        except ValueError:
            return False  # checked when added; a stored pattern RE2 refuses matches nothing
    return True
