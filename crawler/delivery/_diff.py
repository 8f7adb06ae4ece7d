"""The ``diff`` of a ``page.changed`` payload: a unified diff of the text before and after.

Today the store keeps the new text of every change and no separate "before": the text
before a change is the snapshot of the URL's previous change when that one ended on this
change's old hash (``OutboxStore.change_texts``). The first change of a URL, or one after a
gap in the snapshots, has no before text: ``change_diff`` returns None then. This is the one
place the history of change texts is read for delivery.
"""

from __future__ import annotations

import difflib

from crawler.store import OutboxStore


def change_diff(
    outbox: OutboxStore, url_id: int, slot: int | None, old_hash: str | None, new_hash: str | None
) -> str | None:
    """The unified diff from the text before this change to the text after it, or None
    when no before text exists."""
    before, after = outbox.change_texts(url_id, slot, old_hash, new_hash)
    if before is None or after is None:
        return None
    return unified_diff(before, after)


def unified_diff(before: str, after: str) -> str:
    """A unified diff of two texts, line by line (``before`` / ``after`` as file names)."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        "before",
        "after",
        lineterm="\n",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def cap(text: str, max_bytes: int) -> tuple[str, bool]:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes at a line end when one is in the
    kept part (else mid-line, never mid-character); True when it was cut."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text, False
    kept = data[:max_bytes].decode("utf-8", "ignore")
    line_end = kept.rfind("\n")
    return (kept[: line_end + 1] if line_end > 0 else kept), True
