"""A URL without a baseline text asks once for its text; the loop still tells changes apart."""

from __future__ import annotations

from datetime import UTC, datetime

from crawler.service._records import after_poll, asks_for_text, changed_of
from crawler.store import PollRecord, UrlRecord


def record(last_hash: str | None = "h1", has_text: bool = False) -> UrlRecord:
    return UrlRecord(1, "https://example.com/", "example.com", '"e"', None, last_hash, "r1",
                     None, (), has_text)  # fmt: skip


def test_only_a_polled_url_without_a_text_asks_and_only_when_texts_are_kept() -> None:
    assert asks_for_text(record(), keep_text=True)
    assert not asks_for_text(record(), keep_text=False)  # snapshots off: never
    assert not asks_for_text(record(has_text=True), keep_text=True)
    assert not asks_for_text(record(last_hash=None), keep_text=True)  # a first poll keeps it


def test_an_asked_page_is_judged_against_the_stored_hash() -> None:
    assert changed_of(None, "h1", record()) is False  # unchanged: a miss, not a baseline
    assert changed_of(None, "h2", record()) is True  # changed: a hit, not lost
    assert changed_of(None, "h2", record(last_hash=None)) is None  # a true first poll
    assert changed_of(False, "h1", record(has_text=True)) is False  # the judge's word


def test_a_kept_text_marks_the_url_as_having_one() -> None:
    now = datetime.now(UTC)
    miss = PollRecord(1, "miss", now, 200, content_hash="h1", snapshot="text")
    assert after_poll(record(), miss).has_text
    bare_miss = PollRecord(1, "miss", now, 200, content_hash="h1")
    assert not after_poll(record(), bare_miss).has_text  # asks again next time
    hit = PollRecord(1, "hit", now, 200, content_hash="h2", old_hash="h1", snapshot="new")
    assert not after_poll(record(), hit).has_text  # a change row, still no baseline text
    assert after_poll(record(has_text=True), bare_miss).has_text
