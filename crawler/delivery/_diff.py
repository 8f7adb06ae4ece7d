"""The ``diff`` of a ``page.changed`` payload: a unified diff of the text before and after.

The texts come from the change history (docs/history.md, ``OutboxStore.change_texts``):
after is the change's snapshot; before is the previous change's after or the URL's baseline
text, given only when its hash is the change's old hash. A change without a known before
(snapshots off, a URL watched before the history existed) has no diff: ``change_diff``
returns None then. This is the one
place the history of change texts is read for delivery.
"""

from __future__ import annotations

from crawler.detect import unified_diff
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
