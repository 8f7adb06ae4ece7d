"""The cluster's tables: membership, site leases with fencing tokens, the
coordinator's state. Reached as ``store.cluster``; the service's worker and coordinator
(``crawler/service/_cluster.py``, ``_coordinator.py``) are the only writers.

Decisions:

* **The database's clock.** Heartbeats are written with ``now()`` and their ages computed
  by the server (``now() - heartbeat_at``), so the workers' clocks never matter: a worker
  is dead when the server has not heard from it for ``timeout_s``. (SQLite, which has no
  cluster mode, uses this process's clock: one machine, one clock.)
* **Leases are rows, fencing tokens are epochs.** ``cluster_leases.epoch`` only grows and
  is bumped in the same transaction as every change of owner (``assign_leases``,
  ``deregister_worker``). A slot's commit carries the (site, epoch) pairs its polls were
  made under (``Fence``); ``fence_rows`` reads those lease rows ``FOR SHARE`` in the commit's
  own transaction and drops the poll rows and scheduler rows of every site whose lease is
  no longer (this worker, that epoch). ``FOR SHARE`` makes a concurrent re-assignment wait
  for the commit (or the commit see the new owner): there is no window in between.
* **Commit, then release.** A move between live workers asks the owner for the site
  (``revoked_at``; owner and epoch kept, so what it still commits for it lands); the
  owner releases it (owner NULL, epoch bumped, ``released_epoch`` = the new epoch) once
  the slots that polled it have committed: in a later slot's commit (``Fence.release``)
  or at a slot start (``release_leases``), and the coordinator then hands it over. A
  worker that finds a site revoked the old way (owner NULL, epoch = the one it polled
  under + 1: taken back) acknowledges it the same way. One statement does both
  (``release_held``): the worker names the sites it polls no more and the epochs it
  polled them under; the row's state says which it is.
* **Joining and static membership.** A worker registers ``JOINING`` and becomes ``LIVE``
  once it can poll (``worker_ready``), taking over the leases of earlier registrations
  under its name, epochs bumped.
* **Dead workers' sessions.** A worker's sessions carry ``application_name`` =
  ``session_name(id)``, so the coordinator can end those of a dead worker
  (``end_worker_sessions``): a paused commit then no longer holds lease rows ``FOR
  SHARE``.
* **One coordinator's writes.** ``claim_coordinator`` names the holder of the
  coordinator lock in ``cluster_state``; ``assign_leases`` locks that row and refuses
  (``NotCoordinator``) a writer that is no longer named there, so a coordinator that was
  paused past its lock cannot overwrite its successor's assignment.
* **Change notices.** ``assign_leases`` bumps ``cluster_state.version`` and sends
  ``NOTIFY crawler_cluster`` (payload ``<schema>:<version>``) on PostgreSQL. The workers
  read the version once per slot (one primary-key read): simpler than holding a
  listening connection, and a slot is the unit at which a worker can act anyway.
* **Weights.** The owner of a site reports its weight (the sum of its URLs' wanted polls
  per slot, from its scheduler) into ``cluster_leases.weight`` (``report_site_weights``,
  only for the leases it holds); the coordinator packs by those weights.
  ``site_weights_from_state`` computes the same from the saved scheduler state (a cold
  start, or a look from the CLI).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, Engine, delete, func, insert, select, text, update

from crawler.schedulers import SchedulerState
from crawler.store import _load
from crawler.store._driver import driver_errors, unavailable_errors
from crawler.store._engine import reading, translate_errors
from crawler.store._sql import among, is_postgres
from crawler.store._types import StoreError, StoreUnavailable
from crawler.store.models import (
    WATCH_VERSION,
    cluster_leases,
    cluster_state,
    cluster_workers,
    meta,
    poll_log,
    sites,
    urls,
)

if TYPE_CHECKING:
    from crawler.store._store import Store
    from crawler.store._types import PollRecord

log = logging.getLogger(__name__)

#: the one row of cluster_state
STATE_ROW = 1
#: the LISTEN/NOTIFY channel of assignment changes
CHANNEL = "crawler_cluster"
#: a worker's states: registered and loading (gets no site yet), polling, leaving
JOINING, LIVE, STOPPING = "joining", "live", "stopping"
#: how long ``assign_leases`` waits for a lease row a commit holds (then StoreError; the
#: coordinator tries again next round)
LOCK_TIMEOUT_S = 5.0


def _aware(at: datetime) -> datetime:
    """A stored UTC time as an aware datetime (SQLite gives naive ones)."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def session_name(worker_id: str) -> str:
    """The ``application_name`` of a cluster worker's database sessions."""
    return f"crawler-worker-{worker_id}"


