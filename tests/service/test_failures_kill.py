"""The failure record survives a kill -9 exactly: ``crawler run`` as a real
process on a site with a 404, a 410 and a timing-out page, killed by SIGKILL; then each
URL's stored streak is the trailing run of failed polls of its committed poll log."""

from __future__ import annotations

import asyncio
import signal
from itertools import groupby
from pathlib import Path

import pytest
from sqlalchemy import select

from crawler.store import NewUrl, Store
from crawler.store.models import poll_log
from crawler.testsite import zipf_rates
from crawler.testsite._failing import FailingSite
from tests.service.test_restart import cli, crawler_env, run_until


def trailing_errors(database_url: str) -> dict[int, int]:
    """Per URL: how many of its last committed polls failed in a row."""
    with Store(database_url) as store, store.engine.connect() as conn:
        rows = conn.execute(
            select(poll_log.c.url_id, poll_log.c.outcome).order_by(
                poll_log.c.url_id, poll_log.c.slot, poll_log.c.id
            )
        ).all()
    out: dict[int, int] = {}
    for uid, polls in groupby(rows, key=lambda r: int(r[0])):
        run = 0
        for _, outcome in polls:
            run = run + 1 if outcome == "error" else 0
        out[uid] = run
    return out


@pytest.mark.slow
async def test_the_failure_record_is_exact_after_sigkill(database_url: str, tmp_path: Path) -> None:
    site = FailingSite(zipf_rates(20, 0.6, 1.0), page_size=2_000, seed=4, hang_s=2.0)
    site.failing.update({2: "404", 5: "410", 9: "timeout"})
    await site.start()
    try:
        with Store(database_url) as store:
            ids = dict(store.add_urls([NewUrl(u) for u in site.urls()]).added)
        env = crawler_env(database_url, "bayes") | {
            "CRAWLER_FETCH_TIMEOUT_S": "0.3",
            "CRAWLER_SLOT_DEADLINE_S": "1.5",
        }
        await run_until(env, database_url, 150, signal.SIGKILL)
        for phase in ("killed", "restarted"):
            runs = trailing_errors(database_url)
            with Store(database_url) as store:
                record = {row.url_id: row for _, row in store.url_failures()}
            failing = {uid for uid, n in runs.items() if n}
            assert set(record) == failing, phase
            for uid, row in record.items():
                assert row.streak == runs[uid], (phase, uid)
            missing, gone, slow = (ids[site.url(k)] for k in (2, 5, 9))  # 404, 410, timeout
            assert record[gone].retired and record[gone].kind == "gone"
            assert record[missing].retired == (record[missing].streak >= 3)
            assert record[missing].kind == "permanent"
            assert not record[slow].retired and record[slow].kind == "transient"
            # a retired URL is polled again only as a probe (every retired_probe_interval_s)
            assert runs[gone] == 1 and runs[missing] == 3
            if phase == "killed":  # a restart runs on from the committed record
                await asyncio.to_thread(cli, env, "run", "--max-slots", "40")
    finally:
        await site.stop()
