"""The event types: an open list (health events come with the learner's alerts)."""

from __future__ import annotations

from typing import Final

from crawler.store import PAGE_CHANGED, PAGE_DISCOVERED

#: a test ping of one destination (``crawler destinations test``): never in the outbox
TEST: Final = "test"
#: a URL failed N polls in a row, came back, or fell silent against its learned rate
PAGE_FAILING: Final = "page.failing"
PAGE_RECOVERED: Final = "page.recovered"
PAGE_STOPPED_CHANGING: Final = "page.stopped_changing"

#: every type a destination may subscribe to; a new type is added here (and documented in
#: docs/delivery.md), the outbox itself takes any name
EVENT_TYPES: Final[tuple[str, ...]] = (
    PAGE_CHANGED,
    PAGE_DISCOVERED,
    PAGE_FAILING,
    PAGE_RECOVERED,
    PAGE_STOPPED_CHANGING,
)


def message_id(event_id: int) -> str:
    """The webhook id of an outbox event: stable across retries and replays."""
    return f"msg_{event_id}"


def parse_message_id(text: str) -> int:
    """The event id of ``msg_123`` or ``123``; ValueError otherwise."""
    digits = text.removeprefix("msg_")
    if not digits.isdigit():
        raise ValueError(f"not an event id: {text!r} (expected msg_<number> or a number)")
    return int(digits)