class NotCoordinator(StoreError):  # noqa: N818 - reads as the condition it reports
    """``assign_leases`` by a worker that is no longer the named coordinator."""


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One ``cluster_workers`` row; ``heartbeat_age_s`` computed by the database."""

    worker_id: str
    name: str
    capacity: float
    metrics_url: str | None
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age_s: float
    state: str
    sites: int
    weight: float
    multiplier: float | None
    slot: int

    @property
    def ready(self) -> bool:
        """Registered, loaded and able to poll (not joining, not stopping)."""
        return self.state == LIVE


@dataclass(frozen=True, slots=True)
class LeaseRow:
    """One ``cluster_leases`` row."""

    site: str
    worker_id: str | None
    epoch: int
    weight: float
    assigned_at: datetime | None
    #: seconds since ``assigned_at`` by the database's clock (None: never assigned, or
    #: freed by a worker that left cleanly: placeable at once)
    assigned_age_s: float | None = None
    #: revoked (no owner) and its old owner has acknowledged this epoch: it polls the site
    #: no more, so the coordinator may hand it over at once (``release_held``)
    released: bool = False
    #: seconds since its owner was asked to give it up (None: not asked): it keeps owner
    #: and epoch until it releases the site in a slot's commit
    revoked_age_s: float | None = None


@dataclass(frozen=True, slots=True)
class ClusterStateRow:
    """The ``cluster_state`` row."""

    coordinator: str | None
    coordinator_since: datetime | None
    version: int
    live_workers: int
    total_weight: float
    total_capacity: float
    shortfall_workers: int
    shortfall_capacity: float
    overloads_total: int
    moves_total: int
    threshold: int | None
    states: int | None
    updated_at: datetime | None


@dataclass(frozen=True, slots=True)
class Fence:
    """The leases a slot's polls were made under: a commit lands only the rows of sites
    whose lease is still (``worker_id``, ``leases[site]``)."""

    worker_id: str
    leases: Mapping[str, int]
    #: revoked sites (site -> epoch) this worker polls no more and no earlier slot of which
    #: is still to be committed: released in this commit's transaction (owner NULL, epoch
    #: bumped, acknowledged), after the polls made under them landed
    release: Mapping[str, int] = dataclasses.field(default_factory=dict)


def release_held(conn: Connection, worker_id: str, held: Mapping[str, int]) -> int:
    """The sites ``held`` (site -> the epoch ``worker_id`` polled them under), polled by it
    no more, once its polls of them landed: each taken back from it the old way (owner
    NULL, epoch = that + 1) is left as it is, each still asked of it under that epoch
    (``revoked_at`` set) is released (owner NULL, epoch bumped, ``revoked_at`` cleared);
    both are acknowledged (``released_epoch`` = their epoch), so the coordinator hands them
    over at once. Rows that moved on since are left alone. Inside a slot's commit
    (``Fence.release``: after the polls made under those leases landed) or in a
    transaction of its own (``ClusterStore.release_leases``). Returns the rows released or
    acknowledged."""
    if not held:
        return 0
    now = _now(conn)
    if is_postgres(conn):
        args = {"w": worker_id, "s": list(held), "e": [int(v) for v in held.values()],
                "now": now}  # fmt: skip
        pairs = "FROM unnest(CAST(:s AS text[]), CAST(:e AS bigint[])) AS t(s, e)"
        # the taken back first: a site the second statement releases would match it
        taken = conn.execute(
            text(
                f"UPDATE cluster_leases l SET released_epoch = l.epoch {pairs} "
                "WHERE l.site = t.s AND l.worker_id IS NULL AND l.epoch = t.e + 1"
            ),
            args,
        ).rowcount
        asked = conn.execute(
            text(
                "UPDATE cluster_leases l SET worker_id = NULL, epoch = l.epoch + 1, "
                f"released_epoch = l.epoch + 1, revoked_at = NULL, assigned_at = :now {pairs} "
                "WHERE l.site = t.s AND l.worker_id = :w AND l.epoch = t.e "
                "AND l.revoked_at IS NOT NULL"
            ),
            args,
        ).rowcount
        return int(taken) + int(asked)
    done = 0
    c = cluster_leases.c
    for site, epoch in sorted(held.items()):
        done += conn.execute(
            update(cluster_leases)
            .where(c.site == site, c.worker_id.is_(None), c.epoch == int(epoch) + 1)
            .values(released_epoch=c.epoch)
        ).rowcount
        done += conn.execute(
            update(cluster_leases)
            .where(
                c.site == site,
                c.worker_id == worker_id,
                c.epoch == int(epoch),
                c.revoked_at.is_not(None),
            )
            .values(
                worker_id=None,
                epoch=int(epoch) + 1,
                released_epoch=int(epoch) + 1,
                revoked_at=None,
                assigned_at=now,
            )
        ).rowcount
    return done


#: the figures of one packing round that ``assign_leases`` records in cluster_state
FIGURES = (
    "live_workers",
    "total_weight",
    "total_capacity",
    "shortfall_workers",
    "shortfall_capacity",
    "threshold",
    "states",
)
#: counters added to (not replaced)
COUNTERS = ("overloads_total", "moves_total")


def _rows(conn: Connection, sql: str) -> list[tuple[Any, ...]]:
    """All rows of a plain query through the driver's cursor (``fetchall``: no SQLAlchemy
    ``Row`` per row). The coordinator reads one row per site and lease each round: at 1M
    sites, iterating SQLAlchemy's rows cost more than the query (profiled: 80% of a round
    at 5,000 sites). A driver error is raised as StoreUnavailable or StoreError."""
    cur = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cur.execute(sql)
        return list(cur.fetchall())
    except unavailable_errors() as exc:
        raise StoreUnavailable(f"database unavailable: {exc}".splitlines()[0]) from exc
    except driver_errors() as exc:
        raise StoreError(f"query failed: {exc}".splitlines()[0]) from exc
    finally:
        cur.close()


def _now(conn: Connection) -> datetime:
    """The database's clock (PostgreSQL ``now()``, the transaction's time); this
    process's on SQLite."""
    if is_postgres(conn):
        value = conn.execute(select(func.now())).scalar()
        if isinstance(value, datetime):
            return value
    return datetime.now(UTC)


