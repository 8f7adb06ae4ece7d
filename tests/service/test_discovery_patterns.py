"""A source's include pattern against a hostile page, in the real service over loopback HTTP.

The hostile host (127.0.0.5) serves a page linking ``/aaa.../`` (25 to 40 ``a``, then a
slash) and three news pages; the source's ``--include '(a+)+$|news'`` takes a backtracking
engine 2^n steps per such link (Python's ``re`` froze the whole service for about 45 s on
three links of 25). On RE2 the links are refused in linear time, the news pages found, and
three ordinary watched pages on 127.0.0.2..4 keep their polls per minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import psutil  # type: ignore[import-untyped]
import pytest
from typer.testing import CliRunner

from crawler.cli import app
from crawler.discovery import compile_pattern
from crawler.service import CrawlService, SlotSummary
from crawler.store import NewUrl, SourceSpec, Store
from crawler.testsite.hostile import HostileServer
from tests.service.conftest import service_settings

ORDINARY_HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
HOSTILE_HOST = "127.0.0.5"
PATTERN = "(a+)+$|news"
SLOT_S = 0.25
SLOTS = 48  # 12 s a phase
MB = 2**20


@pytest.fixture
async def servers() -> AsyncIterator[tuple[list[HostileServer], HostileServer]]:
    async with contextlib.AsyncExitStack() as stack:
        ordinary = [await stack.enter_async_context(HostileServer(h)) for h in ORDINARY_HOSTS]
        hostile = await stack.enter_async_context(HostileServer(HOSTILE_HOST))
        yield ordinary, hostile


async def _phase(database_url: str, ordinary: list[HostileServer]) -> tuple[float, float, float]:
    """Run the service for ``SLOTS`` slots: the ordinary pages' polls per minute (from the
    servers' own counts, first slot to last), and this process's RSS at the first slot and
    its peak (MB)."""
    settings = service_settings(
        database_url, slot_seconds=SLOT_S, capacity=20.0, discovery_share=0.2
    )
    process = psutil.Process()
    marks: list[tuple[float, int]] = []
    rss: list[float] = []

    def served() -> int:
        return sum(s.served[f"/page/{k}"] for k, s in enumerate(ordinary, 1))

    def on_slot(summary: SlotSummary) -> None:
        marks.append((time.monotonic(), served()))
        rss.append(process.memory_info().rss / MB)

    async with CrawlService(settings) as service:
        await service.run(asyncio.Event(), SLOTS, on_slot)
    (t0, n0), (t1, n1) = marks[0], marks[-1]
    return (n1 - n0) / (t1 - t0) * 60.0, rss[0], max(rss)


@pytest.mark.slow
async def test_a_backtracking_include_pattern_cannot_hold_the_service(
    database_url: str,
    servers: tuple[list[HostileServer], HostileServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ordinary, hostile = servers
    page = hostile.url("/news-links")
    a_links = [hostile.url(f"/{'a' * n}/") for n in range(25, 41)]
    news = [hostile.url(f"/news/{k}") for k in range(1, 4)]
    pattern = compile_pattern(PATTERN)  # the answers the scope gets: linear time, same as re's
    assert not any(pattern.search(u) for u in a_links)
    assert all(pattern.search(u) for u in [*news, page])
    with Store(database_url) as store:
        store.add_urls([NewUrl(s.url(f"/page/{k}")) for k, s in enumerate(ordinary, 1)])

    control, _, _ = await _phase(database_url, ordinary)

    monkeypatch.setenv("CRAWLER_ALLOW_PRIVATE_ADDRESSES", "true")
    added = CliRunner().invoke(
        app, ["sources", "add", page, "--include", PATTERN, "--database-url", database_url]
    )
    assert added.exit_code == 0, added.output
    hostile.served.clear()
    with_source, rss_start, rss_peak = await _phase(database_url, ordinary)

    assert hostile.served["/news-links"] >= 1  # the source was read, its links matched
    with Store(database_url) as store:
        found = {d.url for d in store.discovery.discovered()}
        watched = {r.url for r in store.list_urls()}
    assert not any(hostile.served[f"/{'a' * n}/"] for n in range(25, 41))
    assert set(news) <= found | watched
    assert not (set(a_links) & (found | watched))
    print(
        f"ordinary polls/min: {control:.0f} without the source, {with_source:.0f} with it; "
        f"RSS {rss_start:.0f} -> {rss_peak:.0f} MB"
    )
    assert with_source >= 0.9 * control, (with_source, control)
    assert rss_peak - rss_start <= 100, (rss_start, rss_peak)


async def test_a_saved_source_whose_pattern_re2_refuses_is_skipped(
    database_url: str,
    servers: tuple[list[HostileServer], HostileServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A source saved with a pattern RE2 cannot run (before ``sources add`` checked it) is
    logged once and skipped; the service and the other sources go on."""
    ordinary, hostile = servers
    with Store(database_url) as store:
        store.add_urls([NewUrl(ordinary[0].url("/page/1"))])
        ds = store.discovery
        ds.add_source(SourceSpec(hostile.url("/news-links"), include=(r"(news)\1",)))
        ds.add_source(SourceSpec(ordinary[1].url("/page/7")))
    settings = service_settings(database_url, slot_seconds=0.05, capacity=6.0, discovery_share=0.5)
    caplog.set_level(logging.ERROR, logger="crawler.service")
    async with CrawlService(settings) as service:
        await service.run(asyncio.Event(), 8)
        discovery = service.loop.discovery
        (broken,) = discovery.unusable.values()
        assert r"include pattern '(news)\1' is not a linear-time (RE2)" in broken[1]
        assert [s.row.url for s in discovery.sources.values()] == [ordinary[1].url("/page/7")]
    skipped = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 1 and hostile.url("/news-links") in skipped[0].getMessage()
    assert hostile.served["/news-links"] == 0
    assert ordinary[1].served["/page/7"] >= 1  # the other source was read
    assert ordinary[0].served["/page/1"] >= 4  # and the watched page polled, slot after slot
