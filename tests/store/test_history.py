"""Change history in the store: each change's before and after, the export, the retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, update

import crawler.store._history
from crawler.store import Store, change_texts_in, compress_snapshot
from crawler.store.models import change_baselines, changes, url_tags
from tests.store._helpers import add, poll, slot_record

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def versions(store: Store, uid: int, texts: list[str], first_slot: int = 1) -> None:
    """A baseline poll with texts[0], then a hit per later text (hash "h<k>"), a slot each."""
    for k, text in enumerate(texts):
        when = T0 + timedelta(days=k)
        p = (
            poll(uid, "baseline", when, content_hash="h0", snapshot=text)
            if k == 0
            else poll(uid, "hit", when, content_hash=f"h{k}", old_hash=f"h{k - 1}", snapshot=text)
        )
        store.commit_slot(slot_record(first_slot + k, [p]), [p])


def befores_and_afters(store: Store, url: str) -> list[tuple[str | None, str | None]]:
    ids = [c.id for c in store.list_changes(url=url)]
    found = store.change_texts(ids)
    return [(found[i].before, found[i].after) for i in ids]


URL0 = "https://example.com/page/0"
URL1 = "https://example.com/page/1"


def test_every_change_has_its_before_and_after(store: Store) -> None:
    (a,) = add(store, 1)
    versions(store, a, ["Title\nfirst", "Title\nsecond", "Title\nthird", "Title\nfourth"])
    assert befores_and_afters(store, URL0) == [
        ("Title\nfirst", "Title\nsecond"),
        ("Title\nsecond", "Title\nthird"),
        ("Title\nthird", "Title\nfourth"),
    ]
    with store.engine.connect() as conn:  # each text stored once: three changes, one baseline
        assert conn.execute(select(func.count()).select_from(changes)).scalar_one() == 3
        assert conn.execute(select(func.count()).select_from(change_baselines)).scalar_one() == 1
    newest = store.latest_change_id(URL0)
    one = store.change_text(newest or 0)
    assert one is not None and one.info.url == URL0 and one.info.new_hash == "h3"
    assert one.as_dict()["before"] == "Title\nthird"
    assert store.change_text(10_000) is None
    assert store.latest_change_id("https://example.com/none") is None


def test_a_before_that_does_not_match_the_old_hash_is_not_given(store: Store) -> None:
    (a,) = add(store, 1)
    versions(store, a, ["one", "two"])
    # a change recorded without its predecessor (h2 was never stored): no before, not a wrong one
    p = poll(a, "hit", T0 + timedelta(days=5), content_hash="h4", old_hash="h3", snapshot="four")
    store.commit_slot(slot_record(9, [p]), [p])
    assert befores_and_afters(store, URL0) == [("one", "two"), (None, "four")]


def test_snapshots_written_before_the_readable_text_read_as_one_line(store: Store) -> None:
    (a,) = add(store, 1)
    versions(store, a, ["one", "two"])
    with store.engine.begin() as conn:  # as the previous release wrote them: format 0
        conn.execute(
            update(changes).values(
                snapshot=compress_snapshot("  Home\n Home  News\n", None), snapshot_format=0
            )
        )
    assert befores_and_afters(store, URL0) == [("one", "Home Home News")]


def test_export_filters_by_time_url_and_tag(store: Store) -> None:
    a, b = add(store, 2)
    versions(store, a, ["a0", "a1", "a2"])
    versions(store, b, ["b0", "b1"], first_slot=10)
    with store.engine.begin() as conn:
        conn.execute(url_tags.insert(), [{"url_id": b, "tag": "news"}])
    every = store.list_changes()
    assert [c.url for c in every] == [URL0, URL0, URL1]
    assert [c.id for c in every] == sorted(c.id for c in every)
    assert [c.new_hash for c in store.list_changes(url=URL0)] == ["h1", "h2"]
    tagged = store.list_changes(tag="news")
    assert [(c.url, c.tags) for c in tagged] == [(URL1, ("news",))]
    assert [c.new_hash for c in store.list_changes(since=T0 + timedelta(days=2))] == ["h2"]
    first = store.list_changes(limit=1)
    assert [c.id for c in store.list_changes(after_id=first[0].id)] == [c.id for c in every[1:]]
    assert first[0].as_dict()["detected_at"].startswith("2026-01-02")


def test_retention_by_count_keeps_the_before_of_the_oldest_kept_change(store: Store) -> None:
    a, b = add(store, 2)
    texts = [f"v{k}" for k in range(6)]
    versions(store, a, texts)
    versions(store, b, ["only", "once"], first_slot=20)
    done = store.prune_changes(2, None)
    assert (done.deleted, done.baselines) == (3, 1)
    assert befores_and_afters(store, URL0) == [("v3", "v4"), ("v4", "v5")]
    assert befores_and_afters(store, URL1) == [("only", "once")]  # under the count: untouched
    assert store.prune_changes(2, None).deleted == 0
    # the next change still has its before, and so does the oldest kept one after pruning again
    p = poll(a, "hit", T0 + timedelta(days=9), content_hash="h6", old_hash="h5", snapshot="v6")
    store.commit_slot(slot_record(40, [p]), [p])
    assert store.prune_changes(2, None).deleted == 1
    assert befores_and_afters(store, URL0) == [("v4", "v5"), ("v5", "v6")]


def test_retention_by_age_keeps_the_text_the_next_change_needs(store: Store) -> None:
    (a,) = add(store, 1)
    versions(store, a, ["v0", "v1", "v2"])
    done = store.prune_changes(None, T0 + timedelta(days=30))  # every change is older
    assert done.deleted == 2
    assert store.list_changes() == []
    with store.engine.connect() as conn:
        row = conn.execute(select(change_baselines)).one()
    assert row.content_hash == "h2"  # the URL's current text, handed on by its last change
    p = poll(a, "hit", T0 + timedelta(days=40), content_hash="h3", old_hash="h2", snapshot="v3")
    store.commit_slot(slot_record(50, [p]), [p])
    assert befores_and_afters(store, URL0) == [("v2", "v3")]


def test_an_older_text_never_replaces_a_newer_baseline(store: Store) -> None:
    (a,) = add(store, 1)
    versions(store, a, ["v0", "v1"])
    # the URL is polled as a baseline again later (its hashes were reset): a newer baseline
    late = poll(a, "baseline", T0 + timedelta(days=20), content_hash="h9", snapshot="v9")
    store.commit_slot(slot_record(30, [late]), [late])
    store.prune_changes(None, T0 + timedelta(days=10))  # hands on v1, older than v9
    with store.engine.connect() as conn:
        row = conn.execute(select(change_baselines)).one()
    assert row.content_hash == "h9"


def test_no_retention_settings_delete_nothing(store: Store) -> None:
    (a,) = add(store, 1)
    versions(store, a, ["v0", "v1", "v2"])
    assert store.prune_changes(None, None).deleted == 0
    assert store.prune_changes(100, timedelta(days=100_000)).deleted == 0
    assert len(store.list_changes()) == 2


def test_retention_in_small_batches_gives_the_same_result(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(crawler.store._history, "PRUNE_BATCH", 2)  # many transactions
    a, b = add(store, 2)
    versions(store, a, [f"a{k}" for k in range(7)])
    versions(store, b, [f"b{k}" for k in range(5)], first_slot=20)
    done = store.prune_changes(1, None)
    assert done.deleted == 5 + 3
    assert befores_and_afters(store, URL0) == [("a5", "a6")]
    assert befores_and_afters(store, URL1) == [("b3", "b4")]


def test_texts_can_be_read_on_the_callers_own_connection(store: Store) -> None:
    (a,) = add(store, 1)
    versions(store, a, ["one", "two"])
    (change,) = store.list_changes()
    with store.engine.begin() as conn:  # e.g. inside a delivery's own transaction
        found = change_texts_in(conn, [change.id, 999])
    assert list(found) == [change.id]
    assert (found[change.id].before, found[change.id].after) == ("one", "two")
