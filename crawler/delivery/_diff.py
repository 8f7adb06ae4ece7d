"""The ``diff`` of a ``page.changed`` payload: a unified diff of the text before and after.

The texts come from the change history (docs/history.md): after is the change's snapshot;
before is the previous change's after or the URL's baseline text, given only when its hash
is the change's old hash. A change without a known before (snapshots off, a URL watched
before the history existed) has no diff: ``change_diff`` returns None then. The diff is
made once, for the first send of the change's event, and stored with the change
(``changes.diff``) with that send's answer; a change whose diff is not stored yet has it
made from its texts (``diff_of``); ``make_diff`` is the one diff every reader serves.
"""

from __future__ import annotations

from crawler.detect import unified_diff
from crawler.store import OutboxStore, StoredDiff


def make_diff(before: str, after: str) -> str:
    """The diff the outbox stores for a change (the one every reader serves)."""
    return unified_diff(before, after)


def change_diff(
    outbox: OutboxStore, url_id: int, slot: int | None, old_hash: str | None, new_hash: str | None
) -> str | None:
    """The unified diff from the text before this change to the text after it, or None
    when no before text exists (``old_hash``: unused, the history matches it)."""
    key = (url_id, slot, new_hash)
    return diff_of(outbox.change_diffs([key]).get(key))


def diff_of(found: StoredDiff | None) -> str | None:
    """The diff as stored, else made from the texts (None: no text before)."""
    if found is None:
        return None
    if found.diff is not None:
        return found.diff
    if found.before is None or found.after is None:
        return None
    return make_diff(found.before, found.after)
