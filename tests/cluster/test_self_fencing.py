"""A cluster worker cut off from PostgreSQL fences itself (real processes, the site's log).

Two ``crawler run --cluster`` workers on one logged site (120 pages on 12 loopback hosts).
Worker ``cut`` reaches PostgreSQL through a TCP proxy (tests/cluster/_proxy.py); worker
``other`` directly. The proxy is first frozen (a partition: sockets open, nothing
forwarded) until ``other`` holds every site, then made to refuse every connection (a
restart) for a few seconds, then recovered. From the site's own log (one User-Agent per
worker) and the server's record of ``cut``'s last heartbeat (``heartbeat_at``, the
server's clock, the same machine as the site's):

* ``cut`` makes no request after its lease could expire (last heartbeat + worker timeout),
  and none later than its renew deadline after its last heartbeat (plus the time a request
  sent just before takes to arrive);
* ``other`` polls ``cut``'s sites after that;
* after the recovery ``cut`` polls again (it rejoins), and no page is polled by the two
  workers within one slot of each other.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, make_url, text

from crawler.testsite import site_process
from tests.cluster._harness import (
    UA_PREFIX,
    SiteLog,
    Workers,
    host_pages,
    owners,
    schema,
    site_urls,
    via,
    wait_until,
    watch,
)
from tests.cluster._proxy import TcpProxy

pytestmark = pytest.mark.slow

PAGES = 120
HOSTS = 12
SLOT = 0.5
HEARTBEAT = 0.3
TIMEOUT = 2.0  # worker_timeout_s
RENEW = 2.0 / 3.0 * TIMEOUT  # the default renew deadline
#: a request sent just before the deadline, or cancelled then, may still arrive this late
ARRIVAL = 0.3
CLUSTER = {
    "CRAWLER_HEARTBEAT_S": str(HEARTBEAT),
    "CRAWLER_WORKER_TIMEOUT_S": str(TIMEOUT),
    "CRAWLER_FETCH_TIMEOUT_S": "2",
    "CRAWLER_LOG_LEVEL": "INFO",
}


def _last_heartbeat(engine: Any, name: str) -> float:
    with engine.connect() as conn:
        value = conn.execute(
            text("SELECT extract(epoch FROM heartbeat_at) FROM cluster_workers WHERE name = :n"),
            {"n": name},
        ).scalar()
    assert value is not None, f"{name} has no worker row"
    return float(value)


@pytest.mark.parametrize("run", [1, 2])
def test_a_worker_cut_off_from_postgres_stops_before_its_lease_can_expire(
    _postgres: Any, tmp_path: Path, run: int
) -> None:
    rates = np.full(PAGES, 0.2)
    with (
        site_process(rates, hosts=HOSTS, tick_seconds=SLOT, page_size=500, seed=run) as port,
        schema(_postgres) as url,
    ):
        watch(url, site_urls(port, PAGES, HOSTS))
        target = make_url(url)
        proxy = TcpProxy(target.host or "127.0.0.1", target.port or 5432)
        proxy_port = proxy.start()
        engine = create_engine(url)
        workers = Workers(url, tmp_path, capacity=20.0, slot_seconds=SLOT, extra=dict(CLUSTER))
        try:
            _scenario(workers, via(url, proxy_port), port, proxy, engine)
        finally:
            workers.stop_all()
            proxy.close()
            engine.dispose()


def _scenario(workers: Workers, proxied: str, site_port: int, proxy: TcpProxy, engine: Any) -> None:
    log = SiteLog(site_port)
    cut_ua, other_ua = UA_PREFIX + "cut", UA_PREFIX + "other"
    cut = workers.start("cut", database_url=proxied)
    other = workers.start("other")
    alive = workers.check

    def both_hold_sites() -> bool:
        alive()
        return set(owners(engine).values()) == {"cut", "other"}

    wait_until(both_hold_sites, 90, what="both workers holding sites")
    wait_until(lambda: cut_ua in log.refresh().client, 60, what="the cut-off worker polling first")
    time.sleep(2 * SLOT)
    held = sorted(s for s, n in owners(engine).items() if n == "cut")

    # -- a partition: frozen sockets -----------------------------------------------------
    proxy.freeze()
    frozen_at = time.time()

    def all_with_the_other() -> bool:
        alive()
        return set(owners(engine).values()) == {"other"}

    wait_until(all_with_the_other, TIMEOUT + 30, what="the other worker holding every site")
    moved_at = time.time()
    time.sleep(2.0)
    renewed = _last_heartbeat(engine, "cut")  # the server's record of its last renewal
    # -- a restart: every connection refused -----------------------------------------------
    proxy.refuse()
    time.sleep(4.0)
    alive()
    recovered_at = time.time()
    proxy.recover()

    def rejoined() -> bool:
        alive()
        return bool(log.refresh().select([cut_ua], since=recovered_at).any())

    wait_until(rejoined, 60, what="the cut-off worker polling again after the recovery")
    time.sleep(6.0)
    log.refresh()

    t = np.asarray(log.t)
    cut_mask = log.select([cut_ua], since=frozen_at - 1.0, until=recovered_at)
    last = float(t[cut_mask].max()) if cut_mask.any() else frozen_at
    expiry = renewed + TIMEOUT
    pages = [k for s in held for k in host_pages(s, PAGES, HOSTS)]
    took = log.first_poll_after(pages, [other_ua], frozen_at)
    repeats = log.cross_worker_repeats([cut_ua, other_ua], SLOT, since=recovered_at)
    print(
        f"\nself-fencing: last heartbeat {renewed - frozen_at:+.2f} s from the freeze; last "
        f"request of the cut-off worker {last - renewed:+.3f} s after it (renew deadline "
        f"{RENEW:.2f} s, lease expiry {TIMEOUT:.2f} s); its sites all with the other after "
        f"{moved_at - frozen_at:.1f} s; {len(took)}/{len(pages)} of their pages polled by "
        f"the other before the recovery; after the recovery: "
        f"{int(log.select([cut_ua], since=recovered_at).sum())} polls by the rejoined "
        f"worker, {len(repeats)} page(s) polled by both within one slot"
    )
    assert last < expiry, f"the cut-off worker polled {last - expiry:.3f} s past its lease"
    assert last <= renewed + RENEW + ARRIVAL, (
        f"the cut-off worker polled {last - renewed:.3f} s after its last renewal "
        f"(renew deadline {RENEW:.2f} s)"
    )
    assert any(t_ < recovered_at for t_ in took.values()), "the other never took its pages"
    assert not repeats, f"polled by both workers within one slot after the rejoin: {repeats}"
    assert cut.alive() and other.alive()
