"""The watch list: add, duplicates, remove, re-add, records."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from crawler.store import NewUrl, Store, site_host


def test_add_reports_added_duplicates_and_reactivated(store: Store) -> None:
    v0 = store.watch_list_version()
    report = store.add_urls(
        [
            NewUrl("https://a.example/1"),
            NewUrl("https://a.example/2", importance=0.5, selector="main", ignore_patterns=["x"]),
            NewUrl("https://a.example/1"),  # within-batch duplicate
            NewUrl("http://b.example:8080/"),
        ]
    )
    assert [u for u, _ in report.added] == [
        "https://a.example/1",
        "https://a.example/2",
        "http://b.example:8080/",
    ]
    assert report.already_watched == ["https://a.example/1"]
    assert store.watch_list_version() > v0

    again = store.add_urls([NewUrl("https://a.example/2"), NewUrl("https://c.example/")])
    assert again.already_watched == ["https://a.example/2"]
    assert [u for u, _ in again.added] == ["https://c.example/"]

    v1 = store.watch_list_version()
    assert store.remove_urls(["https://a.example/2", "https://nowhere.example/"]) == [
        "https://a.example/2"
    ]
    assert store.remove_urls(["https://a.example/2"]) == []
    assert store.watch_list_version() > v1
    ids, weights = store.active_urls()
    uid2 = dict(report.added)["https://a.example/2"]
    assert uid2 not in ids.tolist()

    back = store.add_urls([NewUrl("https://a.example/2", importance=0.25)])
    assert back.reactivated == [("https://a.example/2", uid2)]
    ids, weights = store.active_urls()
    assert ids.dtype == np.int64 and np.all(np.diff(ids) > 0)
    assert dict(zip(ids.tolist(), weights.tolist(), strict=True))[uid2] == 0.25


def test_url_records_and_sites(store: Store) -> None:
    report = store.add_urls(
        [NewUrl("https://a.example/x", selector="#c", ignore_patterns=[r"\d+ views"])]
    )
    uid = report.added[0][1]
    rec = store.url_records([uid, 999_999])
    assert list(rec) == [uid]
    assert rec[uid].host == "a.example"
    assert rec[uid].selector == "#c"
    assert rec[uid].ignore_patterns == (r"\d+ views",)
    assert rec[uid].etag is None and rec[uid].last_hash is None


def test_invalid_importance_writes_nothing(store: Store) -> None:
    with pytest.raises(ValueError, match="importance"):
        store.add_urls([NewUrl("https://a.example/ok"), NewUrl("https://a.example/bad", 0.0)])
    assert store.active_urls()[0].size == 0


def test_set_importance(store: Store) -> None:
    store.add_urls([NewUrl("https://a.example/")])
    assert store.set_importance("https://a.example/", 0.3)
    assert not store.set_importance("https://b.example/", 0.3)
    assert store.active_urls()[1].tolist() == [0.3]


def test_large_batch_is_chunked(store: Store) -> None:
    entries = [NewUrl(f"https://h{i % 37}.example/p/{i}") for i in range(5_000)]
    done: list[int] = []
    report = store.add_urls(entries, progress=lambda d, t: done.append(d))
    assert len(report.added) == 5_000 and done[-1] == 5_000
    ids, _ = store.active_urls()
    assert ids.size == 5_000


def test_site_host() -> None:
    assert site_host("https://Example.COM/a") == "example.com"
    assert site_host("http://example.com:8080/") == "example.com:8080"
    assert site_host("http://[::1]:9/") == "[::1]:9"


def test_a_bulk_add_refreshes_postgres_planner_statistics(store: Store, db_backend: str) -> None:
    from sqlalchemy import text

    from crawler.store._store import ANALYZE_AFTER_ROWS

    n_sites = 20
    store.add_urls(
        [NewUrl(f"https://s{i % n_sites}.bulk.example/{i}") for i in range(ANALYZE_AFTER_ROWS)]
    )
    assert store.active_urls()[0].size == ANALYZE_AFTER_ROWS
    if db_backend != "postgresql":
        return
    with store.engine.connect() as conn:
        estimate = conn.execute(text("SELECT reltuples FROM pg_class WHERE oid = 'urls'::regclass"))
        assert estimate.scalar() == ANALYZE_AFTER_ROWS  # ANALYZE counted them (else -1 or 0)
        # and the sites it marked: their statistics know every site is edited up to now
        sites = conn.execute(text("SELECT reltuples FROM pg_class WHERE oid = 'sites'::regclass"))
        assert sites.scalar() == n_sites


def test_each_edit_of_which_urls_are_watched_marks_its_sites(store: Store) -> None:
    """``sites.edit_version``: an add, re-add, removal or importance change writes the
    version it bumped on the sites it touched (a cluster worker re-reads only those sites'
    URLs); a change of rules, tags or a revival marks none (they are read whole on every
    bump), and an edit that changes nothing bumps nothing."""
    store.add_urls([NewUrl(f"http://{s}.example/{i}") for s in "abcd" for i in range(3)])
    ids = dict(store.select_urls([f"http://{s}.example/{i}" for s in "abcd" for i in range(3)]))
    by_url = {u: i for i, u in ids.items()}

    def edited(edit: Callable[[], object]) -> set[str]:
        before = store.watch_list_version()
        edit()
        return store.cluster.sites_edited_since(before)

    assert edited(lambda: store.add_urls([NewUrl("http://b.example/new")])) == {"b.example"}
    assert edited(lambda: store.add_urls([NewUrl("http://e.example/")])) == {"e.example"}
    assert edited(lambda: store.remove_urls(["http://c.example/1", "http://a.example/0"])) == {
        "a.example",
        "c.example",
    }
    assert edited(lambda: store.add_urls([NewUrl("http://c.example/1")])) == {"c.example"}
    assert edited(lambda: store.set_importance("http://d.example/2", 0.5)) == {"d.example"}
    importance = {"importance": 0.25}
    two = [by_url["http://a.example/1"], by_url["http://d.example/0"]]
    assert edited(lambda: store.edit_urls(two, importance)) == {"a.example", "d.example"}
    one = [by_url["http://b.example/0"]]
    assert edited(lambda: store.edit_urls(one, {"paused": True, "min_interval_s": 60.0})) == set()
    assert edited(lambda: store.edit_urls(one, {}, ["tagged"])) == set()
    assert edited(lambda: store.revive_urls(one)) == set()
    # nothing to do: no bump, no mark
    version = store.watch_list_version()
    assert store.remove_urls(["http://a.example/0"]) == []
    assert not store.set_importance("http://a.example/0", 0.5)
    assert store.add_urls([NewUrl("http://b.example/new")]).added == []
    assert store.watch_list_version() == version
    assert store.cluster.sites_edited_since(version) == set()
    # every mark is the version of its own edit: the sites edited since an older version
    assert store.cluster.sites_edited_since(0) == {f"{s}.example" for s in "abcde"}
