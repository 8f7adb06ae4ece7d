"""RecentRecords: the crawl loop's memory of what each URL's next poll needs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from crawler.service._records import RecentRecords, after_poll
from crawler.store import PollRecord, UrlRecord


def record(uid: int, **changes: object) -> UrlRecord:
    values: dict[str, object] = {
        "id": uid,
        "url": f"https://a.example/{uid}",
        "host": "a.example",
        "etag": None,
        "last_modified": None,
        "last_hash": "old",
        "last_raw_hash": "old.raw",
        "selector": None,
        "ignore_patterns": (),
    }
    values.update(changes)
    return UrlRecord(**values)  # type: ignore[arg-type]


def poll(uid: int, outcome: str = "miss", **changes: object) -> PollRecord:
    values: dict[str, object] = {
        "url_id": uid,
        "polled_at": datetime.now(UTC),
        "outcome": outcome,
        "status": 200,
        "duration_s": 0.01,
        "bytes": 100,
        "etag": '"v2"',
        "last_modified": "Mon, 23 Nov 2026 00:00:00 GMT",
        "content_hash": "new",
        "raw_hash": "new.raw",
    }
    values.update(changes)
    return PollRecord(**values)  # type: ignore[arg-type]


def test_unknown_urls_are_to_be_read() -> None:
    recent = RecentRecords()
    known, missing = recent.split([3, 1, 2])
    assert known == {} and missing == [3, 1, 2]


def test_a_poll_is_remembered_as_it_left_the_url() -> None:
    recent = RecentRecords()
    recent.polled({1: record(1), 2: record(2)}, [poll(1), poll(2, "error", etag=None)])
    known, missing = recent.split([1, 2, 3])
    assert missing == [3]
    assert known[1].etag == '"v2"' and known[1].last_hash == "new"
    assert known[1].last_raw_hash == "new.raw" and known[1].url == "https://a.example/1"
    assert known[2] == record(2)  # a failed poll changes nothing


def test_a_poll_without_hashes_keeps_the_last_ones() -> None:
    # a 304 Not Modified: no body, so no new hashes; the validators still update
    after = after_poll(record(1), poll(1, "not_modified", content_hash=None, raw_hash=None))
    assert after.last_hash == "old" and after.last_raw_hash == "old.raw"
    assert after.etag == '"v2"'


def test_the_least_recently_polled_go_first_beyond_capacity() -> None:
    recent = RecentRecords(capacity=3)
    records = {i: record(i) for i in range(1, 6)}
    recent.polled(records, [poll(1), poll(2), poll(3)])
    recent.polled(records, [poll(1)])  # 1 is now the most recent
    recent.polled(records, [poll(4), poll(5)])
    known, missing = recent.split(range(1, 6))
    assert sorted(known) == [1, 4, 5] and missing == [2, 3]
    assert len(recent) == 3


def test_capacity_zero_remembers_nothing_and_clear_forgets() -> None:
    off = RecentRecords(capacity=0)
    off.polled({1: record(1)}, [poll(1)])
    assert len(off) == 0
    recent = RecentRecords()
    recent.polled({1: record(1)}, [poll(1)])
    recent.clear()
    assert recent.split([1]) == ({}, [1])
    with pytest.raises(ValueError, match="capacity"):
        RecentRecords(capacity=-1)
