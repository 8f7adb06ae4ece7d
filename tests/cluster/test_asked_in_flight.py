"""A site asked of its owner while a poll of it is in flight: the poll lands, then the site
is released (real processes on PostgreSQL).

The logged site answers every page 2.5 s after its request (a slow host), longer than the
crawler's slot deadline (1 s): every poll outlives its slot and lands two slots later. One
worker holds every site; a second joins and the coordinator moves some sites to it, asking
the first worker for them while their polls are in flight. The old owner keeps an asked
site's URLs (polled no more) until its polls in flight have landed and committed, then
releases it. From the site's own log: every request made before the workers were stopped
has its poll-log row (landed within the answer delay and a slot after the request), and no
poll was fenced.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, text

from crawler.testsite import site_process
from tests.cluster._harness import (
    UA_PREFIX,
    SiteLog,
    Workers,
    owners,
    schema,
    site_urls,
    wait_until,
    watch,
)

pytestmark = pytest.mark.slow

PAGES = 24
HOSTS = 4
SLOT = 1.0
ANSWER_DELAY = 2.5  # seconds: longer than the slot deadline (the slot, 1 s): in flight
#: at two slot starts
#: a request's row lands once its answer came, in the slot in which it came (slots run
#: late under load)
LANDS_WITHIN = ANSWER_DELAY + 4 * SLOT
FENCED = re.compile(r"fenced: (\d+) poll")
WAITED = re.compile(r"asked of this worker with (\d+) poll")


def test_a_site_asked_during_a_slow_poll_lands_the_poll_then_goes(
    _postgres: Any, tmp_path: Path
) -> None:
    rates = np.full(PAGES, 0.2)
    with (
        site_process(
            rates, hosts=HOSTS, tick_seconds=SLOT, page_size=400, seed=3,
            answer_delay_s=ANSWER_DELAY,
        ) as port,
        schema(_postgres) as url,
    ):  # fmt: skip
        urls = site_urls(port, PAGES, HOSTS)
        ids = watch(url, urls)
        engine = create_engine(url)
        workers = Workers(url, tmp_path, capacity=6.0, slot_seconds=SLOT)
        workers.extra.update(
            {
                "CRAWLER_HEARTBEAT_S": "0.5",
                "CRAWLER_WORKER_TIMEOUT_S": "20.0",
                "CRAWLER_FETCH_TIMEOUT_S": "5",
                "CRAWLER_LOG_LEVEL": "INFO",
                # no cap from the hosts' slow answers: every site polled in every slot
                "CRAWLER_HOST_CAPS": "false",
            }
        )
        log = SiteLog(port)
        try:
            workers.start("w1")
            wait_until(lambda: _held_by(workers, engine, {"w1"}), 90, what="w1 holding all")
            time.sleep(4 * SLOT)
            workers.start("w2")
            wait_until(lambda: _held_by(workers, engine, {"w1", "w2"}), 90, what="a move to w2")
            time.sleep(6 * SLOT)
            stopped_at = time.time()
        finally:
            workers.stop_all()
            log.refresh()
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT url_id, polled_at FROM poll_log")).all()
        engine.dispose()
    page_of = {ids[u]: k for k, u in enumerate(urls, start=1)}
    landed: dict[int, list[float]] = {}
    for url_id, at in rows:
        landed.setdefault(page_of[int(url_id)], []).append(at.timestamp())
    outputs = {p.stem: p.read_text() for p in tmp_path.glob("*.log")}
    fenced = sum(int(m.group(1)) for o in outputs.values() for m in FENCED.finditer(o))
    waited = sum(int(m.group(1)) for o in outputs.values() for m in WAITED.finditer(o))
    # the requests made before the stop (a stop cuts the polls then in flight)
    before = [
        (page, at, who)
        for at, page, who in zip(log.t, log.page, log.client, strict=True)
        if who.startswith(UA_PREFIX) and at < stopped_at - LANDS_WITHIN
    ]
    missing = [
        (page, round(at - stopped_at, 2), who) for page, at, who in _unmatched(before, landed)
    ]
    print(
        f"\n{len(before)} requests before the stop, {len(missing)} without their poll-log "
        f"row; {waited} poll(s) in flight waited for by an asked site; {fenced} fenced"
    )
    assert waited > 0, "no site was asked while a poll of it was in flight"
    assert not missing, f"requests without their poll-log row (page, s, worker): {missing[:10]}"
    assert fenced == 0, f"{fenced} polls fenced"


def _held_by(workers: Workers, engine: Any, expected: set[str]) -> bool:
    workers.check()
    held = owners(engine)
    return len(held) == HOSTS and set(held.values()) == expected


def _unmatched(
    requests: list[tuple[int, float, str]], landed: dict[int, list[float]]
) -> list[tuple[int, float, str]]:
    """The requests without a poll-log row of their page landed within ``LANDS_WITHIN``
    after them, each row matched to one request at most (in time order)."""
    out: list[tuple[int, float, str]] = []
    unused = {page: sorted(times) for page, times in landed.items()}
    for page, at, who in sorted(requests, key=lambda r: (r[0], r[1])):
        rows = unused.get(page, [])
        while rows and rows[0] < at:  # landed before this request: another's, or none
            rows.pop(0)
        if rows and rows[0] <= at + LANDS_WITHIN:
            rows.pop(0)
        else:
            out.append((page, at, who))
    return out
