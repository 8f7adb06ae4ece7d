"""Ten lease changes: constraints hold, and every poll of a moved site lands (real processes).

Workers join, leave, are killed (``kill -9``) and one is restarted under its own name, ten
changes of who holds which site, on one logged site (60 pages on 6 loopback hosts, every
host's robots.txt asking a Crawl-delay of 1 s, longer than the 0.5 s slot: a per-host cap
below one poll per slot). One URL of each host is paused and one has an operator bound (at
least ``MIN_INTERVAL`` s between two polls). From the site's own log (one User-Agent per
worker) and the database:

* no paused URL is ever requested; no bounded URL is requested twice within its bound by
  one worker; no worker requests a host twice within one slot (its cap); at every
  hand-over of a host between two workers the new owner's first request comes at least
  the Crawl-delay after the old owner's last (the new owner counts the delay from the old
  owner's last poll of the host in the poll log: a live owner releases a site once the
  slots that polled it have committed);
* every request the site logged has its poll-log row, except the requests a killed worker
  made in its last seconds (its slot in flight dies with it): a site moved between live
  workers lands the polls, changes and learning of the old owner's slot in flight (its
  commit, then its release, in one transaction), so no poll is fenced;
* the worker restarted under its own name got its sites back (static membership).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, text

from crawler.store import Store
from crawler.testsite import site_process
from tests.cluster._harness import (
    UA_PREFIX,
    SiteLog,
    Workers,
    lease_epochs,
    owners,
    schema,
    site_urls,
    wait_until,
    watch,
)

pytestmark = pytest.mark.slow

PAGES = 60
HOSTS = 6
SLOT = 0.5
CRAWL_DELAY = 1.0  # seconds between two requests to one host: a cap under 1 poll per slot
MIN_INTERVAL = 4.0  # seconds: 8 slots
#: a killed worker's requests this close to its kill may have died with its slot
KILLED_WINDOW = 3.0
#: the site's log times arrivals; both requests' trips are on loopback
HANDOVER_SLACK = 0.02
FENCED = re.compile(r"fenced: (\d+) poll")


def test_ten_lease_changes_keep_constraints_and_land_every_poll(
    _postgres: Any, tmp_path: Path
) -> None:
    rates = np.full(PAGES, 0.5)  # every page changes often: the scheduler wants them all
    with (
        site_process(
            rates, hosts=HOSTS, tick_seconds=SLOT, page_size=400, seed=5, crawl_delay=CRAWL_DELAY
        ) as port,
        schema(_postgres) as url,
    ):
        urls = site_urls(port, PAGES, HOSTS)
        ids = watch(url, urls)
        paused = list(range(1, HOSTS + 1))  # one page of each host
        bounded = list(range(HOSTS + 1, 2 * HOSTS + 1))  # another of each
        with Store(url) as st:
            st.edit_urls([ids[urls[k - 1]] for k in paused], {"paused": True})
            st.edit_urls([ids[urls[k - 1]] for k in bounded], {"min_interval_s": MIN_INTERVAL})
        engine = create_engine(url)
        workers = Workers(url, tmp_path, capacity=8.0, slot_seconds=SLOT)
        # a restart under the same name must come back within the worker timeout (a
        # process's start took 6 s, 12 s at load average 25 and over 20 s once in the
        # full suite on two cores, on the shared machine)
        workers.extra.update(
            {
                "CRAWLER_HEARTBEAT_S": "0.5",
                "CRAWLER_WORKER_TIMEOUT_S": "40.0",
                "CRAWLER_LOG_LEVEL": "INFO",
            }
        )
        log = SiteLog(port)
        try:
            changes, kills, static, changed_at = _scenario(workers, engine)
        finally:
            workers.stop_all()  # a clean stop commits what is pending
            log.refresh()
        rows = _rows_per_page(engine, ids, urls)
        engine.dispose()
    fenced = sum(
        int(m.group(1)) for p in tmp_path.glob("*.log") for m in FENCED.finditer(p.read_text())
    )
    _check(log, changes, kills, static, rows, fenced, paused, bounded, changed_at)


def _scenario(
    workers: Workers, engine: Any
) -> tuple[list[str], dict[str, float], tuple[int, int], list[float]]:
    changes: list[str] = []
    changed_at: list[float] = []
    kills: dict[str, float] = {}

    def holders(expected: set[str]) -> bool:
        workers.check()
        return set(owners(engine).values()) == expected

    def step(what: str, expected: set[str]) -> None:
        changes.append(what)
        changed_at.append(time.time())
        wait_until(lambda: holders(expected), 90, what=f"{what}: sites held by {expected}")
        time.sleep(3.0)

    def kill(name: str) -> None:
        kills[name] = time.time()
        workers.kill(name)

    workers.start("w1")
    step("+w1", {"w1"})
    workers.start("w2")
    step("+w2", {"w1", "w2"})
    workers.start("w3")
    step("+w3", {"w1", "w2", "w3"})
    workers.leave("w2")
    step("-w2", {"w1", "w3"})
    kill("w3")
    step("kill w3", {"w1"})
    workers.start("w4")
    step("+w4", {"w1", "w4"})
    # a move still under way (revoked, not yet handed over) goes on to w4 whatever w1
    # does: the sites w1 keeps are counted once no lease is moving
    wait_until(lambda: not moving(engine), 60, what="the placement after +w4 settling")
    held = {s: e for s, (o, e) in lease_epochs(engine).items() if o == "w1"}
    kill("w1")
    workers.start("w1")  # restarted under its name: static membership

    def kept() -> int:
        after = lease_epochs(engine)
        return sum(1 for s, e in held.items() if after[s] == ("w1", e + 1))

    with contextlib.suppress(AssertionError):  # reported, and checked at the end
        wait_until(lambda: kept() == len(held), 50, what="the restarted w1 taking its sites")
    taken = kept()
    step("kill w1, restart w1", {"w1", "w4"})
    workers.start("w2")
    step("+w2", {"w1", "w2", "w4"})
    kill("w4")
    step("kill w4", {"w1", "w2"})
    workers.leave("w1")
    step("-w1", {"w2"})
    return changes, kills, (taken, len(held)), changed_at


def moving(engine: Any) -> int:
    """The leases revoked from their owner or released, not yet handed to the next one."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM cluster_leases "
                    "WHERE revoked_at IS NOT NULL OR worker_id IS NULL"
                )
            ).scalar_one()
        )


