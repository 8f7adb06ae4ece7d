"""A worker started while its database refuses connections waits for it, then works.

One ``crawler run --cluster`` worker reaches PostgreSQL through a TCP proxy
(tests/cluster/_proxy.py) that refuses every connection when the worker starts (a
database restarting, or an orchestrator starting the crawler first). The worker must stay
up and say in its log what it waits for (the proxy refuses until it has logged ``WAITS``
tries, and at least ``DOWN_S`` seconds: a process's start takes several seconds under
load); once the proxy forwards again it registers, takes the sites and polls them (the
site's own log is the witness). Before, it exited at once with "database unavailable".
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, make_url

from crawler.testsite import site_process
from tests.cluster._harness import (
    UA_PREFIX,
    SiteLog,
    Workers,
    owners,
    schema,
    site_urls,
    via,
    wait_until,
    watch,
)
from tests.cluster._proxy import TcpProxy

pytestmark = pytest.mark.slow

PAGES = 20
HOSTS = 4
SLOT = 0.5
DOWN_S = 8.0
WAITS = 3
WAITED = "start-up waits for the database"


def test_a_worker_started_without_its_database_waits_for_it(_postgres: Any, tmp_path: Path) -> None:
    rates = np.full(PAGES, 0.3)
    with (
        site_process(rates, hosts=HOSTS, tick_seconds=SLOT, page_size=300, seed=3) as port,
        schema(_postgres) as url,
    ):
        watch(url, site_urls(port, PAGES, HOSTS))
        target = make_url(url)
        proxy = TcpProxy(target.host or "127.0.0.1", target.port or 5432)
        proxied = via(url, proxy.start())
        proxy.refuse()
        engine = create_engine(url)
        workers = Workers(proxied, tmp_path, capacity=4.0, slot_seconds=SLOT)
        workers.extra["CRAWLER_LOG_LEVEL"] = "INFO"
        log = SiteLog(port)
        try:
            worker = workers.start("w1")
            began = time.monotonic()

            def waited_enough() -> bool:
                workers.check()  # an exit fails here, with the worker's log
                return (
                    time.monotonic() - began >= DOWN_S
                    and worker.output(20_000).count(WAITED) >= WAITS
                )

            wait_until(waited_enough, 120, what=f"the worker logging {WAITS} waits")
            down_s = time.monotonic() - began
            waited = worker.output(20_000)
            up_at = time.time()
            proxy.recover()

            def polling() -> bool:
                workers.check()
                log.refresh()
                return set(owners(engine).values()) == {"w1"} and bool(
                    log.select([UA_PREFIX + "w1"], since=up_at).any()
                )

            wait_until(polling, 60, what="the worker registering and polling after the return")
            first = min(t for t, c in zip(log.t, log.client, strict=True) if c == UA_PREFIX + "w1")
        finally:
            workers.stop_all()
            proxy.close()
            engine.dispose()
    tries = waited.count(WAITED)
    print(
        f"\nworker started with its database refusing for {down_s:.1f} s: {tries} logged waits; "
        f"first request {first - up_at:+.2f} s after the database's return"
    )
    assert tries >= WAITS, (
        "the worker did not log what it waits for while the database refused; its log:\n"
        + waited[-2000:]
    )
    assert "take the service lock" in waited, waited[-2000:]
    assert first >= up_at, "the worker polled while its database refused connections"