def _age(conn: Connection) -> Any:
    if is_postgres(conn):
        return func.extract("epoch", func.now() - cluster_workers.c.heartbeat_at)
    return None


def _ensure_state_row(conn: Connection) -> None:
    found = conn.execute(select(cluster_state.c.id).where(cluster_state.c.id == STATE_ROW)).first()
    if found is None:
        values: dict[str, Any] = {
            "id": STATE_ROW,
            "version": 0,
            "live_workers": 0,
            "total_weight": 0.0,
            "total_capacity": 0.0,
            "shortfall_workers": 0,
            "shortfall_capacity": 0.0,
            "overloads_total": 0,
            "moves_total": 0,
        }
        if is_postgres(conn):
            conn.execute(
                text(
                    "INSERT INTO cluster_state (id, version, live_workers, total_weight, "
                    "total_capacity, shortfall_workers, shortfall_capacity, overloads_total, "
                    "moves_total) VALUES (:id, :version, :live_workers, :total_weight, "
                    ":total_capacity, :shortfall_workers, :shortfall_capacity, "
                    ":overloads_total, :moves_total) ON CONFLICT (id) DO NOTHING"
                ),
                values,
            )
        else:
            conn.execute(insert(cluster_state).prefix_with("OR IGNORE"), [values])


def _bump_version(conn: Connection) -> int:
    _ensure_state_row(conn)
    version = conn.execute(
        update(cluster_state)
        .where(cluster_state.c.id == STATE_ROW)
        .values(version=cluster_state.c.version + 1)
        .returning(cluster_state.c.version)
    ).scalar_one()
    if is_postgres(conn):
        schema = conn.execute(text("SELECT coalesce(current_schema(), '')")).scalar() or ""
        conn.execute(
            text("SELECT pg_notify(:channel, :payload)"),
            {"channel": CHANNEL, "payload": f"{schema}:{version}"},
        )
    return int(version)


def fence_rows(
    conn: Connection,
    fence: Fence,
    polls: Sequence[PollRecord],
    delta: SchedulerState | None,
) -> tuple[list[PollRecord], SchedulerState | None, int, list[str]]:
    """Inside a slot's transaction: drop the polls and scheduler rows of the sites whose
    lease is no longer (``fence.worker_id``, its epoch). Returns the polls and delta to
    write, the number of poll rows dropped and the fenced sites."""
    delta_ids = np.asarray(delta.ids, dtype=np.int64) if delta is not None else None
    ids = {p.url_id for p in polls}
    if delta_ids is not None:
        ids.update(delta_ids.tolist())
    if not ids:
        return list(polls), delta, 0, []
    site_of: dict[int, str] = {}
    found = conn.execute(
        select(urls.c.id, sites.c.host)
        .join(sites, sites.c.id == urls.c.site_id)
        .where(among(conn, urls.c.id, sorted(ids)))
    )
    for uid, host in found:
        site_of[int(uid)] = host
    # the lease rows of the sites this commit touches, not every lease the worker holds:
    # the cost follows the slot's polls (a worker may lease thousands of sites)
    wanted = sorted({h for h in site_of.values() if h in fence.leases})
    valid: set[str] = set()
    if wanted:
        query = select(
            cluster_leases.c.site, cluster_leases.c.worker_id, cluster_leases.c.epoch
        ).where(among(conn, cluster_leases.c.site, wanted))
        if is_postgres(conn):
            query = query.with_for_update(read=True)  # FOR SHARE: a re-assignment waits
        for site, worker, epoch in conn.execute(query):
            if worker == fence.worker_id and int(epoch) == int(fence.leases[site]):
                valid.add(site)
    bad = {i for i in ids if site_of.get(i) not in valid}
    if not bad:
        return list(polls), delta, 0, []
    kept = [p for p in polls if p.url_id not in bad]
    fenced_sites = sorted({site_of.get(i, "?") for i in bad})
    if delta is not None and delta_ids is not None:
        keep = ~np.isin(delta_ids, np.fromiter(bad, np.int64, len(bad)))
        delta = dataclasses.replace(
            delta,
            ids=delta_ids[keep],
            rows={k: np.asarray(v)[keep] for k, v in delta.rows.items()},
        )
    dropped = len(polls) - len(kept)
    log.warning(
        "fenced: %d poll(s) and the scheduler rows of %d site(s) not committed: their "
        "lease moved away from worker %s (e.g. %s)",
        dropped,
        len(fenced_sites),
        fence.worker_id,
        ", ".join(fenced_sites[:5]),
    )
    return kept, delta, dropped, fenced_sites


