"""The feed's XML escaping, the cursor, the parameters and the diff cache's bound, without a
service: hostile text in a URL, a tag and a diff still makes a feed that feedparser reads
(not bozo) and shows the text as written; a cursor round-trips and a forged one is refused."""

from __future__ import annotations

from datetime import UTC, datetime

import feedparser
import pytest

from crawler.api import (
    BadParameterError,
    ChangeDiff,
    decode_cursor,
    encode_cursor,
    entry_id,
    parse_query,
    render_feed,
)
from crawler.store import ChangeInfo

HOSTILE = '<script>alert("x")</script> & ]]> \u00e9'


def change(change_id: int, url: str = "https://example.com/a?b=1&c=2") -> ChangeInfo:
    return ChangeInfo(
        change_id, 1, url, 7, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "a", "b", (HOSTILE,)
    )


def test_hostile_text_is_escaped_and_the_feed_parses() -> None:
    diff = f"--- before\n+++ after\n@@ -1 +1 @@\n-old {HOSTILE}\n+new {HOSTILE}\n"
    body = render_feed(
        title=f"changes {HOSTILE}",
        self_url="http://127.0.0.1:9410/feed/changes.atom?tag=a&url=b",
        feed_id="urn:uuid:00000000-0000-0000-0000-000000000000",
        changes=[change(2), change(1)],
        diffs={2: ChangeDiff(diff, False), 1: ChangeDiff(None, False)},
    )
    assert b"<script>" not in body  # escaped twice over: XML around escaped HTML
    feed = feedparser.parse(body)
    assert not feed.bozo, feed.get("bozo_exception")
    assert feed.feed.title == f"changes {HOSTILE}"
    first, second = feed.entries
    assert first.link == "https://example.com/a?b=1&c=2"
    assert [t.term for t in first.tags] == [HOSTILE]
    assert first.updated == "2026-01-02T03:04:05Z"
    assert "+new &lt;script&gt;" in first.content[0].value  # shown as text, not run
    assert "not kept" in second.content[0].value


def test_entry_ids_are_stable_and_distinct() -> None:
    assert entry_id(change(1)) == entry_id(change(1))
    assert entry_id(change(1)) != entry_id(change(2))
    assert entry_id(change(1)) != entry_id(change(1, "https://example.com/other"))


@pytest.mark.parametrize("change_id", [0, 1, 99, 2**62])
def test_cursor_round_trips(change_id: int) -> None:
    assert decode_cursor(encode_cursor(change_id)) == change_id


@pytest.mark.parametrize(
    "cursor", ["", "!!!", "eDE", encode_cursor(5)[:-1] + "*", "YzE5OTk5OTk5OTk5OTk5OTk5OTk5OTk5"]
)
def test_forged_cursor_is_refused(cursor: str) -> None:
    with pytest.raises(BadParameterError, match="cursor"):
        parse_query({"cursor": cursor})


def test_limits_and_defaults() -> None:
    assert parse_query({}).limit == 100
    assert parse_query({"limit": "1000"}).limit == 1000
    for bad in ("0", "1001", "-1", "1e3", ""):
        with pytest.raises(BadParameterError, match="limit"):
            parse_query({"limit": bad})
    assert parse_query({"since": "2026-01-02"}).since == datetime(2026, 1, 2, tzinfo=UTC)


def test_the_token_is_neither_recorded_nor_shown() -> None:
    from crawler.service._service import recorded_settings
    from crawler.settings import load_settings

    settings = load_settings({"api_token": "s3cret-token"})
    assert settings.api_token == "s3cret-token"
    assert "s3cret-token" not in repr(settings)
    assert "api_token" not in recorded_settings(settings)
