"""What an operator sees from the database after real slots: the polls a slot deferred (per
host and reason, in ``crawler stats``) and the pages judged cut at a parse limit (in
``crawler show``). Real servers on loopback, a real service, the real CLI, both databases."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from sqlalchemy import func, select
from typer.testing import CliRunner

from crawler.cli import app
from crawler.detect._guard import MAX_OPEN_ELEMENTS
from crawler.fetch import validate_url
from crawler.service import CrawlService, SlotSummary
from crawler.store import NewUrl, Store, StoreUnavailable
from crawler.store.models import deferrals, poll_log
from crawler.testsite.hostile import HostileServer
from tests.service.conftest import service_settings


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("CRAWLER_CONFIG", raising=False)
    monkeypatch.delenv("CRAWLER_DATABASE_URL", raising=False)
    return CliRunner()


async def test_deferred_polls_are_kept_per_slot_host_and_reason(
    database_url: str, cli: CliRunner
) -> None:
    """A trickling host's polls are deferred every slot: kept as deferral rows by the slot's
    commit (also when that commit is retried after an outage), shown by ``crawler stats``."""
    async with (
        HostileServer("127.0.0.1") as ordinary,
        HostileServer("127.0.0.2", trickle_s=0.5) as trickling,
    ):
        urls = [ordinary.url(f"/page/{k}") for k in range(4)]
        urls += [trickling.url(f"/trickle?{k}") for k in range(3)]
        with Store(database_url) as store:
            store.add_urls([NewUrl(validate_url(u)) for u in urls])
        # The ordinary host's four polls, one at a time (per_host_concurrency), must fit in
        # each slot however busy the machine. The first slot lasts its deadline (the
        # trickling host's queued polls are deferred then), the second only as long as its
        # polls (that host's are held at once). With 50 ms slots and a 1 s deadline 2-3 of
        # the 4 made the second slot at load 3: a late slot's deadline is cut by up to half
        # (crawler/service/_loop.py), and the host's cap (crawler/service/_caps.py: the
        # slot's length over its response time, one at a time) allows 4 polls only while
        # its answers take under 15 ms. Slots of the deadline's length start on time, with
        # the whole deadline, and cap the host below 4 polls only past 0.22 s an answer
        # (0.9 of the slot over four), while the four polls took 10 ms at load 3 (2026-11-27).
        settings = service_settings(
            database_url,
            capacity=7.0,  # every URL, every slot
            fetch_timeout_s=30.0,
            slot_seconds=1.0,
            slot_deadline_s=1.0,
            per_host_concurrency=1,
        )
        summaries: list[SlotSummary] = []
        async with CrawlService(settings) as service:
            original = service.store.commit_slot
            refused: list[int] = []

            def commit_after_an_outage(*args: Any, **kwargs: Any) -> None:
                if not refused:  # the first slot's commit: kept pending, retried
                    refused.append(1)
                    raise StoreUnavailable("committing the slot: database unavailable (outage)")
                original(*args, **kwargs)

            service.store.commit_slot = commit_after_an_outage  # type: ignore[method-assign]
            await service.run(asyncio.Event(), 2, summaries.append)
    slow = f"{trickling.host}:{trickling.port}"
    print(summaries)
    assert [s.committed for s in summaries] == [False, True]  # both written by the 2nd
    assert [s.polls for s in summaries] == [4, 4]  # the ordinary host, fully
    # the trickling host: its first poll is in flight at the first deadline and goes on
    # past the slot (not polled again meanwhile); the other two queue behind it, deferred
    assert [s.deferred for s in summaries] == [2, 2]
    with Store(database_url) as store:
        with store.engine.connect() as conn:
            rows = conn.execute(
                select(deferrals.c.slot, deferrals.c.host, deferrals.c.reason, deferrals.c.polls)
            ).all()
            logged = conn.execute(select(func.count()).select_from(poll_log)).scalar_one()
        stats = store.stats()
    assert logged == 8  # deferred polls are not polls: no poll-log rows
    assert {r.host for r in rows} == {slow}
    per_slot: dict[int, int] = {}
    for r in rows:
        per_slot[r.slot] = per_slot.get(r.slot, 0) + r.polls
    assert sorted(per_slot.values()) == [2, 2] and len(per_slot) == 2
    # queued behind the poll in flight (politeness)
    assert {r.reason for r in rows} == {"politeness"}
    assert sum(stats.deferred.values()) == 4 and stats.polls == 8
    assert [h.host for h in stats.deferred_hosts] == [slow]
    assert stats.deferred_hosts[0].deferred == 4

    shown = cli.invoke(app, ["stats", "--json", "--database-url", database_url])
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert doc["deferred"] == stats.deferred
    (host,) = doc["deferred_hosts"]
    assert host["host"] == slow and host["deferred"] == 4
    assert sum(host["by_reason"].values()) == 4
    table = cli.invoke(app, ["stats", "--database-url", database_url])
    assert table.exit_code == 0, table.output
    assert "deferred" in table.stdout and slow in table.stdout
    assert "by timeout" in table.stdout


@pytest.fixture
async def deep_site() -> AsyncIterator[str]:
    """A page nested deeper than the open-elements limit, with a new edition (above the cut)
    at every request, so that every poll parses it; and an ordinary page."""
    depth = MAX_OPEN_ELEMENTS + 500
    nested = "<div>" * depth + "the bottom" + "</div>" * depth
    plain = "<html><body><p>An ordinary page.</p></body></html>"
    editions = iter(range(1_000_000))

    async def page(request: web.Request) -> web.Response:
        if request.path != "/deep":
            return web.Response(text=plain, content_type="text/html")
        body = f"<html><body><p>Edition {next(editions)}</p>{nested}</body></html>"
        return web.Response(text=body, content_type="text/html")

    application = web.Application()
    application.router.add_get("/{name}", page)
    runner = web.AppRunner(application)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("fetch_workers", [1, 0], ids=["crawl-workers", "in-process"])
async def test_a_page_cut_at_the_open_elements_limit_says_so_in_crawler_show(
    database_url: str, deep_site: str, cli: CliRunner, fetch_workers: int
) -> None:
    deep, plain = validate_url(f"{deep_site}/deep"), validate_url(f"{deep_site}/plain")
    with Store(database_url) as store:
        store.add_urls([NewUrl(deep), NewUrl(plain)])
    # a slot waits for its polls (30 s) however busy the machine: judging the deep page
    # took over the 2 s default deadline under load, and its poll was deferred
    settings = service_settings(
        database_url,
        capacity=2.0,
        fetch_workers=fetch_workers,
        slot_deadline_s=30.0,
        fetch_timeout_s=30.0,
        # both pages every slot: the host's cap (from its response times: the deep page's
        # took over a 50 ms slot's worth under load, and the second slot polled one page)
        # is not what is shown here (tests/service/test_caps.py)
        host_caps=False,
    )
    summaries: list[SlotSummary] = []
    async with CrawlService(settings) as service:
        await service.run(asyncio.Event(), 2, summaries.append)
    assert [s.polls - s.errors for s in summaries] == [2, 2], _errors_of(database_url)

    shown = cli.invoke(app, ["show", deep, "--json", "--database-url", database_url])
    assert shown.exit_code == 0, shown.output
    polls = json.loads(shown.stdout)["polls"]
    assert [p["outcome"] for p in polls] == ["hit", "baseline"]  # most recent first
    assert all(p["truncated"] is True for p in polls), polls
    shown = cli.invoke(app, ["show", plain, "--json", "--database-url", database_url])
    polls = json.loads(shown.stdout)["polls"]
    assert len(polls) == 2 and all(p["truncated"] is False for p in polls)
    table = cli.invoke(app, ["show", deep, "--database-url", database_url])
    assert table.exit_code == 0, table.output
    assert "truncated" in table.stdout and "yes" in table.stdout


def _errors_of(database_url: str) -> list[tuple[str, str | None]]:
    """What the failed polls of a run were (for a failure's message)."""
    from sqlalchemy import select

    from crawler.store.models import poll_log

    with Store(database_url) as store, store.engine.connect() as conn:
        rows = conn.execute(select(poll_log.c.outcome, poll_log.c.error)).all()
    return [(r.outcome, r.error) for r in rows if r.outcome == "error"]
