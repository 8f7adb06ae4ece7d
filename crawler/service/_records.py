"""The crawl loop's memory of recently polled URLs: what their next poll needs, without a query.

Every slot needs, for each selected URL, its address, validators (ETag, Last-Modified), last
hashes and watch rules. The loop itself wrote the validators and hashes (they come from its
own polls), so after a URL's first poll they are known here; reading them back from the
database each slot costs a query per slot and CPU that the polls need. Entries are replaced
after every poll, dropped in least-recently-polled order beyond ``capacity``, and all dropped
when the watch list changes (an operator's edit can change a URL's rules or remove it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from crawler.store import PollRecord, UrlRecord

#: enough for every URL polled in the last many slots of a large deployment (~0.5 KB each)
DEFAULT_CAPACITY = 100_000


class RecentRecords:
    """URL id -> ``UrlRecord`` as of the URL's last poll by this process."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        self.capacity = capacity
        self._records: dict[int, UrlRecord] = {}  # insertion order = poll order

    def __len__(self) -> int:
        return len(self._records)

    def split(self, ids: Iterable[int]) -> tuple[dict[int, UrlRecord], list[int]]:
        """(the records known here, the ids to read from the database)."""
        known: dict[int, UrlRecord] = {}
        missing: list[int] = []
        records = self._records
        for uid in ids:
            record = records.get(uid)
            if record is None:
                missing.append(uid)
            else:
                known[uid] = record
        return known, missing

    def polled(self, records: dict[int, UrlRecord], polls: Iterable[PollRecord]) -> None:
        """Remember each polled URL as the poll left it (``records``: as it was before)."""
        store = self._records
        if not self.capacity:
            return
        for poll in polls:
            record = records.get(poll.url_id)
            if record is None:
                continue
            store.pop(poll.url_id, None)  # re-inserted last: the most recently polled
            store[poll.url_id] = after_poll(record, poll)
        excess = len(store) - self.capacity
        if excess > 0:
            for uid in list(itertools.islice(store, excess)):
                del store[uid]

    def clear(self) -> None:
        self._records.clear()


def after_poll(record: UrlRecord, poll: PollRecord) -> UrlRecord:
    """A URL's record once ``poll`` is applied (a failed poll changes nothing)."""
    if poll.outcome == "error":
        return record
    return UrlRecord(
        id=record.id,
        url=record.url,
        host=record.host,
        etag=poll.etag,
        last_modified=poll.last_modified,
        last_hash=poll.content_hash or record.last_hash,
        last_raw_hash=poll.raw_hash or record.last_raw_hash,
        selector=record.selector,
        ignore_patterns=record.ignore_patterns,
        # a baseline or a miss that kept its text wrote the URL's baseline text
        has_text=record.has_text or (poll.snapshot is not None and poll.outcome != "hit"),
    )


def asks_for_text(record: UrlRecord, keep_text: bool) -> bool:
    """Whether the next poll of a URL asks for its text even if unchanged: it has been polled
    but has no baseline text (watched before the change history existed), so the before of
    its next change would be unknown. The poll is then judged as a first poll (no previous
    hashes, no validators: one full fetch and parse, once) and ``changed_of`` compares its
    hash with the stored one, so a change is still a change (docs/history.md). ``keep_text``:
    texts are kept at all (``store_snapshots`` on and ``snapshot_max_bytes`` not 0), else a
    URL would ask at every poll."""
    return keep_text and not record.has_text and record.last_hash is not None


def changed_of(
    answer_changed: bool | None, content_hash: str | None, record: UrlRecord
) -> bool | None:
    """Whether a judged page changed: the judge's word, or, for a page judged as a first poll
    because its text was asked for (``asks_for_text``), its hash against the stored one."""
    if answer_changed is None and record.last_hash is not None:
        return content_hash != record.last_hash
    return answer_changed
