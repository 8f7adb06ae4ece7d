"""No per-slot or per-change statement of a cluster worker scans every URL.

A worker that owns a small share of the sites (here 4 of 400, 1%) must pay for its
share, not for the whole watch list: the statements it runs at every slot (the version
checks, the records of its polls, the whole commit with its fence and scheduler rows, the
heartbeat, the weight report, the metrics' cluster row) and at every version bump (its
leases, the sites an edit changed and their URLs, its sites' rules, failures, revivals
and hosts, the saved rows, last polls and health state of a gained site, the release of a
site asked of it or taken back) are captured as the store runs them (reads and writes),
and PostgreSQL's planner is asked for their plans (``EXPLAIN``, which runs nothing) on
tables large enough and analysed (three changes and four events of every URL: the
history grows with time, and on small tables a sequential scan is the cheaper plan
whatever the indexes): none may hold a sequential scan of ``urls``, ``url_state``,
``changes`` or ``events``, and the sites an edit changed are found by their index, not by
reading every site. The coordinator's
statements read one row per site (``sites.url_count``, the leases), never the URLs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from sqlalchemy import event, text

from crawler import schedulers
from crawler.delivery import PAGE_STOPPED_CHANGING
from crawler.store import Fence, NewUrl, PollRecord, SlotRecord, Store, _cluster
from crawler.store._cluster import fence_rows

pytestmark = pytest.mark.slow

SITES, PER_SITE, OWN = 400, 100, 4
SCANNED = {"urls", "url_state", "changes", "events"}


@pytest.fixture
def db_backend() -> str:
    return "postgresql"


#: the statements EXPLAIN can plan (``SET LOCAL``, ``NOTIFY`` and the like are left out)
PLANNED = ("SELECT", "UPDATE", "INSERT", "DELETE", "WITH")


@contextmanager
def captured(store: Store) -> Iterator[list[tuple[str, Any]]]:
    """The statements (with their parameters; an executemany's first set) the store runs
    meanwhile."""
    seen: list[tuple[str, Any]] = []

    def record(
        _conn: Any, _cursor: Any, statement: str, params: Any, _ctx: Any, many: bool
    ) -> None:
        if statement.lstrip().upper().startswith(PLANNED):
            seen.append((statement, params[0] if many and params else params))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(store.engine, "before_cursor_execute", record)


def seq_scans(plan: dict[str, Any]) -> list[str]:
    """The relations a plan (EXPLAIN FORMAT JSON node) scans sequentially."""
    found = []
    if plan.get("Node Type") == "Seq Scan":
        found.append(str(plan.get("Relation Name")))
    for child in plan.get("Plans", []):
        found.extend(seq_scans(child))
    return found


def plans(store: Store, statements: list[tuple[str, Any]]) -> list[tuple[str, list[str]]]:
    """(statement, relations scanned sequentially) of each statement."""
    out = []
    with store.engine.connect() as conn:
        for statement, params in statements:
            raw = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, params).scalar()
            doc = raw if isinstance(raw, list) else json.loads(raw)
            out.append((statement, seq_scans(doc[0]["Plan"])))
    return out


def _fill(store: Store) -> tuple[str, list[str], dict[str, list[int]]]:
    """400 sites of 100 URLs, some paused, failing and revived, a saved state of every
    URL; a worker leasing 4 sites. Returns (worker id, its sites, URL ids by site)."""
    hosts = [f"s{k}.test" for k in range(SITES)]
    store.add_urls([NewUrl(f"http://{h}/p{i}") for h in hosts for i in range(PER_SITE)])
    ids, importance = store.active_urls()
    by_site: dict[str, list[int]] = {}
    with store.engine.begin() as conn:
        for uid, host in conn.execute(
            text("SELECT u.id, s.host FROM urls u JOIN sites s ON s.id = u.site_id")
        ):
            by_site.setdefault(host, []).append(int(uid))
        conn.execute(text("UPDATE urls SET fail_streak = 2 WHERE id % 37 = 0"))
    store.edit_urls([int(i) for i in ids[::41]], {"paused": True})
    store.revive_urls([int(i) for i in ids[::53]])
    with store.engine.begin() as conn:  # the history: changes and their events
        conn.execute(
            text(
                "INSERT INTO changes (url_id, slot, detected_at) SELECT id, s, "
                "now() - s * interval '1 minute' FROM urls, generate_series(1, 3) s"
            )
        )
        conn.execute(
            text(
                "INSERT INTO events (type, url_id, slot, created_at, payload, fanned_out) "
                "SELECT CASE WHEN s = 4 THEN :stopped ELSE 'page.changed' END, id, s, now(), "
                "'{}', true FROM urls, generate_series(1, 4) s"
            ),
            {"stopped": PAGE_STOPPED_CHANGING},
        )
    sched = schedulers.create("bayes", capacity=100.0, seed=1)
    sched.add(ids, importance=importance)
    store.save_scheduler_state(sched.take_delta())
    with store.engine.connect() as conn:
        conn.execute(text("ANALYZE"))
        conn.commit()
    wid = store.cluster.register_worker(10.0, name="w")
    store.cluster.claim_coordinator(wid)
    own = hosts[:OWN]
    store.cluster.assign_leases({h: (wid if h in own else None) for h in hosts}, wid)
    return wid, own, by_site


def _commit(store: Store, wid: str, polled: list[int]) -> None:
    """A slot's commit of polls of ``polled`` (errors and unchanged pages, their saved
    scheduler rows as the delta), fenced by the worker's leases."""
    now = datetime.now(UTC)
    polls = [
        PollRecord(u, "error", now, 503, error_kind="http_5xx")
        if k % 2
        else PollRecord(u, "not_modified", now, 304)
        for k, u in enumerate(polled)
    ]
    slot = SlotRecord(2, "bayes", now, 0.1, len(polls), 0, 0, len(polls) // 2, len(polls) // 2)
    delta = store.cluster.load_url_states("bayes", polled)
    assert store.commit_slot(slot, polls, delta, Fence(wid, store.cluster.leases_of(wid))) == 0


def test_a_worker_with_a_small_share_never_scans_every_url(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    wid, own, by_site = _fill(store)
    version = store.watch_list_version()
    edited_read = False
    polled = sorted(i for h in own for i in by_site[h][:5])
    gained = by_site[own[0]]
    with captured(store) as per_bump:
        store.cluster.leases_of(wid)
        store.cluster.held_leases(wid)
        store.cluster.active_urls_of(own)
        store.cluster.sites_edited_since(version - 1)
        store.cluster.active_urls_of(own[:1])
        store.url_rules(own)
        store.url_failures(own)
        store.revived_since(version - 1, own)
        store.url_hosts(None, own)
        store.cluster.load_url_states("bayes", gained)
        store.cluster.last_polled(gained, 120.0)
        store.health_state_at(PAGE_STOPPED_CHANGING, gained)
        store.cluster.release_leases(wid, {own[1]: 1})  # (matches no row: the plan is the point)
    with captured(store) as per_slot:
        store.cluster.versions()
        store.url_records(polled)
        with store.engine.begin() as conn:
            polls: Any = [SimpleNamespace(url_id=i) for i in polled]
            kept, _, dropped, _ = fence_rows(
                conn, Fence(wid, store.cluster.leases_of(wid)), polls, None
            )
        assert dropped == 0 and len(kept) == len(polled)
        _commit(store, wid, polled)
        store.cluster.heartbeat(wid, OWN, 5.0, 0.5, 2)
        store.cluster.report_site_weights(wid, dict.fromkeys(own, 1.0), 0.5)
        store.cluster.cluster_state()
    # the coordinator's reads go through the driver's cursor (``_cluster._rows``)
    per_round: list[tuple[str, Any]] = []
    rows = _cluster._rows

    def spy(conn: Any, sql: str) -> Any:
        per_round.append((sql, {}))
        return rows(conn, sql)

    monkeypatch.setattr(_cluster, "_rows", spy)
    store.cluster.site_url_counts()
    store.cluster.leases()
    assert len(per_bump) >= 16 and len(per_slot) >= 15 and len(per_round) >= 2
    for statement, scanned in plans(store, per_bump + per_slot):
        assert not SCANNED & set(scanned), f"scans {scanned}: {statement}"
        if "sites.edit_version >" in statement:  # the sites edited: by their index
            assert "sites" not in scanned, f"scans every site: {statement}"
            edited_read = True
    assert edited_read
    for statement, scanned in plans(store, per_round):
        assert "urls" not in scanned, f"the coordinator scans urls: {statement}"
    # and they read what the worker owns: its sites' URLs, their rules and failures
    ids, _, site_list = store.cluster.active_urls_of(own)
    assert ids.size == OWN * PER_SITE and set(site_list) == set(own)
    own_ids = np.asarray(sorted(i for h in own for i in by_site[h]))
    rules = store.url_rules(own)
    assert rules.ids.size and np.isin(rules.ids, own_ids).all()
    failing = [row.url_id for _, row in store.url_failures(own)]
    assert failing and set(failing) <= set(own_ids.tolist())
    counts = store.cluster.site_url_counts()
    assert len(counts) == SITES and set(counts.values()) == {PER_SITE}
