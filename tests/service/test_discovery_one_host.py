"""Discovery's polls that are deferred (not made by the slot's deadline) are made in a later
slot, over HTTP on 127.0.0.1.

With the slot's deadline the slot (the default) and one polite host for everything (the
watched URLs, the source's start pages, the new pages), the host's gate lets about one
request through a slot, so discovery's polls are often deferred behind the scheduler's. A
deferred lead (a link heard from a start page the scheduler read) used to be dropped, and the
start pages answer 304 from then on, so it was never heard again; a deferred first read of a
source's page built its crawl from no body. The first-hour tour found 1 of its 3 new pages in
120 s that way.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Iterator, Sequence
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from crawler.service import CrawlService
from crawler.store import NewUrl, SourceSpec, Store
from crawler.workers import PollAnswer, Poller, PollJob, deferred_answer
from tests.service.conftest import service_settings

SLOT_S = 1.0
#: slots of the deferring run: discovery's last poll (an article asked for again after its
#: deferral) is made by the 8th, and it polls nothing after it; twice that leaves as many
#: slots for polls a busy machine defers at the deadline
SLOTS = 16
ARTICLES = ("w1.html", "w2.html", "s1.html")


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def news_site(tmp_path: Path) -> Iterator[str]:
    """Two pages and a front page with two sections of articles, served from a directory
    (conditional: ``If-Modified-Since`` answers 304)."""
    root = tmp_path / "site"
    (root / "news").mkdir(parents=True)
    (root / "one.html").write_text("<html><body><p>one</p></body></html>\n")
    (root / "two.html").write_text("<html><body><p>two</p></body></html>\n")
    (root / "news" / "index.html").write_text(
        '<html><body><a href="world.html">World</a> <a href="sport.html">Sport</a></body></html>'
    )
    for section, articles in (("world", ("w1", "w2")), ("sport", ("s1",))):
        links = " ".join(f'<a href="{a}.html">{a}</a>' for a in articles)
        (root / "news" / f"{section}.html").write_text(f"<html><body>{links}</body></html>\n")
        for name in articles:
            (root / "news" / f"{name}.html").write_text(f"<html><body>{name}</body></html>\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class DeferFirst:
    """A poller that defers the first poll of each URL (a polite host's gate held it past the
    deadline) and passes the others on."""

    def __init__(self, poller: Poller) -> None:
        self.poller = poller
        self.seen: set[str] = set()
        self.deferred = 0

    async def poll_chunks(
        self, jobs: Sequence[PollJob], deadline: float | None = None, linger: float | None = None
    ) -> AsyncGenerator[Sequence[PollAnswer], None]:
        first = [j for j in jobs if j.url not in self.seen]
        self.seen.update(j.url for j in first)
        self.deferred += len(first)
        if first:
            yield [deferred_answer(j, "timeout") for j in first]
        rest = [j for j in jobs if j not in first]
        if rest:
            async for chunk in self.poller.poll_chunks(rest, deadline, linger):
                yield chunk


async def test_a_deferred_first_read_and_deferred_leads_are_polled_later(
    database_url: str, news_site: str
) -> None:
    with Store(database_url) as store:
        store.add_urls([NewUrl(f"{news_site}/one.html"), NewUrl(f"{news_site}/two.html")])
        store.discovery.add_source(SourceSpec(f"{news_site}/news/"))
    settings = service_settings(database_url, capacity=4.0, fetch_workers=0)
    async with CrawlService(settings) as service:
        discovery = service.loop.discovery
        deferring = DeferFirst(discovery.poller)
        discovery.poller = deferring
        await service.run(asyncio.Event(), SLOTS)
        (source,) = discovery.sources.values()
        started_from = source.started_from
    with Store(database_url) as store:
        found = {d.url.rsplit("/", 1)[-1] for d in store.discovery.discovered()}
    assert set(ARTICLES) == found, (
        f"found {sorted(found)} of {ARTICLES}: a poll of discovery's deferred at the slot's "
        "deadline must be asked for again in a later slot (LeadPolls._poll_leads, "
        "SourceCrawls._polls)"
    )
    # the source's page (read by discovery first) and the three articles, each deferred once
    assert deferring.deferred == 4, deferring.seen
    assert started_from == "page"  # its links (the sections) are its start pages


@pytest.mark.slow
async def test_a_polite_host_with_slot_long_delays_still_gives_every_new_page(
    database_url: str, news_site: str
) -> None:
    with Store(database_url) as store:
        store.add_urls([NewUrl(f"{news_site}/one.html"), NewUrl(f"{news_site}/two.html")])
        store.discovery.add_source(SourceSpec(f"{news_site}/news/"))
    settings = service_settings(
        database_url,
        slot_seconds=SLOT_S,
        slot_deadline_s=None,  # the default: the slot
        per_host_min_delay_s=SLOT_S,  # about one request a slot on the one host
        per_host_concurrency=2,
        capacity=4.0,
        default_min_interval_s=2 * SLOT_S,
        fetch_workers=0,
    )
    async with CrawlService(settings) as service:
        await service.run(asyncio.Event(), 25)
    with Store(database_url) as store:
        found = {d.url.rsplit("/", 1)[-1] for d in store.discovery.discovered()}
    assert set(ARTICLES) <= found, (
        f"found {sorted(found)} of {ARTICLES} in 25 slots: a lead deferred at the slot's "
        "deadline must stay queued for a later slot (see LeadPolls._poll_leads)"
    )
