"""Change history end to end: the real service against a loopback test site, then the CLI.

A page changed three times has three changes, each with its before and after (the readable
text of the versions the site served), and ``crawler diff`` turns each before into its
after; after an upgrade of the database no URL sees a spurious change.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import numpy as np
import pytest
from sqlalchemy import Connection, select, text, update
from typer.testing import CliRunner

from crawler.cli import app
from crawler.detect import readable_text
from crawler.fetch import validate_url
from crawler.service import CrawlService, SlotSummary
from crawler.sites import site_of
from crawler.store import NewUrl, Store, compress_snapshot
from crawler.store.models import change_baselines as baselines
from crawler.store.models import urls
from crawler.testsite import ChangingSite
from crawler.testsite._pages import PageRenderer
from tests.detect.test_diff import apply_unified_diff
from tests.detect.test_lines import RECORDED
from tests.service.conftest import service_settings
from tests.store._helpers import poll, slot_record

PAGE_SIZE = 4_000
CHANGES = 3


def text_of(k: int, version: int) -> str:
    body = PageRenderer(PAGE_SIZE).render(k, version, "any nonce")
    found = readable_text(body, "text/html")
    assert found is not None
    return found.decode()


async def change_page_three_times(
    database_url: str, site: ChangingSite, **overrides: object
) -> None:
    """Watch both pages; tick the site (page 2 changes, page 1 never) once the service has
    seen page 2's current version, until it has seen ``CHANGES`` changes."""
    with Store(database_url) as store:
        store.add_urls([NewUrl(validate_url(u)) for u in site.urls()])
    settings = service_settings(database_url, capacity=2.0, **overrides)
    stop = asyncio.Event()

    def on_slot(_: SlotSummary) -> None:
        seen = site.truth.last_served.get(2)
        if site.truth.true_changes_seen >= CHANGES:
            stop.set()
        elif seen is not None and seen == int(site.versions[1]):
            site.tick()

    async with CrawlService(settings) as service:
        await service.run(stop, 400, on_slot)
    assert site.truth.true_changes_seen == CHANGES


@pytest.mark.slow
@pytest.mark.parametrize("fetch_workers", [1, 0], ids=["crawl-workers", "in-process"])
async def test_three_changes_each_have_their_before_and_after(
    database_url: str, fetch_workers: int
) -> None:
    site = ChangingSite(np.array([0.0, 1.0]), manual=True, page_size=PAGE_SIZE, seed=1)
    await site.start()
    try:
        await change_page_three_times(database_url, site, fetch_workers=fetch_workers)
    finally:
        await site.stop()
    page1, page2 = (validate_url(u) for u in site.urls())
    with Store(database_url) as store:
        assert store.list_changes(url=page1) == []  # nonces only: never a change
        listed = store.list_changes(url=page2)
        found = store.change_texts([c.id for c in listed])
    assert len(listed) == CHANGES == int(site.versions[1])
    for version, change in enumerate(listed, start=1):
        texts = found[change.id]
        assert texts.before == text_of(2, version - 1)
        assert texts.after == text_of(2, version)
        assert texts.before.split("\n")[0] == f"Page 2 - edition {version - 1}"

    cli = CliRunner()
    for change in listed:
        shown = cli.invoke(
            app, ["diff", page2, "--change", str(change.id), "--database-url", database_url]
        )
        assert shown.exit_code == 0, shown.output
        texts = found[change.id]
        assert texts.before is not None and texts.after is not None
        assert apply_unified_diff(texts.before, shown.stdout) == texts.after
    newest = cli.invoke(app, ["diff", page2, "--database-url", database_url])
    assert newest.exit_code == 0 and newest.stdout == shown.stdout  # default: the newest
    page = cli.invoke(app, ["diff", page2, "--html", "--database-url", database_url])
    assert (
        page.exit_code == 0
        and "<table" in page.stdout
        and "Page&nbsp;2&nbsp;-&nbsp;edition" in page.stdout
    )
    assert 'class="diff_chg"' in page.stdout  # the changed words marked

    exported = cli.invoke(app, ["changes", "--json", "--database-url", database_url])
    assert exported.exit_code == 0, exported.output
    docs = json.loads(exported.stdout)
    assert [d["id"] for d in docs] == [c.id for c in listed]
    assert {d["url"] for d in docs} == {page2}
    lines = cli.invoke(
        app, ["changes", "--ndjson", "--text", "--url", page2, "--database-url", database_url]
    )
    assert lines.exit_code == 0, lines.output
    rows = [json.loads(line) for line in lines.stdout.splitlines()]
    assert [r["after"] for r in rows] == [text_of(2, v) for v in range(1, CHANGES + 1)]
    assert all(apply_unified_diff(r["before"], r["diff"]) == r["after"] for r in rows)