def _move_leases(
    conn: Connection, moved: Sequence[tuple[str, str | None, float | None]], now: datetime
) -> None:
    """Give each (site, owner, weight or None: kept) its new owner, epoch bumped. One
    statement on PostgreSQL (``UPDATE ... FROM unnest``: at 1M sites a round may move
    thousands, and a statement each cost a round trip each); one per site on SQLite."""
    if not moved:
        return
    if is_postgres(conn):
        conn.execute(
            text(
                "UPDATE cluster_leases l SET worker_id = t.w, epoch = l.epoch + 1, "
                "assigned_at = :now, revoked_at = NULL, weight = coalesce(t.g, l.weight) "
                "FROM unnest("
                "CAST(:s AS text[]), CAST(:w AS text[]), CAST(:g AS float8[])) AS t(s, w, g) "
                "WHERE l.site = t.s"
            ),
            {
                "now": now,
                "s": [m[0] for m in moved],
                "w": [m[1] for m in moved],
                "g": [m[2] for m in moved],
            },
        )
        return
    for site, owner, weight in moved:
        values: dict[str, Any] = {
            "worker_id": owner,
            "epoch": cluster_leases.c.epoch + 1,
            "assigned_at": now,
            "revoked_at": None,
        }
        if weight is not None:
            values["weight"] = weight
        conn.execute(update(cluster_leases).where(cluster_leases.c.site == site).values(**values))