def _rows_per_page(engine: Any, ids: dict[str, int], urls: list[str]) -> Counter[int]:
    page_of = {ids[u]: k for k, u in enumerate(urls, start=1)}
    with engine.connect() as conn:
        found = conn.execute(text("SELECT url_id, count(*) FROM poll_log GROUP BY url_id")).all()
    return Counter({page_of[int(u)]: int(n) for u, n in found})


def _check(
    log: SiteLog,
    changes: list[str],
    kills: dict[str, float],
    static: tuple[int, int],
    rows: Counter[int],
    fenced: int,
    paused: list[int],
    bounded: list[int],
    changed_at: list[float],
) -> None:
    page = np.asarray(log.page)
    t = np.asarray(log.t)
    who = np.asarray(log.client)
    ours = np.char.startswith(who.astype(str), UA_PREFIX)
    polled_paused = int(np.isin(page[ours], paused).sum())
    too_soon: list[tuple[int, str, float]] = []
    for k in bounded:
        for name in set(who[ours].tolist()):
            gaps = np.diff(np.sort(t[ours & (page == k) & (who == name)]))
            too_soon += [(k, name, float(g)) for g in gaps if g < MIN_INTERVAL - SLOT]
    over_cap: list[tuple[int, str, float]] = []
    handed: list[float] = []  # gaps between two workers' requests to one host
    host = (page - 1) % HOSTS + 1
    for h in range(1, HOSTS + 1):
        for name in set(who[ours].tolist()):
            gaps = np.diff(np.sort(t[ours & (host == h) & (who == name)]))
            over_cap += [(h, name, float(g)) for g in gaps if g < SLOT]
        mine = ours & (host == h)
        order = np.argsort(t[mine], kind="stable")
        times, names = t[mine][order], who[mine][order]
        pairs = zip(times[:-1], times[1:], names[:-1], names[1:], strict=True)
        handed += [float(b - a) for a, b, x, y in pairs if x != y]
    # every request has its poll-log row, but a killed worker's last seconds
    dying = np.zeros(page.size, dtype=bool)
    for name, at in kills.items():
        dying |= (who == UA_PREFIX + name) & (t > at - KILLED_WINDOW) & (t <= at)
    wanted = Counter(page[ours & ~dying].tolist())
    missing = {k: n - rows[k] for k, n in wanted.items() if rows[k] < n}
    kept, held = static
    print(
        f"\n{len(changes)} lease changes ({', '.join(changes)}): {int(ours.sum())} requests; "
        f"paused pages requested {polled_paused} times; bounded pages within their bound by "
        f"one worker {len(too_soon)} times; a host requested twice within one slot by one "
        f"worker {len(over_cap)} times (Crawl-delay {CRAWL_DELAY:g} s, slot {SLOT:g} s); at "
        f"{len(handed)} hand-overs of a host the new owner's first request came "
        f"{min(handed, default=float('nan')):.2f} s after the old owner's at the least "
        f"({sum(g < CRAWL_DELAY for g in handed)} within the Crawl-delay); requests "
        f"without their poll-log row: {sum(missing.values())} of {sum(wanted.values())} "
        f"({int(dying.sum())} requests of killed workers in their last {KILLED_WINDOW:g} s "
        f"left out); polls fenced: {fenced}; the restarted worker kept {kept} of its {held} "
        "sites"
    )
    assert len(changes) == 10
    assert int(ours.sum()) > 0
    assert polled_paused == 0, "a paused URL was polled"
    assert not too_soon, f"a bounded URL polled within its bound: {too_soon[:5]}"
    assert not over_cap, f"a host polled twice within one slot by one worker: {over_cap[:5]}"
    early = [g for g in handed if g < CRAWL_DELAY - HANDOVER_SLACK]
    assert not early, (
        f"at {len(early)} of {len(handed)} hand-overs the new owner asked the host sooner "
        f"than its Crawl-delay ({CRAWL_DELAY:g} s) after the old owner: {sorted(early)[:5]} "
        "s; the new owner's fetcher must count the host's delay from the hand-over "
        "(PollJob.handed_over_at)"
    )
    t0 = float(t[ours].min()) if ours.any() else 0.0
    seen = {
        k: [(str(c)[len(UA_PREFIX) :], round(float(x) - t0, 2))
            for x, c in zip(t[ours & (page == k)], who[ours & (page == k)], strict=True)]
        for k in missing
    }  # fmt: skip
    assert not missing, (
        f"requests without their poll-log row (page: missing): {missing}; their requests "
        f"(worker, s since the first request): {seen}; changes (s since then): "
        f"{[(c, round(a - t0, 1)) for c, a in zip(changes, changed_at, strict=True)]}; kills: "
        f"{ {n: round(a - t0, 1) for n, a in kills.items()} }"
    )
    assert fenced == 0, f"{fenced} polls fenced: a move lost the slot in flight"
    assert held > 0 and kept == held, f"the restarted worker kept {kept} of {held} sites"
