"""The diffs the feed and the API serve: each change's diff is made once and stored with the
change (``changes.diff``, written by the deliverer with the answer of the change's first
send: the same diff the webhook carries), and read from there; a bounded LRU cache keyed by
change id keeps the capped form per process.

A change row is immutable (its before and after never change once committed), so a diff
keyed by the change's id never goes stale; retention deleting the row only makes the entry
unreachable. A change whose diff is not stored (delivery off, or a change committed before
the column) has it made from its texts here, once per process (the cache): the API is
read-only and does not write it. The slot's commit never makes a diff (the crawl would pay
for one nobody may ever read). Memory is bounded: at most ``max_entries`` diffs, each cut
at ``max_bytes`` (``crawler.detect.cap_diff``, the webhook payload's cap).
``functools.lru_cache`` is not used because it would also cache "no such change" (an id
not yet committed would stay unknown) and its key would hold the store.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from crawler.detect import cap_diff, unified_diff
from crawler.store import ChangeText, Store

__all__ = ["ChangeDiff", "DiffCache"]


@dataclass(frozen=True, slots=True)
class ChangeDiff:
    """A change's unified diff (before to after), ``truncated`` when cut at the cap; None
    ``diff`` when no diff can be made (the text before or after was not kept)."""

    diff: str | None
    truncated: bool


def diff_of(text: ChangeText, max_bytes: int) -> ChangeDiff:
    """The capped unified diff of a change's texts."""
    whole = text.diff  # as stored once, by the deliverer (its first send of the change)
    if whole is None:
        if text.before is None or text.after is None:
            return ChangeDiff(None, False)
        whole = unified_diff(text.before, text.after, before_label="before", after_label="after")
    diff, cut = cap_diff(whole, max_bytes)
    return ChangeDiff(diff, cut)


class DiffCache:
    """Change id -> :class:`ChangeDiff`, least recently used first out; thread-safe (the
    handlers read the database in worker threads)."""

    def __init__(self, store: Store, *, max_entries: int = 1024, max_bytes: int = 64 * 1024):
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._store = store
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._entries: OrderedDict[int, ChangeDiff] = OrderedDict()
        self._lock = threading.Lock()
        #: diffs computed (cache misses that found their change): a test's and a metric's
        self.computed = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _get(self, change_id: int) -> ChangeDiff | None:
        with self._lock:
            found = self._entries.get(change_id)
            if found is not None:
                self._entries.move_to_end(change_id)
            return found

    def _put(self, change_id: int, diff: ChangeDiff) -> None:
        with self._lock:
            self._entries[change_id] = diff
            self._entries.move_to_end(change_id)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
            self.computed += 1

    def from_text(self, text: ChangeText) -> ChangeDiff:
        """The diff of a change whose texts the caller has read already."""
        found = self._get(text.info.id)
        if found is None:
            found = diff_of(text, self._max_bytes)
            self._put(text.info.id, found)
        return found

    def many(self, ids: Iterable[int]) -> dict[int, ChangeDiff]:
        """The diffs of the changes ``ids`` that exist (blocking: call from a thread); the
        texts are read, in one query, only for the ids not cached."""
        out: dict[int, ChangeDiff] = {}
        missing: list[int] = []
        for change_id in ids:
            found = self._get(change_id)
            if found is None:
                missing.append(change_id)
            else:
                out[change_id] = found
        if missing:
            for change_id, text in self._store.change_texts(missing).items():
                out[change_id] = self.from_text(text)
        return out