def _utc(value: Any) -> datetime:
    """A stored timestamp as an aware datetime (SQLite's driver gives the stored text)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class ClusterStore:
    """The cluster's reads and writes on a ``Store``'s engine (``store.cluster``; sync: run
    it in a thread)."""

    def __init__(self, store: Store) -> None:
        self.engine: Engine = store.engine

    # ----- membership --------------------------------------------------------------------

    def register_worker(
        self,
        capacity: float,
        *,
        name: str,
        metrics_url: str | None = None,
        worker_id: str | None = None,
        slot: int = 0,
        state: str = LIVE,
    ) -> str:
        """Register a worker (a new uuid4 hex id unless ``worker_id`` is given: then its row
        is replaced), ``state`` ``JOINING`` until it can poll (``worker_ready``); returns
        its id."""
        wid = worker_id or uuid.uuid4().hex
        with translate_errors("registering the worker"), self.engine.begin() as conn:
            now = _now(conn)
            conn.execute(delete(cluster_workers).where(cluster_workers.c.worker_id == wid))
            conn.execute(
                insert(cluster_workers).values(
                    worker_id=wid,
                    name=name,
                    capacity=float(capacity),
                    metrics_url=metrics_url,
                    started_at=now,
                    heartbeat_at=now,
                    state=state,
                    sites=0,
                    weight=0.0,
                    multiplier=None,
                    slot=int(slot),
                )
            )
            _ensure_state_row(conn)
        return wid

    def heartbeat(
        self,
        worker_id: str,
        sites: int,
        weight: float,
        multiplier: float | None,
        slot: int,
    ) -> bool:
        """Say the worker is alive (database clock), with what it holds; False if its row
        is gone (it was deregistered: re-register)."""
        with translate_errors("heartbeat"), self.engine.begin() as conn:
            result = conn.execute(
                update(cluster_workers)
                .where(cluster_workers.c.worker_id == worker_id)
                .values(
                    heartbeat_at=_now(conn),
                    sites=int(sites),
                    weight=float(weight),
                    multiplier=None if multiplier is None else float(multiplier),
                    slot=int(slot),
                )
            )
            return bool(result.rowcount)

    def worker_ready(self, worker_id: str, name: str) -> int:
        """A joining worker has loaded and can poll: it becomes live (the coordinator gives
        it sites from now on) and takes over the leases of every other registration under
        its ``name`` (static membership: a worker restarted under the same name keeps the
        sites its previous incarnation held, if the coordinator has not moved them yet),
        epochs bumped so that a late commit of the old incarnation is fenced; their rows
        are deleted. One transaction. Returns the leases taken over."""
        with translate_errors("marking the worker ready"), self.engine.begin() as conn:
            if is_postgres(conn):  # a paused old incarnation's commit holds lease rows
                conn.execute(text(f"SET LOCAL lock_timeout = '{int(LOCK_TIMEOUT_S * 1000)}ms'"))
            found = conn.execute(
                update(cluster_workers)
                .where(cluster_workers.c.worker_id == worker_id)
                .values(state=LIVE, heartbeat_at=_now(conn))
            ).rowcount
            if not found:
                raise StoreError(f"worker {worker_id} is not registered")
            older = [
                str(w)
                for w in conn.execute(
                    select(cluster_workers.c.worker_id).where(
                        cluster_workers.c.name == name, cluster_workers.c.worker_id != worker_id
                    )
                ).scalars()
            ]
            if not older:
                return 0
            # the rows first: an assign_leases holding them (FOR SHARE) finishes before
            conn.execute(
                delete(cluster_workers).where(among(conn, cluster_workers.c.worker_id, older))
            )
            taken = conn.execute(
                update(cluster_leases)
                .where(among(conn, cluster_leases.c.worker_id, older))
                .values(
                    worker_id=worker_id,
                    epoch=cluster_leases.c.epoch + 1,
                    assigned_at=_now(conn),
                    revoked_at=None,
                )
            ).rowcount
            if taken:
                _bump_version(conn)
            return int(taken)

    def deregister_worker(self, worker_id: str) -> int:
        """A worker leaves: its leases are freed (owner NULL, epoch bumped), the version
        bumped, its row deleted, in one transaction. Returns the leases freed."""
        with translate_errors("deregistering the worker"), self.engine.begin() as conn:
            # the row first: an assign_leases holding it (FOR SHARE) finishes before, and
            # the leases it gave this worker are then freed below
            conn.execute(delete(cluster_workers).where(cluster_workers.c.worker_id == worker_id))
            freed = conn.execute(
                update(cluster_leases)
                .where(cluster_leases.c.worker_id == worker_id)
                # assigned_at NULL: the worker has stopped polling, the sites are free now
                .values(
                    worker_id=None,
                    epoch=cluster_leases.c.epoch + 1,
                    assigned_at=None,
                    revoked_at=None,
                )
            ).rowcount
            if freed:
                _bump_version(conn)
            return int(freed)

    def cluster_workers(self) -> list[WorkerRow]:
        """Every registered worker (live or not), with its heartbeat age by the database's
        clock, oldest first."""
        with translate_errors("reading the workers"), reading(self.engine) as conn:
            age = _age(conn)
            cols = [*cluster_workers.c]
            query = select(*cols, age) if age is not None else select(*cols)
            rows = conn.execute(query.order_by(cluster_workers.c.started_at)).all()
            now = datetime.now(UTC)
            out = []
            for row in rows:
                m = row._mapping
                if age is not None:
                    seconds = float(row[-1])
                else:
                    seconds = (now - m["heartbeat_at"]).total_seconds()
                out.append(
                    WorkerRow(
                        worker_id=m["worker_id"],
                        name=m["name"],
                        capacity=float(m["capacity"]),
                        metrics_url=m["metrics_url"],
                        started_at=m["started_at"],
                        heartbeat_at=m["heartbeat_at"],
                        heartbeat_age_s=max(0.0, seconds),
                        state=m["state"],
                        sites=int(m["sites"]),
                        weight=float(m["weight"]),
                        multiplier=None if m["multiplier"] is None else float(m["multiplier"]),
                        slot=int(m["slot"]),
                    )
                )
            return out

    def live_workers(self, timeout_s: float) -> list[WorkerRow]:
        """The workers heard from within ``timeout_s`` seconds (database clock) and not
        stopping."""
        return [
            w for w in self.cluster_workers() if w.heartbeat_age_s <= timeout_s and w.state == LIVE
        ]

    def forget_workers(self, older_than_s: float) -> int:
        """Delete the rows of workers silent for more than ``older_than_s`` seconds (the
        coordinator's housekeeping; their leases were taken long before)."""
        dead = [w.worker_id for w in self.cluster_workers() if w.heartbeat_age_s > older_than_s]
        if not dead:
            return 0
        with translate_errors("forgetting dead workers"), self.engine.begin() as conn:
            conn.execute(
                delete(cluster_workers).where(among(conn, cluster_workers.c.worker_id, dead))
            )
        return len(dead)

    # ----- leases ------------------------------------------------------------------------

    def leases(self) -> list[LeaseRow]:
        """Every lease, by site, with the age of its last change by the database's clock."""
        with translate_errors("reading the leases"), reading(self.engine) as conn:
            pg = is_postgres(conn)
            age_sql = "extract(epoch from now() - assigned_at)" if pg else "NULL"
            asked_sql = "extract(epoch from now() - revoked_at)" if pg else "NULL"
            rows = _rows(
                conn,
                "SELECT site, worker_id, epoch, weight, assigned_at, released_epoch, "
                f"revoked_at, {age_sql}, {asked_sql} FROM cluster_leases ORDER BY site",
            )
        now = datetime.now(UTC)
        out = []
        for row in rows:
            site, worker, epoch, weight, assigned_at, released_epoch = row[:6]
            revoked_at, seconds, asked_seconds = row[6:]
            if assigned_at is None:
                age = None
            elif pg:
                age = max(0.0, float(seconds))
            else:
                age = max(0.0, (now - _utc(assigned_at)).total_seconds())
            released = (
                worker is None and released_epoch is not None and int(released_epoch) == int(epoch)
            )
            revoked: float | None = None
            if revoked_at is not None and worker is not None:
                revoked = (
                    max(0.0, float(asked_seconds))
                    if pg
                    else max(0.0, (now - _utc(revoked_at)).total_seconds())
                )
            out.append(
                LeaseRow(
                    site, worker, int(epoch), float(weight), _utc(assigned_at) if assigned_at
                    is not None else None, age, released, revoked,
                )
            )  # fmt: skip
        return out

    def leases_of(self, worker_id: str) -> dict[str, int]:
        """The sites ``worker_id`` holds and may poll (not revoked), with their epochs
        (fencing tokens)."""
        return self.held_leases(worker_id)[0]

    def held_leases(self, worker_id: str) -> tuple[dict[str, int], dict[str, int]]:
        """The sites ``worker_id`` holds, with their epochs: (those it may poll, those it is
        asked to give up: revoked, to release in a commit)."""
        with translate_errors("reading the worker's leases"), reading(self.engine) as conn:
            rows = conn.execute(
                select(
                    cluster_leases.c.site, cluster_leases.c.epoch, cluster_leases.c.revoked_at
                ).where(cluster_leases.c.worker_id == worker_id)
            ).all()
        polled = {site: int(epoch) for site, epoch, revoked in rows if revoked is None}
        revoked = {site: int(epoch) for site, epoch, r in rows if r is not None}
        return polled, revoked

    def last_polled(self, ids: Sequence[int], within_s: float) -> dict[int, float]:
        """URL id -> when it was last polled (``polled_at`` as seconds since the epoch), for
        those of ``ids`` polled within the last ``within_s`` seconds: a new owner of a site
        learns when the old one last asked its host (a live owner releases a site only once
        the slots that polled it have committed, so their rows are here). Reads only the
        poll-log rows of those URLs, by the (url_id, polled_at) index."""
        if not ids:
            return {}
        since = datetime.now(UTC) - timedelta(seconds=within_s)
        t = poll_log
        with translate_errors("reading the last polls"), reading(self.engine) as conn:
            rows = conn.execute(
                select(t.c.url_id, func.max(t.c.polled_at))
                .where(among(conn, t.c.url_id, [int(i) for i in ids]), t.c.polled_at > since)
                .group_by(t.c.url_id)
            ).all()
        return {int(u): _aware(at).timestamp() for u, at in rows if at is not None}

    def release_leases(self, worker_id: str, held: Mapping[str, int]) -> int:
        """A worker tells the coordinator it polls the sites ``held`` (site -> the epoch it
        polled them under) no more, in a transaction of its own (``release_held``): at a
        slot start, for the sites asked of it whose every slot that polled them has
        committed, and the sites taken back from it. Returns the rows released or
        acknowledged."""
        if not held:
            return 0
        with translate_errors("releasing leases"), self.engine.begin() as conn:
            return release_held(conn, worker_id, held)

    def end_worker_sessions(self, worker_ids: Sequence[str]) -> int:
        """PostgreSQL: end the sessions of workers found dead (``session_name``), so that
        a paused one's open commit releases the lease rows it holds FOR SHARE at once
        (its late commit then fails and is fenced when retried). Returns the sessions
        ended (0 on SQLite, or without the privilege to signal them)."""
        if not worker_ids:
            return 0
        with translate_errors("ending dead workers' sessions"), self.engine.begin() as conn:
            if not is_postgres(conn):
                return 0
            ended = conn.execute(
                text(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "
                    "FROM pg_stat_activity WHERE application_name = ANY(CAST(:n AS text[])) "
                    "AND pid <> pg_backend_pid()"
                ),
                {"n": [session_name(w) for w in worker_ids]},
            ).scalar()
            return int(ended or 0)

    def claim_coordinator(self, worker_id: str) -> None:
        """Name ``worker_id`` (the new holder of the coordinator lock) in cluster_state."""
        with translate_errors("claiming the coordinator role"), self.engine.begin() as conn:
            _ensure_state_row(conn)
            conn.execute(
                update(cluster_state)
                .where(cluster_state.c.id == STATE_ROW)
                .values(coordinator=worker_id, coordinator_since=_now(conn))
            )

    def assign_leases(
        self,
        assignments: Mapping[str, str | None],
        coordinator_id: str,
        *,
        weights: Mapping[str, float] | None = None,
        figures: Mapping[str, float | int | None] | None = None,
        revoke: Collection[str] = (),
    ) -> int:
        """Write a new assignment (site -> worker id, or None: unassigned) in ONE
        transaction: every site whose owner changes gets its epoch bumped; new sites get a
        lease at epoch 1 (0 if unassigned); ``weights`` (site -> polls per slot) are
        recorded for sites that have none reported yet or change owner; the version is
        bumped (and NOTIFY sent) if anything moved. ``figures`` (``FIGURES`` replaced,
        ``COUNTERS`` added) go to cluster_state. A site given to a worker that is not
        registered (it left meanwhile) is left unassigned. The sites of ``revoke`` (their
        owner unchanged) are asked of their owner (``revoked_at``: it releases them in a
        slot's commit); a change of owner clears it. Raises NotCoordinator if
        ``coordinator_id`` is not the coordinator named in cluster_state. Returns the
        number of sites whose owner changed."""
        weights = weights or {}
        with translate_errors("assigning leases"), self.engine.begin() as conn:
            if is_postgres(conn):  # a commit paused holding a lease FOR SHARE: retry later
                conn.execute(text(f"SET LOCAL lock_timeout = '{int(LOCK_TIMEOUT_S * 1000)}ms'"))
            _ensure_state_row(conn)
            query = select(cluster_state.c.coordinator).where(cluster_state.c.id == STATE_ROW)
            if is_postgres(conn):
                query = query.with_for_update()
            named = conn.execute(query).scalar()
            if named != coordinator_id:
                raise NotCoordinator(
                    f"worker {coordinator_id} is no longer the coordinator ({named} is)"
                )
            # only to registered workers (a worker that left meanwhile gets nothing; its
            # row is held FOR SHARE so that it cannot leave during this transaction)
            named_owners = sorted({o for o in assignments.values() if o is not None})
            if named_owners:
                present_q = select(cluster_workers.c.worker_id).where(
                    among(conn, cluster_workers.c.worker_id, named_owners)
                )
                if is_postgres(conn):
                    present_q = present_q.with_for_update(read=True)
                present = set(conn.execute(present_q).scalars())
                assignments = {s: (o if o in present else None) for s, o in assignments.items()}
            current = {
                site: (worker, int(epoch))
                for site, worker, epoch in _rows(
                    conn, "SELECT site, worker_id, epoch FROM cluster_leases"
                )
            }
            now = _now(conn)
            changed = 0
            fresh: list[dict[str, Any]] = []
            moved: list[tuple[str, str | None, float | None]] = []
            for site, owner in assignments.items():
                if site not in current:
                    fresh.append(
                        {
                            "site": site,
                            "worker_id": owner,
                            "epoch": 1 if owner is not None else 0,
                            "weight": float(weights.get(site, 0.0)),
                            # a site never owned has lost no owner: no hand-over to wait
                            # for (its time is when it last lost one)
                            "assigned_at": now if owner is not None else None,
                        }
                    )
                    changed += owner is not None
                    continue
                if current[site][0] == owner:
                    if site in revoke and owner is not None:
                        asked = conn.execute(
                            update(cluster_leases)
                            .where(
                                cluster_leases.c.site == site,
                                cluster_leases.c.worker_id == owner,
                                cluster_leases.c.revoked_at.is_(None),
                            )
                            .values(revoked_at=now)
                        ).rowcount
                        changed += asked
                    continue
                changed += 1
                weight = weights.get(site)
                moved.append((site, owner, None if weight is None else float(weight)))
            _move_leases(conn, moved, now)
            if fresh:
                conn.execute(insert(cluster_leases), fresh)
            stats: dict[str, Any] = {"updated_at": now}
            for key, value in (figures or {}).items():
                if key in FIGURES:
                    stats[key] = value
                elif key in COUNTERS:
                    stats[key] = getattr(cluster_state.c, key) + int(value or 0)
                else:
                    raise ValueError(f"unknown cluster figure {key!r}")
            conn.execute(
                update(cluster_state).where(cluster_state.c.id == STATE_ROW).values(**stats)
            )
            if changed:
                _bump_version(conn)
            return changed

    def report_site_weights(
        self,
        worker_id: str,
        weights: Mapping[str, float],
        multiplier: float | None = None,
    ) -> int:
        """The owner's learned weights of its sites (polls per slot); sites it does not
        hold are ignored. ``multiplier`` (the level those weights were computed at), if
        not None, is written to the worker's row in the same transaction: the coordinator
        turns weights into rate masses with it, and a weight read with the multiplier of
        another moment (before the worker gained or lost sites) makes it move sites to
        and fro. Returns the lease rows written."""
        if not weights:
            return 0
        with translate_errors("reporting site weights"), self.engine.begin() as conn:
            if multiplier is not None:
                conn.execute(
                    update(cluster_workers)
                    .where(cluster_workers.c.worker_id == worker_id)
                    .values(multiplier=float(multiplier))
                )
            if is_postgres(conn):
                result = conn.execute(
                    text(
                        "UPDATE cluster_leases l SET weight = t.w FROM unnest("
                        "CAST(:s AS text[]), CAST(:w AS float8[])) AS t(s, w) "
                        "WHERE l.site = t.s AND l.worker_id = :wid"
                    ),
                    {
                        "s": list(weights),
                        "w": [float(v) for v in weights.values()],
                        "wid": worker_id,
                    },
                )
                return int(result.rowcount)
            done = 0
            for site, value in weights.items():
                done += conn.execute(
                    update(cluster_leases)
                    .where(cluster_leases.c.site == site, cluster_leases.c.worker_id == worker_id)
                    .values(weight=float(value))
                ).rowcount
            return done

    # ----- the cluster's state -----------------------------------------------------------

    def cluster_state(self) -> ClusterStateRow | None:
        """The cluster_state row (None before any worker registered)."""
        with translate_errors("reading the cluster state"), self.engine.connect() as conn:
            row = conn.execute(select(cluster_state).where(cluster_state.c.id == STATE_ROW)).first()
        if row is None:
            return None
        m = row._mapping
        return ClusterStateRow(**{f.name: m[f.name] for f in dataclasses.fields(ClusterStateRow)})

    def versions(self) -> tuple[int, int]:
        """(the watch-list version, the assignment's version) in one statement: a worker
        reads both at every slot start, and one round trip costs less than two."""
        watch = select(meta.c.int_value).where(meta.c.key == WATCH_VERSION).scalar_subquery()
        assignment = (
            select(cluster_state.c.version).where(cluster_state.c.id == STATE_ROW)
        ).scalar_subquery()
        with translate_errors("reading the versions"), self.engine.connect() as conn:
            row = conn.execute(select(watch, assignment)).one()
        return int(row[0] or 0), int(row[1] or 0)

    def cluster_version(self) -> int:
        """The assignment's version (bumped whenever a lease changes owner)."""
        with translate_errors("reading the cluster version"), self.engine.connect() as conn:
            value = conn.execute(
                select(cluster_state.c.version).where(cluster_state.c.id == STATE_ROW)
            ).scalar()
        return int(value or 0)

    # ----- what the coordinator and the workers read -------------------------------------

    def site_url_counts(self) -> dict[str, int]:
        """Watched URLs per site (sites with none are left out). PostgreSQL: one row per
        site from ``sites.url_count``, kept by triggers on ``urls`` (migration 0011), so
        the coordinator's round reads O(sites) rows, not every URL; SQLite (no cluster
        mode) groups the URLs."""
        with translate_errors("counting URLs per site"), reading(self.engine) as conn:
            if is_postgres(conn):
                found = _rows(conn, "SELECT host, url_count FROM sites WHERE url_count > 0")
                return {host: int(n) for host, n in found}
            rows = conn.execute(
                select(sites.c.host, func.count())
                .select_from(urls.join(sites, sites.c.id == urls.c.site_id))
                .where(urls.c.removed_at.is_(None))
                .group_by(sites.c.host)
            ).all()
        return {host: int(n) for host, n in rows}

    def active_urls_of(
        self, site_list: Sequence[str]
    ) -> tuple[NDArray[np.int64], NDArray[np.float64], list[str]]:
        """Ids (sorted), importances and sites of the watched URLs of ``site_list``."""
        if not site_list:
            return np.empty(0, np.int64), np.empty(0, np.float64), []
        with translate_errors("loading the sites' URLs"), reading(self.engine) as conn:
            rows = conn.execute(
                select(urls.c.id, urls.c.importance, sites.c.host)
                .join(sites, sites.c.id == urls.c.site_id)
                .where(urls.c.removed_at.is_(None), among(conn, sites.c.host, list(site_list)))
                .order_by(urls.c.id)
            ).all()
        ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
        imp = np.fromiter((r[1] for r in rows), np.float64, len(rows))
        return ids, imp, [r[2] for r in rows]

    def sites_edited_since(self, version: int) -> set[str]:
        """The sites (``host[:port]``) whose watched URLs or their importances an edit
        changed after watch-list version ``version`` (``sites.edit_version``, by its index:
        the cost follows the sites edited, not the watch list)."""
        with translate_errors("reading the sites edited"), reading(self.engine) as conn:
            found = conn.execute(
                select(sites.c.host).where(sites.c.edit_version > version)
            ).scalars()
            return {str(h) for h in found}

    def load_url_states(self, name: str, ids: Sequence[int]) -> SchedulerState | None:
        """The saved state of scheduler ``name`` restricted to ``ids`` (those with a saved
        row; corrupt rows left out, and said in the log): the scalars as saved and the
        per-URL rows, sorted by id. None if the scheduler was never saved."""
        with translate_errors("loading saved URL states"), reading(self.engine) as conn:
            return _load.load_states_of(conn, name, ids, None)

    def site_weights_from_state(self, name: str) -> dict[str, float]:
        """Each site's weight (the sum of its watched URLs' wanted polls per slot) from
        scheduler ``name``'s saved state; empty if none is saved."""
        from crawler import schedulers

        state = self.load_scheduler_state(name)  # type: ignore[attr-defined]
        if state is None:
            return {}
        ids, x = schedulers.restore(state).frequencies()
        with translate_errors("reading the URLs' sites"), self.engine.connect() as conn:
            site_of = {
                int(i): h
                for i, h in conn.execute(
                    select(urls.c.id, sites.c.host).join(sites, sites.c.id == urls.c.site_id)
                )
            }
        out: dict[str, float] = {}
        for i, v in zip(ids.tolist(), x.tolist(), strict=True):
            host = site_of.get(i)
            if host is not None:
                out[host] = out.get(host, 0.0) + float(v)
        return out
