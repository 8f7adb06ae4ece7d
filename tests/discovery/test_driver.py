"""SourceCrawl, the layer a service drives with its own fetches (no I/O here: pages as text)."""

from __future__ import annotations

import pytest

from crawler.discovery import Scope, SourceCrawl

SITE = {
    "http://e.com/": '<a href="/a">a</a> <a href="/b?sid=1">b</a> <a href="http://x.org/">x</a>',
    "http://e.com/a": '<a href="/">home</a> <a href="/b">b</a>',
    "http://e.com/b": '<a href="/a#top">a</a>',
}


def _run(crawl: SourceCrawl, now: float, limit: int = 100) -> list[str]:
    fetched: list[str] = []
    while len(fetched) < limit and (url := crawl.next_url(max_replays=200)) is not None:
        crawl.fetched(url, SITE.get(url), published=None, now=now)
        fetched.append(url)
    return fetched


@pytest.mark.parametrize("strategy", ["weblog", "rl", "best_first", "breadth_first"])
def test_no_url_is_fetched_twice_in_a_slot(strategy: str) -> None:
    crawl = SourceCrawl("http://e.com/", strategy=strategy)
    first = _run(crawl, now=0.0)
    assert sorted(first) == sorted(SITE)  # the whole site, each page once; x.org out of scope
    crawl.new_slot()
    second = _run(crawl, now=100.0, limit=3)
    assert len(second) == 3 and len(set(second)) == 3
    assert {d.url for d in crawl.found} == set(SITE)  # all new: nothing was known


def test_known_pages_are_not_new_and_failures_are_recorded() -> None:
    crawl = SourceCrawl("http://e.com/", strategy="breadth_first", known={"http://e.com/"})
    url = crawl.next_url()
    assert url == "http://e.com/"
    assert crawl.fetched(url, SITE[url], published=None, now=0.0) is False
    url = crawl.next_url()
    assert url == "http://e.com/a"
    assert crawl.fetched(url, None, published=None, now=0.0) is False  # a failed fetch
    url = crawl.next_url()
    assert url is not None
    assert crawl.fetched(url, SITE[url], published=-90_000.0, now=0.0) is False  # too old


def test_misuse_is_a_clear_error() -> None:
    crawl = SourceCrawl("http://e.com/")
    with pytest.raises(ValueError, match="not the URL"):
        crawl.fetched("http://e.com/", "", published=None, now=0.0)
    crawl.next_url()
    with pytest.raises(RuntimeError, match="not reported fetched"):
        crawl.next_url()
    with pytest.raises(ValueError, match="not an http"):
        SourceCrawl("ftp://e.com/")
    with pytest.raises(ValueError, match="refused by the scope"):
        SourceCrawl("http://e.com/", seeds=["http://other.org/"])


def test_budget_stops_the_crawl() -> None:
    crawl = SourceCrawl("http://e.com/", scope=Scope.same_host("http://e.com/", page_budget=2))
    assert len(_run(crawl, now=0.0)) == 2
    assert crawl.next_url() is None


def test_a_step_also_fetches_the_unknown_pages_it_links_to() -> None:
    site = {
        "http://e.com/": '<a href="/old">old</a> <a href="/new">new</a>',
        "http://e.com/old": '<a href="/">home</a>',
        "http://e.com/new": '<a href="/">home</a>',
    }
    known = {"http://e.com/", "http://e.com/old"}
    crawl = SourceCrawl("http://e.com/", strategy="breadth_first", known=known)
    url = crawl.next_url()
    assert url == "http://e.com/"
    assert crawl.fetched(url, site[url], published=None, now=0.0) is False
    url = crawl.next_url()
    assert url == "http://e.com/new"  # downloaded with the step: it is not known
    assert crawl.fetched(url, site[url], published=None, now=0.0) is True
    forager = crawl.fleet.foragers[0]
    assert forager.path_rewards == [100.0]  # credited to the step that linked it
    url = crawl.next_url()
    assert url == "http://e.com/old"  # the next step; /new was fetched in this slot already
    assert crawl.fetched(url, site[url], published=None, now=0.0) is False
    assert [d.url for d in crawl.found] == ["http://e.com/new"]
    assert crawl.fetches == 3


def test_no_lookahead_fetches_one_page_per_step() -> None:
    crawl = SourceCrawl("http://e.com/", strategy="breadth_first", lookahead=0)
    url = crawl.next_url()
    assert url is not None
    crawl.fetched(url, SITE[url], published=None, now=0.0)
    assert crawl.next_url() == "http://e.com/a"
    assert crawl.fleet.foragers[0].path == ["http://e.com/", "http://e.com/a"]
