"""The discovery store: sources, discovered pages, auto-watch and expiry (both databases)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event

from crawler.store import Found, NewUrl, SlotDiscovery, SourceSpec, Store

NEWS = "https://example.org/news/"
SHOP = "https://shop.example.org/"


def test_sources_add_update_remove_revive(store: Store) -> None:
    ds = store.discovery
    sid, new = ds.add_source(SourceSpec(NEWS, include=("/news/",), topic="harbor river"))
    assert new
    again, new = ds.add_source(SourceSpec(NEWS, budget_per_slot=3, auto_watch=True))
    assert (again, new) == (sid, False)
    (row,) = ds.sources()
    assert row.spec == SourceSpec(NEWS, budget_per_slot=3, auto_watch=True)  # replaced
    assert (row.polls, row.found, row.state) == (0, 0, None)
    assert ds.remove_source(NEWS)
    assert not ds.remove_source(NEWS)
    assert ds.sources() == []
    assert [r.url for r in ds.sources(include_removed=True)] == [NEWS]
    assert ds.add_source(SourceSpec(NEWS)) == (sid, True)  # revived


@pytest.mark.parametrize(
    "bad",
    [
        {"scope": "planet"},
        {"max_depth": -1},
        {"budget_per_slot": 0},
        {"budget_per_run": 0},
    ],
)
def test_bad_source_options_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SourceSpec(NEWS, **bad)  # type: ignore[arg-type]


def test_record_slot_first_finder_wins_counts_and_auto_watch(store: Store) -> None:
    ds = store.discovery
    news, _ = ds.add_source(SourceSpec(NEWS, auto_watch=True))
    shop, _ = ds.add_source(SourceSpec(SHOP))
    t = datetime(2026, 11, 23, 12, tzinfo=UTC)
    a, b, c = NEWS + "a", NEWS + "b", SHOP + "c"
    result = ds.record_slot(
        SlotDiscovery(
            polls={news: 7, shop: 3},
            found=[
                Found(a, news, t, 2, 1, t - timedelta(hours=1)),
                Found(b, news, t, 1, 1),
                Found(a, shop, t, 1, 1),  # the same page: the first finder keeps it
                Found(c, shop, t, 1, 1, None, 0.5),
            ],
            states={news: '{"seeds": ["x"]}'},
        )
    )
    assert result.recorded == [a, b, c]
    assert sorted(u for u, _ in result.watched) == [a, b]  # only the auto-watch source's
    rows = {r.url: r for r in ds.sources()}
    assert (rows[NEWS].polls, rows[NEWS].found, rows[NEWS].state) == (7, 2, '{"seeds": ["x"]}')
    assert (rows[SHOP].polls, rows[SHOP].found) == (3, 1)
    found = {d.url: d for d in ds.discovered()}
    assert found[a].source == NEWS and found[a].depth == 2 and found[a].watched
    assert found[a].lastmod == t - timedelta(hours=1)
    assert found[c].on_topic == 0.5 and not found[c].watched
    # in the watch list, through the store's add path (the version moved)
    watched = {r.url for r in store.list_urls()}
    assert {a, b} <= watched and c not in watched
    # recorded again (a later slot): nothing new, counts grow
    again = ds.record_slot(SlotDiscovery(polls={news: 1}, found=[Found(a, news, t, 1, 1)]))
    assert again.recorded == [] and again.watched == []
    assert {r.url: r.polls for r in ds.sources()}[NEWS] == 8
    assert ds.known_urls() >= {a, b, c}
    assert [d.url for d in ds.discovered(source=SHOP)] == [c]
    assert ds.discovered(since=t + timedelta(seconds=1)) == []


def test_known_urls_of_some_hosts_and_domains_only(store: Store) -> None:
    """A source asks only about links in its scope: the watched URLs of other sites are not
    read (a site by its host, whatever its port; a domain with its subdomains)."""
    watched = [
        "https://news.example/a", "http://news.example:8080/b", "https://x.news.example/c",
        "https://other.example/d", "https://example/e", "https://badnews.example/f",
    ]  # fmt: skip
    store.add_urls([NewUrl(u) for u in watched])
    ds = store.discovery
    assert ds.known_urls() >= set(watched)
    assert ds.known_urls(["news.example"]) == set(watched[:2])
    assert ds.known_urls([], ["news.example"]) == set(watched[:3])
    assert ds.known_urls(["other.example"], ["example"]) == set(watched)
    assert ds.known_urls(["nowhere.example"]) == set()


def test_expiry_unlinked_and_dead_leave_the_watch_list(store: Store) -> None:
    ds = store.discovery
    news, _ = ds.add_source(SourceSpec(NEWS, auto_watch=True))
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    pages = [NEWS + p for p in ("old", "linked", "dead", "manual")]
    store.add_urls([NewUrl(pages[3])])  # the operator watches this one by hand
    ds.record_slot(SlotDiscovery(polls={news: 4}, found=[Found(u, news, t0, 1, 1) for u in pages]))
    # ten days later a fetched page still links "linked" (and "manual")
    t10 = t0 + timedelta(days=10)
    ds.record_slot(SlotDiscovery(linked={pages[1], pages[3]}, at=t10))
    assert ds.expire(t10, 7.0, dead=[pages[2]]) == [(pages[2], "dead"), (pages[0], "unlinked")]
    rows = {d.url: d for d in ds.discovered()}
    assert rows[pages[0]].expire_reason == "unlinked" and rows[pages[0]].expired_at == t10
    assert rows[pages[1]].expired_at is None and rows[pages[1]].last_linked_at == t10
    watched = {r.url for r in store.list_urls()}
    assert pages[0] not in watched and pages[2] not in watched  # auto-added: removed
    assert pages[1] in watched and pages[3] in watched  # linked; or added by hand
    assert ds.expire(t10, 7.0, dead=[pages[2]]) == []  # expired once
    assert {d.url for d in ds.discovered(include_expired=False)} == {pages[1], pages[3]}
    # 0 days: never by age
    assert ds.expire(t10 + timedelta(days=365), 0.0) == []


def test_auto_watch_caps_per_source_live_and_per_slot(store: Store) -> None:
    """A source's new pages go on the watch list at most ``max_watched_per_slot`` a slot and
    never past ``max_watched`` live ones; the rest stay recorded, not watched; an expired
    page makes room again."""
    ds = store.discovery
    trap, _ = ds.add_source(SourceSpec(NEWS, auto_watch=True))
    other, _ = ds.add_source(SourceSpec(SHOP, auto_watch=True))
    t = datetime(2026, 11, 23, 12, tzinfo=UTC)
    caps = {"max_watched": 5, "max_watched_per_slot": 3}
    first = ds.record_slot(
        SlotDiscovery(
            polls={trap: 4, other: 1},
            found=[Found(f"{NEWS}{k}", trap, t, 1, 1) for k in range(4)]
            + [Found(SHOP + "x", other, t, 1, 1)],
        ),
        **caps,
    )
    assert [u for u, _ in first.watched] == [f"{NEWS}{k}" for k in range(3)] + [SHOP + "x"]
    assert first.watch_capped == 1
    second = ds.record_slot(
        SlotDiscovery(found=[Found(f"{NEWS}{k}", trap, t, 1, 1) for k in range(4, 10)]), **caps
    )
    assert len(second.watched) == 2 and second.watch_capped == 4  # 5 live in all
    assert len(second.recorded) == 6
    rows = ds.discovered(source=NEWS)
    assert len(rows) == 10 and sum(r.watched for r in rows) == 5
    assert sorted(ds.auto_watched_ids()) == sorted(i for _, i in first.watched + second.watched)
    assert ds.found_since(t - timedelta(hours=1)) == {trap: 10, other: 1}
    assert ds.found_since(t + timedelta(hours=1)) == {}
    ds.expire(t, 0, [f"{NEWS}0"])  # dead: off the watch list, room for one
    third = ds.record_slot(SlotDiscovery(found=[Found(NEWS + "new", trap, t, 1, 1)]), **caps)
    assert [u for u, _ in third.watched] == [NEWS + "new"]


def test_a_slot_with_nothing_to_write_opens_no_transaction(store: Store) -> None:
    """A service without sources records an empty discovery slot and applies no expiry
    rule in most slots: neither reaches the database (one write transaction a slot
    saved, on a fence row that every commit also updates)."""
    ds = store.discovery
    ds.add_source(SourceSpec(NEWS))
    statements: list[str] = []

    def note(*args: object) -> None:
        statements.append(str(args[2]))

    event.listen(store.engine, "before_cursor_execute", note)
    try:
        result = ds.record_slot(SlotDiscovery(at=datetime(2026, 11, 23, tzinfo=UTC)))
        gone = ds.expire(datetime(2026, 11, 23, tzinfo=UTC), 0.0, ())
    finally:
        event.remove(store.engine, "before_cursor_execute", note)
    assert (result.recorded, result.watched, gone) == ([], [], [])
    assert statements == []
    assert SlotDiscovery(linked={NEWS + "a"}).empty is False  # a link refreshes a page