@pytest.mark.slow
def _add_as_0006_wrote(conn: Connection, watched: list[str]) -> None:
    """Watch ``watched`` (ids 1, 2, ...) as the code of schema 0006 did: the store's
    ``add_urls`` writes the columns of the newest schema."""
    now = datetime.now(UTC)
    if conn.dialect.name == "sqlite":
        now = now.replace(tzinfo=None)
    for host in sorted({site_of(url) for url in watched}):
        conn.execute(
            text("INSERT INTO sites (host, created_at) VALUES (:host, :now)"),
            {"host": host, "now": now},
        )
    for url in watched:
        conn.execute(
            text(
                "INSERT INTO urls (url, site_id, importance, added_at, polls, hits, misses, "
                "not_modified, errors) SELECT :url, id, 1.0, :now, 0, 0, 0, 0, 0 FROM sites "
                "WHERE host = :host"
            ),
            {"url": url, "host": site_of(url), "now": now},
        )


async def test_no_url_sees_a_spurious_change_on_upgrade(empty_database_url: str) -> None:
    """A database of the previous schema whose URLs carry the hashes the previous code
    computed (recorded in tests/detect/test_lines.py): after the upgrade, polls of the same
    pages are misses (asking once for each page's text), the changes stored before read as
    one line, and the next change has the readable text it replaced."""
    site = ChangingSite(np.zeros(7), manual=True, page_size=PAGE_SIZE, seed=1)
    await site.start()
    try:
        with Store(empty_database_url) as store:
            store.upgrade("0006")
            with store.engine.begin() as conn:
                _add_as_0006_wrote(conn, [validate_url(site.url(k)) for k in (1, 7)])
                for k in (1, 7):
                    conn.execute(
                        update(urls)
                        .where(urls.c.url == validate_url(site.url(k)))
                        .values(last_hash=RECORDED[(f"site-{k}-0", "none")], polls=5)
                    )
                conn.execute(
                    text(
                        "INSERT INTO changes (url_id, slot, detected_at, old_hash, new_hash, "
                        "snapshot) VALUES (1, 1, '2026-01-01 00:00:00+00:00', 'a', :h, :s)"
                    ),
                    {
                        "h": RECORDED[("site-1-0", "none")],
                        "s": compress_snapshot("Page 1\n  - edition 0 ", None),
                    },
                )
        summaries: list[SlotSummary] = []
        settings = service_settings(empty_database_url, capacity=2.0)
        async with CrawlService(settings) as service:  # upgrades the database as it starts
            await service.run(asyncio.Event(), 6, summaries.append)
        assert sum(s.hits for s in summaries) == 0
        assert sum(s.baselines for s in summaries) == 0
        assert sum(s.misses for s in summaries) >= 2
        with Store(empty_database_url) as store:
            with store.engine.connect() as conn:  # their text was asked for, once each
                kept = dict(
                    conn.execute(select(baselines.c.url_id, baselines.c.content_hash))
                    .tuples()
                    .all()
                )
            assert sorted(kept.values()) == sorted(
                RECORDED[(f"site-{k}-0", "none")] for k in (1, 7)
            )
            (old,) = store.list_changes()
            legacy = store.change_text(old.id)
        assert legacy is not None and legacy.after == "Page 1 - edition 0"  # one line
        # page 1 changes: its change has the readable text it replaced as its before
        site.rates[0] = 1.0
        site.tick()
        summaries.clear()
        async with CrawlService(settings) as service:
            await service.run(asyncio.Event(), 4, summaries.append)
    finally:
        await site.stop()
    assert sum(s.hits for s in summaries) == 1 == site.truth.true_changes_seen
    with Store(empty_database_url) as store:
        _, new = store.list_changes()
        found = store.change_text(new.id)
    assert found is not None
    assert (found.before, found.after) == (text_of(1, 0), text_of(1, 1))


async def test_the_housekeeping_job_applies_the_retention_of_changes(database_url: str) -> None:
    with Store(database_url) as store:
        (uid,) = [u for _, u in store.add_urls([NewUrl("https://example.com/a")]).added]
        polls = [poll(uid, "baseline", content_hash="h0", snapshot="v0")] + [
            poll(uid, "hit", content_hash=f"h{k}", old_hash=f"h{k - 1}", snapshot=f"v{k}")
            for k in range(1, 5)
        ]
        for n, p in enumerate(polls):
            store.commit_slot(slot_record(n + 1, [p]), [p])
    settings = service_settings(database_url, changes_keep_per_url=2, fetch_workers=0)
    async with CrawlService(settings) as service:
        job = service._housekeeping.get_job("prune-poll-log")
        assert job is not None and job.func == service.prune
        await service.prune()
    with Store(database_url) as store:
        kept = store.change_texts([c.id for c in store.list_changes()])
    assert sorted((t.before, t.after) for t in kept.values()) == [("v2", "v3"), ("v3", "v4")]
