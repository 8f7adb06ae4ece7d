"""The JSON body of a webhook: ``{"type", "timestamp", "data": {...}}`` (docs/delivery.md).

Pure: the event row and what ``_context.py`` read for it in, the body text out. The
``timestamp`` is when the event happened (its commit), not when it is sent; the
``webhook-timestamp`` header is the send time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from crawler.delivery._events import TEST, message_id
from crawler.detect import cap_diff
from crawler.store import PAGE_CHANGED, EventRow


@dataclass(frozen=True, slots=True)
class Context:
    """What a page.changed payload adds to the event row (read at send time)."""

    diff: str | None = None
    #: learned changes per day (the scheduler's estimate), None when it has none
    change_rate: float | None = None
    #: seconds between changes the learned rate expects (86400 / change_rate)
    expected_interval_s: float | None = None


def iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def event_body(event: EventRow, context: Context, diff_max_bytes: int) -> str:
    """The body of ``event``: ``data`` has the URL, its tags, the event id, then the facts
    of its type (a change: hashes, diff, learned rate; others: their stored payload)."""
    data: dict[str, Any] = {"event_id": message_id(event.id), "url": event.url}
    data["tags"] = list(event.tags)
    if event.type == PAGE_CHANGED:
        diff, truncated = None, False
        if context.diff is not None:
            diff, truncated = cap_diff(context.diff, diff_max_bytes)
        data |= {
            "detected_at": event.payload.get("detected_at"),
            "old_hash": event.payload.get("old_hash"),
            "new_hash": event.payload.get("new_hash"),
            "diff": diff,
            "diff_truncated": truncated,
            "change_rate": context.change_rate,
            "expected_interval_s": context.expected_interval_s,
        }
    else:
        data |= {k: v for k, v in event.payload.items() if k not in data}
    return _dump({"type": event.type, "timestamp": iso(event.created_at), "data": data})


def test_body(destination_id: int, now: datetime) -> str:
    """The body of ``crawler destinations test``."""
    return _dump(
        {
            "type": TEST,
            "timestamp": iso(now),
            "data": {"destination_id": destination_id, "message": "a test from crawler"},
        }
    )


def _dump(document: dict[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)
