"""The Store: every database read and write of the service (sync; run it in a thread)."""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import zstandard
from numpy.typing import NDArray
from sqlalchemy import (
    Connection,
    bindparam,
    delete,
    func,
    insert,
    select,
    text,
    update,
)

from crawler.schedulers import SchedulerState
from crawler.sites import site_of
from crawler.snapshots import collapse_whitespace, cut_snapshot
from crawler.store import (
    _admin,
    _bounds,
    _fence,
    _history,
    _host_caps,
    _outbox,
    _pg,
    _service_settings,
    _sqlite,
    _state,
)
from crawler.store._admin import parse_patterns
from crawler.store._cluster import ClusterStore, Fence, fence_rows, release_held
from crawler.store._discovery import DiscoveryStore
from crawler.store._engine import make_engine, reading, sync_url, translate_errors
from crawler.store._host_caps import HostCapRow
from crawler.store._scan import scan
from crawler.store._sql import among, is_postgres
from crawler.store._types import (
    OUTCOMES,
    AddReport,
    FailureRow,
    NewUrl,
    PollRecord,
    SlotRecord,
    Stats,
    UrlDetail,
    UrlRecord,
    UrlRow,
)
from crawler.store._upsert import upsert
from crawler.store.models import (
    SNAPSHOT_LINES,
    WATCH_VERSION,
    UTCDateTime,
    deferrals,
    meta,
    poll_log,
    scheduler_state,
    sites,
    slots,
    url_state,
    urls,
)

if TYPE_CHECKING:
    from crawler.settings import Settings
    from crawler.store._lock import ServiceLock

log = logging.getLogger(__name__)

IdArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: rows per statement for IN (...) lists and inserts (SQLite allows 32766 parameters)
CHUNK = 10_000
#: zstd level for change snapshots, which are written on the crawl's hot path, where CPU is the
#: scarcer resource: 87 µs for a 25 KB text, against 178 µs for zlib's fastest level (which
#: also compressed 3% less). Snapshots written as zlib by earlier versions are still read.
SNAPSHOT_LEVEL = 1
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: a bulk write of this many rows refreshes the table's planner statistics (PostgreSQL)
ANALYZE_AFTER_ROWS = 10_000


def utcnow() -> datetime:
    return datetime.now(UTC)


#: the site of a URL (its ``host`` column): one definition for the project, in crawler.sites
site_host = site_of


def compress_snapshot(text: str, max_bytes: int | None) -> bytes:
    """``text`` cut to ``max_bytes`` (``crawler.snapshots.cut_snapshot``), compressed."""
    data = cut_snapshot(text.encode("utf-8"), max_bytes) or b""
    return zstandard.compress(data, SNAPSHOT_LEVEL)


def decompress_snapshot(blob: bytes | None, snapshot_format: int = 0) -> str | None:
    """The text of a stored snapshot. ``snapshot_format`` ``SNAPSHOT_LINES``: the readable
    text (a line per block element, each line's whitespace collapsed); 0: written before
    the readable text existed, as the crawl extracted it, read with its whitespace collapsed
    (one line)."""
    if blob is None:
        return None
    try:
        data = zstandard.decompress(blob) if blob[:4] == _ZSTD_MAGIC else zlib.decompress(blob)
    except (zlib.error, zstandard.ZstdError):
        return None
    if snapshot_format != SNAPSHOT_LINES:
        return collapse_whitespace(data).decode("utf-8", "replace")
    # the crawl writes its lines tidy already; a writer that did not is read the same way
    lines = (collapse_whitespace(line) for line in data.split(b"\n"))
    return b"\n".join(line for line in lines if line).decode("utf-8", "replace")


def change_texts_in(conn: Connection, ids: Sequence[int]) -> dict[int, _history.ChangeText]:
    """``Store.change_texts`` on a connection the caller holds (e.g. inside its own
    transaction, next to rows it locks): the changes ``ids`` that exist, with their texts."""
    return _history.read_change_texts(conn, ids, decompress_snapshot)


class Store:
    """The crawler's database. ``database_url``: ``sqlite:///PATH``, ``postgresql://``,
    ``postgresql+psycopg://`` or ``postgresql+asyncpg://`` (mapped to psycopg: the store
    is synchronous). ``snapshot_max_bytes`` truncates change snapshots before compression
    (None: keep whole; 0 or ``store_snapshots=False``: keep none)."""

    def __init__(
        self,
        database_url: str,
        *,
        store_snapshots: bool = True,
        snapshot_max_bytes: int | None = None,
    ) -> None:
        self.database_url = database_url
        self.url = sync_url(database_url)
        self.engine = make_engine(database_url)
        self.store_snapshots = store_snapshots and snapshot_max_bytes != 0
        self.snapshot_max_bytes = snapshot_max_bytes
        #: (role, generation) of the service lock this store commits under (``_fence.py``)
        self.service_fence: tuple[str, int] | None = None

    # ----- the parts: each a class over this store's engine (docs in crawler.store) -------

    @cached_property
    def cluster(self) -> ClusterStore:
        """Workers, leases and the cluster's fencing."""
        return ClusterStore(self)

    @cached_property
    def discovery(self) -> DiscoveryStore:
        """Sources, the pages they found, and their new URLs."""
        return DiscoveryStore(self)

    @cached_property
    def outbox(self) -> _outbox.OutboxStore:
        """Events, destinations and deliveries."""
        return _outbox.OutboxStore(self)

    # ----- the hosts' politeness caps and the running service's settings ------------------

    def url_hosts(
        self,
        ids: Sequence[int] | NDArray[np.int64] | None = None,
        site_list: Sequence[str] | None = None,
    ) -> tuple[NDArray[np.int64], list[str]]:
        """(ids, hosts as stored) of the given URLs, or of every watched URL of the sites
        ``site_list`` (None: of every site), in id order (``_host_caps.url_hosts``)."""
        return _host_caps.url_hosts(self.engine, ids, site_list)

    def host_caps(self) -> dict[str, HostCapRow]:
        """The politeness caps the service last wrote, by host."""
        return _host_caps.host_caps(self.engine)

    def save_host_caps(self, rows: Sequence[HostCapRow], worker_id: str | None = None) -> None:
        """Replace the service's (or the cluster worker ``worker_id``'s) caps by ``rows``."""
        _host_caps.save_host_caps(self.engine, rows, worker_id)

    def service_settings(self) -> dict[str, Any] | None:
        """The settings the last service started on this database recorded (None: none)."""
        return _service_settings.service_settings(self.engine)

    def save_service_settings(self, document: Mapping[str, Any]) -> None:
        """Record the running service's settings (replacing the last service's)."""
        _service_settings.save_service_settings(self.engine, document)

    @classmethod
    def from_settings(cls, settings: Settings) -> Store:
        """A store configured by the service settings (database and snapshot options)."""
        return cls(
            settings.database_url,
            store_snapshots=settings.store_snapshots,
            snapshot_max_bytes=settings.snapshot_max_bytes,
        )

    # ----- lifecycle ---------------------------------------------------------------------

    def upgrade(self, revision: str = "head") -> None:
        """Apply the Alembic migrations (programmatically)."""
        from crawler.store._migrate import upgrade

        with translate_errors("database upgrade"):
            upgrade(self.engine, revision)

    def revision(self) -> str | None:
        """The database's current Alembic revision (None: not initialized)."""
        from crawler.store._migrate import current_revision

        with translate_errors("reading the schema revision"):
            return current_revision(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def acquire_service_lock(
        self,
        owner: Mapping[str, Any] | None = None,
        *,
        role: str = "service",
        shared: bool = False,
    ) -> ServiceLock:
        """Take the database's ``role`` lock (one service per database; see ``_lock.py``):
        a ``ServiceLock`` to release (or use as a context manager), held until then or until
        this process dies. ``owner`` describes the holder to a refused process (default: pid,
        host, start time). Raises ``ServiceLockHeld`` (another process has it: its message
        says who and what to do) or ``StoreUnavailable``."""
        from crawler.store._lock import acquire

        return acquire(self.engine, owner, role=role, shared=shared)

    def claim_service_fence(self, lock: ServiceLock) -> int:
        """Take the next generation of ``lock``'s fencing token (``_fence.py``; after
        ``upgrade``, before anything is loaded or polled). An exclusive holder's slot
        commits from then on land only while that generation is still the stored one (else
        ``FencedOut``, and nothing is written). Returns the generation."""
        generation = lock.claim_fence(self.engine)
        if not lock.shared:  # shared holders (cluster workers) are fenced by their leases
            self.service_fence = (lock.role, generation)
        return generation

    def check_service_fence(self, conn: Connection) -> None:
        """In a commit's transaction, first: raise ``FencedOut`` if another service took
        the lock since this store's holder claimed its fence (no-op when none is held)."""
        if self.service_fence is not None:
            _fence.check(conn, *self.service_fence)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- the watch list ----------------------------------------------------------------

    def add_urls(
        self,
        entries: Sequence[NewUrl],
        progress: Callable[[int, int], None] | None = None,
    ) -> AddReport:
        """Watch URLs (committed chunk by chunk; ``progress(done, total)`` after each)."""
        report = AddReport()
        unique: dict[str, NewUrl] = {}
        for entry in entries:
            _entry_values(entry)  # validates before anything is written
            if entry.url in unique:
                report.already_watched.append(entry.url)
            else:
                unique[entry.url] = entry
        todo = list(unique.values())
        for start in range(0, len(todo), CHUNK):
            chunk = todo[start : start + CHUNK]
            with translate_errors("adding URLs"), self.engine.begin() as conn:
                self._add_chunk(conn, chunk, report)
            if progress is not None:
                progress(min(start + CHUNK, len(todo)), len(todo))
        if len(todo) >= ANALYZE_AFTER_ROWS:
            self._analyze("urls")
            # and the sites the add marked (``edit_version``): never analysed, the sites
            # edited since a version were read by a sequential scan of ``sites``
            self._analyze("sites")
        return report

    def _analyze(self, table: str) -> None:
        """Refresh PostgreSQL's statistics of ``table`` after a bulk write, so the next
        queries (the start-up scans) are planned for its real size, not for the empty table
        that autovacuum last saw (a nested-loop plan over a million rows)."""
        if self.engine.dialect.name != "postgresql":
            return
        with translate_errors(f"analyzing {table}"), self.engine.connect() as conn:
            conn.exec_driver_sql(f"ANALYZE {table}")
            conn.commit()

    def _add_chunk(self, conn: Connection, chunk: list[NewUrl], report: AddReport) -> None:
        now = utcnow()
        found = conn.execute(
            select(urls.c.url, urls.c.id, urls.c.removed_at, urls.c.site_id).where(
                among(conn, urls.c.url, [e.url for e in chunk])
            )
        ).all()
        existing = {u: (i, removed, site) for u, i, removed, site in found}
        fresh = [e for e in chunk if e.url not in existing]
        revive = [e for e in chunk if e.url in existing and existing[e.url][1] is not None]
        report.already_watched.extend(
            e.url for e in chunk if e.url in existing and existing[e.url][1] is None
        )
        if not fresh and not revive:
            return
        version = self._bump_watch_version(conn)  # first: see ``_bump_watch_version``
        edited = {int(existing[e.url][2]) for e in revive}
        if revive:
            conn.execute(
                update(urls)
                .where(urls.c.id == bindparam("b_id"))
                .values(
                    removed_at=None,
                    importance=bindparam("b_importance"),
                    selector=bindparam("b_selector"),
                    ignore_patterns=bindparam("b_ignore_patterns"),
                ),
                [
                    {"b_id": existing[e.url][0]}
                    | {f"b_{k}": v for k, v in _entry_values(e).items()}
                    for e in revive
                ],
            )
            report.reactivated.extend((e.url, existing[e.url][0]) for e in revive)
        if fresh:
            hosts = [site_host(e.url) for e in fresh]
            site_ids = self._site_ids(conn, set(hosts), now)
            rows = [
                {"url": e.url, "site_id": site_ids[h], **_entry_values(e)}
                for e, h in zip(fresh, hosts, strict=True)
            ]
            ids = _insert_urls(conn, rows, now)
            report.added.extend((e.url, ids[e.url]) for e in fresh)
            edited.update(site_ids.values())
        _bounds.mark_edited_sites(conn, version, sorted(edited))

    def _site_ids(self, conn: Connection, hosts: set[str], now: datetime) -> dict[str, int]:
        wanted = sorted(hosts)
        upsert(conn, sites, [{"host": h, "created_at": now} for h in wanted], ["host"])
        rows = conn.execute(
            select(sites.c.host, sites.c.id).where(among(conn, sites.c.host, wanted))
        )
        return {h: int(i) for h, i in rows}

    def remove_urls(self, url_list: Iterable[str]) -> list[str]:
        """Stop watching URLs; returns those that were watched (history is kept)."""
        wanted = list(dict.fromkeys(url_list))
        removed: list[str] = []
        now = utcnow()
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start : start + CHUNK]
            with translate_errors("removing URLs"), self.engine.begin() as conn:
                watched = conn.execute(
                    select(urls.c.id).where(
                        among(conn, urls.c.url, chunk), urls.c.removed_at.is_(None)
                    )
                ).first()
                if watched is None:
                    continue
                version = self._bump_watch_version(conn)
                result = conn.execute(
                    update(urls)
                    .where(among(conn, urls.c.url, chunk), urls.c.removed_at.is_(None))
                    .values(removed_at=now)
                    .returning(urls.c.url, urls.c.site_id)
                ).all()
                _bounds.mark_edited_sites(conn, version, sorted({int(s) for _, s in result}))
            removed.extend(u for u, _ in result)
        return removed

    def set_importance(self, url: str, importance: float) -> bool:
        """Change a watched URL's importance; False if it is not watched."""
        if not 0 < importance <= 1:
            raise ValueError("importance must be in (0, 1]")
        with translate_errors("setting importance"), self.engine.begin() as conn:
            watched = conn.execute(
                select(urls.c.id).where(urls.c.url == url, urls.c.removed_at.is_(None))
            ).first()
            if watched is None:
                return False
            version = self._bump_watch_version(conn)
            result = conn.execute(
                update(urls)
                .where(urls.c.url == url, urls.c.removed_at.is_(None))
                .values(importance=importance)
                .returning(urls.c.site_id)
            ).first()
            if result is not None:
                _bounds.mark_edited_sites(conn, version, [int(result[0])])
        return result is not None

    def _bump_watch_version(self, conn: Connection) -> int:
        """Bump the watch-list version in ``conn``'s transaction; returns the new version.
        Every edit bumps it *before* it writes ``urls`` or ``sites``: the version's row
        then orders the edits (they commit in version order, so a worker that reads
        version v sees every edit up to v), and the edits take their locks in one order,
        the version's row first (``sites`` rows after it: a removal's URL-count trigger
        and ``_bounds.mark_edited_sites`` lock them), so no two edits wait in a cycle."""
        upsert(
            conn,
            meta,
            [{"key": WATCH_VERSION, "int_value": 1}],
            ["key"],
            set_={"int_value": func.coalesce(meta.c.int_value, 0) + 1},
        )
        return int(
            conn.execute(select(meta.c.int_value).where(meta.c.key == WATCH_VERSION)).scalar_one()
        )

    def watch_list_version(self) -> int:
        """A counter bumped by every add, re-add, remove and importance change: poll it
        cheaply to notice watch-list edits made by other processes."""
        with translate_errors("reading the watch-list version"), self.engine.connect() as conn:
            value = conn.execute(
                select(meta.c.int_value).where(meta.c.key == WATCH_VERSION)
            ).scalar()
        return int(value or 0)

    def active_urls(self) -> tuple[IdArray, FloatArray]:
        """Ids (sorted) and importances of the watched URLs."""
        id_parts: list[IdArray] = []
        weight_parts: list[FloatArray] = []
        with translate_errors("loading the watch list"), self.engine.connect() as conn:
            for rows in scan(conn, "loading the watch list", _ACTIVE_URLS, _ACTIVE_URLS):
                part = np.array(rows, dtype=_ID_WEIGHT)
                id_parts.append(part["id"])
                weight_parts.append(part["weight"])
        if not id_parts:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        return np.concatenate(id_parts), np.concatenate(weight_parts)

    def url_records(self, ids: Iterable[int]) -> dict[int, UrlRecord]:
        """What the polls of one slot need, by URL id (unknown ids are left out)."""
        wanted = [int(i) for i in ids]
        out: dict[int, UrlRecord] = {}
        with translate_errors("loading URL records"), self.engine.connect() as conn:
            pg = is_postgres(conn)
            sql = _PG_URL_RECORDS if pg else _SQLITE_URL_RECORDS
            for start in range(0, len(wanted), CHUNK):
                chunk = wanted[start : start + CHUNK]
                param: Any = {"ids": chunk} if pg else (json.dumps(chunk),)
                rows = conn.exec_driver_sql(sql, param)
                for i, url, host, etag, lm, h, raw, sel, ign, has_text in rows:
                    out[i] = UrlRecord(
                        id=i,
                        url=url,
                        host=host,
                        etag=etag,
                        last_modified=lm,
                        last_hash=h,
                        last_raw_hash=raw,
                        selector=sel,
                        ignore_patterns=parse_patterns(ign),
                        has_text=bool(has_text),
                    )
        return out

    # ----- one slot --------------------------------------------------------------------

    def commit_slot(
        self,
        slot: SlotRecord,
        polls: Sequence[PollRecord],
        scheduler_delta: SchedulerState | None = None,
        fence: Fence | None = None,
    ) -> int:
        """Write one slot in ONE transaction: the slot row, its deferred polls per host and
        reason, its poll log and changes with their outbox events (``_outbox.py``: one
        ``page.changed`` per change, made from the polls a fence kept), the URLs' counters
        and cached headers/hashes, and the scheduler delta
        (``Scheduler.take_delta()``: per-URL rows upserted, scalars replaced).

        ``fence`` (a cluster worker's leases): the polls and scheduler rows of
        sites whose lease is no longer (worker, epoch) are dropped, checked in this same
        transaction (``_cluster.fence_rows``). Returns the number of poll rows so dropped.

        When this store holds a service fence (``claim_service_fence``), the transaction
        first checks it is still the stored generation: ``FencedOut`` if another service
        took the lock since.

        Raises StoreUnavailable (retry later) or StoreError; then nothing was written."""
        for p in polls:
            if p.outcome not in OUTCOMES:
                raise ValueError(f"unknown poll outcome {p.outcome!r}")
        fenced = 0
        with translate_errors("committing the slot"), self.engine.begin() as conn:
            self.check_service_fence(conn)  # a service that lost its lock lands nothing
            failures = slot.failures
            if fence is not None:  # a cluster worker: fencing by lease epochs
                polls, scheduler_delta, fenced, _ = fence_rows(conn, fence, polls, scheduler_delta)
                if fenced:  # nor the failure records of the fenced polls
                    kept = {p.url_id for p in polls}
                    failures = tuple(f for f in failures if f.url_id in kept)
            conn.execute(insert(slots), [_slot_values(slot)])
            if polls:
                self._write_polls(conn, slot.slot, polls)
            if slot.deferrals:  # a few rows at most per slot (one per host and reason)
                conn.execute(
                    insert(deferrals),
                    [
                        {
                            "slot": slot.slot,
                            "started_at": slot.started_at,
                            "host": host,
                            "reason": reason,
                            "polls": n,
                        }
                        for host, reason, n in slot.deferrals
                    ],
                )
            if scheduler_delta is not None:
                self._write_state(conn, scheduler_delta)
            if failures:  # the failure record: kept by a kill -9
                _bounds.write_failures(conn, failures)
            health = slot.health_events
            if health and fenced:  # nor the health events of the fenced polls
                kept = {p.url_id for p in polls}
                health = tuple(e for e in health if e.url_id in kept)
            _outbox.write_health_events(conn, slot.slot, health)
            if fence is not None and fence.release:  # commit, then release: one transaction
                release_held(conn, fence.worker_id, fence.release)
        return fenced

    def _write_polls(self, conn: Connection, slot_no: int, polls: Sequence[PollRecord]) -> None:
        """The poll log, the changes and the URL rows: tuples built once per poll, sent as
        whole columns (PostgreSQL ``unnest``) or to the driver's executemany (SQLite)."""
        pg = is_postgres(conn)
        at = (lambda t: t) if pg else _sqlite.time_binder(conn)
        keep = self.store_snapshots
        limit = self.snapshot_max_bytes
        log_rows: list[tuple[Any, ...]] = []
        change_rows: list[tuple[Any, ...]] = []
        event_rows: list[tuple[Any, ...]] = []  # the outbox: one page.changed per change
        ok: list[tuple[Any, ...]] = []
        bad: list[tuple[Any, ...]] = []
        baseline_rows: list[dict[str, Any]] = []
        for p in polls:
            outcome = p.outcome
            when = at(p.polled_at)
            log_rows.append(
                (
                    p.url_id, slot_no, when, p.status, outcome, p.duration_s, p.bytes,
                    p.content_hash, p.error_kind, p.error, p.truncated,
                )
            )  # fmt: skip
            if outcome == "error":
                bad.append((p.url_id, when, p.status))
                continue
            hit = outcome == "hit"
            snapshot = (
                compress_snapshot(p.snapshot, limit) if keep and p.snapshot is not None else None
            )
            if hit:
                change_rows.append(
                    (p.url_id, slot_no, when, p.old_hash, p.content_hash, snapshot, SNAPSHOT_LINES)
                )
                event_rows.append(
                    _outbox.change_event(
                        p.url_id, slot_no, when, p.polled_at, p.old_hash, p.content_hash
                    )
                )
            elif snapshot is not None:  # a first poll's text, or the text a URL without
                # one asked for (docs/history.md): the before of its next change
                baseline_rows.append(
                    _history.baseline_row(p.url_id, slot_no, p.polled_at, p.content_hash, snapshot)
                )
            ok.append(
                (
                    p.url_id, int(hit), int(outcome == "miss"), int(outcome == "not_modified"),
                    when, when if hit else None, p.status, p.etag, p.last_modified,
                    p.content_hash, p.raw_hash,
                )
            )  # fmt: skip
        if baseline_rows:  # once per URL (its first poll): rare, a plain executemany
            _history.write_baselines(conn, baseline_rows)
        if not pg:
            _sqlite.execute_rows(conn, _sqlite.POLL_LOG, log_rows)
            _sqlite.execute_rows(conn, _sqlite.CHANGES, change_rows)
            _sqlite.execute_rows(conn, _outbox.SQLITE_INSERT, event_rows)
            _sqlite.execute_rows(conn, _sqlite.OK_UPDATE, ok)
            _sqlite.execute_rows(conn, _sqlite.ERROR_UPDATE, bad)
            return
        _pg.copy_rows(conn, _pg.POLL_LOG_COPY, _pg.POLL_LOG_TYPES, log_rows)
        _pg.copy_rows(conn, _pg.CHANGES_COPY, _pg.CHANGES_TYPES, change_rows)
        _pg.copy_rows(conn, _outbox.PG_COPY, _outbox.PG_TYPES, event_rows)
        # UPDATE ... FROM applies one row per URL: repeated URLs go one at a time
        if len({p.url_id for p in polls}) == len(polls):
            _pg.update_ok(conn, ok)
            _pg.execute_columns(conn, _pg.ERROR_UPDATE, _pg.ERROR_COLUMNS, bad)
            return
        for row in ok:
            _pg.execute_columns(conn, _pg.OK_UPDATE, _pg.OK_COLUMNS, [row])
        for row in bad:
            _pg.execute_columns(conn, _pg.ERROR_UPDATE, _pg.ERROR_COLUMNS, [row])

    def _write_state(self, conn: Connection, delta: SchedulerState) -> None:
        name = delta.scheduler
        if not isinstance(name, str) or not name:
            raise ValueError("scheduler delta has no 'scheduler' name")
        dtype = _state.row_dtype(delta)
        dtype_json = _state.dtype_to_json(dtype)
        stored = conn.execute(
            select(scheduler_state.c.url_dtype).where(scheduler_state.c.name == name)
        ).scalar()
        if stored is not None and stored != dtype_json:
            self._convert_url_state(conn, name, stored, dtype)
        ids = np.asarray(delta.ids, dtype=np.int64)
        self._write_url_rows(conn, name, ids.tolist(), _state.pack_rows(delta, dtype))
        upsert(
            conn,
            scheduler_state,
            [
                {
                    "name": name,
                    "scalars": _state.scalars_to_json(delta),
                    "url_dtype": dtype_json,
                    "updated_at": utcnow(),
                }
            ],
            ["name"],
            ["scalars", "url_dtype", "updated_at"],
        )

    @staticmethod
    def _write_url_rows(conn: Connection, name: str, ids: list[int], blobs: list[bytes]) -> None:
        if is_postgres(conn):
            _pg.upsert_url_state(conn, name, ids, blobs)
            return
        rows = [(name, i, b) for i, b in zip(ids, blobs, strict=True)]
        for start in range(0, len(rows), CHUNK):
            _sqlite.execute_rows(conn, _sqlite.URL_STATE, rows[start : start + CHUNK])

    def _convert_url_state(
        self, conn: Connection, name: str, stored: str, dtype: np.dtype[Any]
    ) -> None:
        """The scheduler's per-URL record format changed (a new release added or dropped a
        field): re-pack the saved rows in the new format, so that an upgrade keeps what
        was learned. Fields the new format adds start at zero (what ``from_state`` gives a
        missing optional field); rows that cannot be read are dropped."""
        try:
            old = _state.dtype_from_json(stored)
        except (ValueError, TypeError):
            old = None
        rows = conn.execute(
            select(url_state.c.url_id, url_state.c.data)
            .where(url_state.c.scheduler == name)
            .order_by(url_state.c.url_id)
        ).all()
        conn.execute(delete(url_state).where(url_state.c.scheduler == name))
        kept = (
            []
            if old is None
            else [r for r in rows if r[1] is not None and len(r[1]) == old.itemsize]
        )
        if old is not None and kept:
            blobs = _state.convert_rows([bytes(r[1]) for r in kept], old, dtype)
            self._write_url_rows(conn, name, [int(r[0]) for r in kept], blobs)
        log.warning(
            "scheduler %s: per-URL state format changed (%s -> %s): %d row(s) converted, "
            "%d unreadable row(s) dropped",
            name,
            stored,
            _state.dtype_to_json(dtype),
            len(kept),
            len(rows) - len(kept),
        )

    def save_scheduler_state(self, state: SchedulerState | Mapping[str, Any]) -> None:
        """Replace a scheduler's whole saved state with ``state`` (a full
        ``Scheduler.state()`` or ``take_delta()`` of a fresh scheduler)."""
        state = SchedulerState.from_mapping(state)
        name = state.scheduler
        with translate_errors("saving the scheduler state"), self.engine.begin() as conn:
            conn.execute(delete(url_state).where(url_state.c.scheduler == name))
            self._write_state(conn, state)
        if state.ids.size >= ANALYZE_AFTER_ROWS:
            self._analyze("url_state")

    def load_scheduler_state(
        self, name: str, problems: list[str] | None = None
    ) -> SchedulerState | None:
        """The saved state of scheduler ``name`` (merged deltas), restricted to the watched
        URLs, ready for ``crawler.schedulers.restore``; None if never saved. Corrupt rows
        are skipped (those URLs restart learning) and described in ``problems`` and the log.
        """
        from crawler.store._load import load_state

        with translate_errors("loading the scheduler state"), self.engine.connect() as conn:
            return load_state(conn, name, problems)

    def scheduler_names(self) -> list[str]:
        """Schedulers with a saved state."""
        with translate_errors("listing saved schedulers"), self.engine.connect() as conn:
            return list(conn.execute(select(scheduler_state.c.name)).scalars())

    # ----- admin queries -----------------------------------------------------------------

    def wanted_frequencies(self, name: str) -> dict[int, float]:
        """Wanted polls per slot by URL id, from scheduler ``name``'s saved state
        (restored with ``crawler.schedulers.restore``); empty if none is saved."""
        state = self.load_scheduler_state(name)
        if state is None:
            return {}
        from crawler import schedulers

        ids, x = schedulers.restore(state).frequencies()
        return dict(zip(ids.tolist(), x.tolist(), strict=True))

    def list_urls(
        self,
        scheduler: str | None = None,
        *,
        include_removed: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[UrlRow]:
        """Watched URLs by id; ``wanted_frequency`` is filled from scheduler ``scheduler``'s
        saved state when given."""
        freq = self.wanted_frequencies(scheduler) if scheduler else None
        with translate_errors("listing URLs"), self.engine.connect() as conn:
            return _admin.list_urls(conn, freq, include_removed, limit, offset)

    def url_detail(self, url: str, recent: int = 20) -> UrlDetail | None:
        """One URL (watched or not): row, saved scheduler fields, recent polls and changes."""
        with translate_errors("reading the URL"), self.engine.connect() as conn:
            return _admin.url_detail(conn, url, recent, decompress_snapshot)

    def stats(self, top_hosts: int = 10) -> Stats:
        """Lifetime totals, and the deferred polls kept (by reason; the ``top_hosts`` hosts
        with the most)."""
        with translate_errors("reading statistics"), self.engine.connect() as conn:
            return _admin.stats(conn, top_hosts)

    # ----- operator rules and failures (queries in _bounds.py) -----------------------------

    def select_urls(
        self, url_list: Sequence[str] = (), tags: Sequence[str] = ()
    ) -> list[tuple[int, str]]:
        """(id, url) of the watched URLs among ``url_list`` or carrying one of ``tags``."""
        with translate_errors("selecting URLs"), self.engine.connect() as conn:
            return _bounds.select_urls(conn, url_list, tags)

    def edit_urls(
        self,
        ids: Sequence[int],
        values: Mapping[str, Any],
        add_tags: Sequence[str] = (),
        remove_tags: Sequence[str] = (),
    ) -> None:
        """Change URLs in place (``_bounds.EDITABLE`` columns, tags): ids and learning kept;
        a running service sees it at its next slot (the watch-list version is bumped)."""
        with translate_errors("editing URLs"), self.engine.begin() as conn:
            version = self._bump_watch_version(conn) if ids else 0
            _bounds.edit_urls(conn, ids, values, add_tags, remove_tags)
            if ids and "importance" in values:  # (rules are read whole on every bump)
                _bounds.mark_edited_urls(conn, version, ids)

    def revive_urls(self, ids: Sequence[int]) -> None:
        """Clear the failure record of URLs and have a running service poll them again."""
        if not ids:
            return
        with translate_errors("reviving URLs"), self.engine.begin() as conn:
            version = self._bump_watch_version(conn)
            _bounds.request_revive(conn, ids, version)

    def revived_since(self, version: int, sites: Sequence[str] | None = None) -> IdArray:
        """Watched URLs an operator revived after watch-list version ``version`` (of the
        sites ``sites`` only, unless None: a cluster worker's own)."""
        with translate_errors("reading revived URLs"), reading(self.engine) as conn:
            return _bounds.revived_since(conn, version, sites)

    def url_rules(self, sites: Sequence[str] | None = None) -> _bounds.UrlRules:
        """The watched URLs' own bounds and pause (only those with any; of the sites
        ``sites`` only, unless None)."""
        with translate_errors("reading URL rules"), reading(self.engine) as conn:
            return _bounds.read_rules(conn, sites)

    def url_failures(self, sites: Sequence[str] | None = None) -> list[tuple[str, FailureRow]]:
        """(url, failure record) of the watched URLs failing or retired (of the sites
        ``sites`` only, unless None)."""
        with translate_errors("reading failures"), reading(self.engine) as conn:
            return _bounds.read_failures(conn, sites)

    def health_state(
        self, stopped_type: str, url_ids: Sequence[int] | None = None
    ) -> dict[int, tuple[int, int, bool]]:
        """(newest change's slot, changes counted, stopped alarm raised since) per URL (of
        ``url_ids``; None: all): the health judge's state at start
        (``_outbox.health_state``)."""
        with translate_errors("reading the health state"), self.engine.connect() as conn:
            return _outbox.health_state(conn, stopped_type, url_ids)

    def health_state_at(
        self, stopped_type: str, url_ids: Sequence[int] | None = None
    ) -> dict[int, tuple[datetime, int, bool]]:
        """``health_state`` by time, not slot: what cluster workers share
        (``_outbox.health_state_at``)."""
        with translate_errors("reading the health state"), self.engine.connect() as conn:
            return _outbox.health_state_at(conn, stopped_type, url_ids)

    def url_tags(self) -> dict[int, list[str]]:
        """The tags of the watched URLs that have any."""
        with translate_errors("reading tags"), self.engine.connect() as conn:
            return _bounds.tags_by_url(conn)

    # ----- change history (queries in _history.py; docs/history.md) ----------------------

    def change_texts(self, ids: Sequence[int]) -> dict[int, _history.ChangeText]:
        """The changes ``ids`` that exist, each with its before, after, URL and tags."""
        with translate_errors("reading changes"), self.engine.connect() as conn:
            return change_texts_in(conn, ids)

    def change_text(self, change_id: int) -> _history.ChangeText | None:
        """One change with its before and after (None: no such change)."""
        return self.change_texts([change_id]).get(change_id)

    def latest_change_id(self, url: str) -> int | None:
        """The id of the newest change of ``url`` (None: none, or not watched)."""
        with translate_errors("reading changes"), self.engine.connect() as conn:
            return _history.latest_change_id(conn, url)

    def list_changes(
        self,
        *,
        since: datetime | None = None,
        url: str | None = None,
        tag: str | None = None,
        after_id: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[_history.ChangeInfo]:
        """Committed changes, oldest first (or ``newest_first``), filtered
        (``_history.list_changes``)."""
        with translate_errors("reading changes"), self.engine.connect() as conn:
            return _history.list_changes(
                conn,
                since=since,
                url=url,
                tag=tag,
                after_id=after_id,
                limit=limit,
                newest_first=newest_first,
            )

    def prune_changes(
        self, keep_per_url: int | None, older_than: datetime | timedelta | None
    ) -> _history.PruneReport:
        """Apply the retention of changes (a count per URL, an age), a batch per transaction,
        each URL's newest deleted text handed to its baseline (``_history.prune_changes``)."""
        if isinstance(older_than, timedelta):
            older_than = utcnow() - older_than
        deleted = baselines = 0
        while True:
            with translate_errors("pruning changes"), self.engine.begin() as conn:
                done = _history.prune_changes(conn, keep_per_url, older_than)
            deleted += done.deleted
            baselines += done.baselines
            if done.deleted < _history.PRUNE_BATCH:
                return _history.PruneReport(deleted, baselines)
            log.info("pruning changes: %d rows deleted so far", deleted)

    # ----- maintenance -------------------------------------------------------------------

    def prune_poll_log(self, older_than: datetime | timedelta) -> int:
        """Delete poll-log rows polled before ``older_than`` (a time, or an age such as
        ``timedelta(days=settings.poll_log_retention_days)``), and the deferral rows of the
        slots started before it; returns how many poll-log rows."""
        if isinstance(older_than, timedelta):
            older_than = utcnow() - older_than
        with translate_errors("pruning the poll log"), self.engine.begin() as conn:
            result = conn.execute(delete(poll_log).where(poll_log.c.polled_at < older_than))
            conn.execute(delete(deferrals).where(deferrals.c.started_at < older_than))
            return int(result.rowcount)


_URL_RECORD_COLUMNS = (
    "SELECT u.id, u.url, s.host, u.etag, u.last_modified, u.last_hash, u.last_raw_hash, "
    "u.selector, u.ignore_patterns, b.url_id IS NOT NULL FROM urls u "
    "JOIN sites s ON s.id = u.site_id LEFT JOIN change_baselines b ON b.url_id = u.id "
)
#: straight to the driver: a slot reads its URLs' records on the crawl's critical path
_ACTIVE_URLS = "SELECT id, importance FROM urls WHERE removed_at IS NULL ORDER BY id"
_ID_WEIGHT = np.dtype([("id", np.int64), ("weight", np.float64)])
_PG_URL_RECORDS = _URL_RECORD_COLUMNS + "WHERE u.id = ANY(CAST(%(ids)s AS bigint[]))"
_SQLITE_URL_RECORDS = _URL_RECORD_COLUMNS + "WHERE u.id IN (SELECT value FROM json_each(?))"


_PG_INSERT_URLS = text(
    "INSERT INTO urls (url, site_id, importance, selector, ignore_patterns, added_at, "
    "polls, hits, misses, not_modified, errors) "
    "SELECT u, s, w, sel, ign, :now, 0, 0, 0, 0, 0 FROM unnest("
    "CAST(:u AS text[]), CAST(:s AS bigint[]), CAST(:w AS float8[]), "
    "CAST(:sel AS text[]), CAST(:ign AS text[])) AS t(u, s, w, sel, ign) "
    "RETURNING url, id"
).bindparams(bindparam("now", type_=UTCDateTime()))


_SQLITE_INSERT_URLS = text(
    "INSERT INTO urls (url, site_id, importance, selector, ignore_patterns, added_at, "
    "polls, hits, misses, not_modified, errors) "
    "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
    "json_extract(value, '$[2]'), json_extract(value, '$[3]'), json_extract(value, '$[4]'), "
    ":now, 0, 0, 0, 0, 0 FROM json_each(:rows)"
).bindparams(bindparam("now", type_=UTCDateTime()))


def _insert_urls(conn: Connection, rows: list[dict[str, Any]], now: datetime) -> dict[str, int]:
    """Insert new URL rows; their ids by URL."""
    if is_postgres(conn):
        result = conn.execute(
            _PG_INSERT_URLS,
            {
                "now": now,
                "u": [r["url"] for r in rows],
                "s": [r["site_id"] for r in rows],
                "w": [r["importance"] for r in rows],
                "sel": [r["selector"] for r in rows],
                "ign": [r["ignore_patterns"] for r in rows],
            },
        )
    else:  # SQLite: RETURNING would go row by row; one JSON parameter, then the ids
        packed = [
            [r["url"], r["site_id"], r["importance"], r["selector"], r["ignore_patterns"]]
            for r in rows
        ]
        conn.execute(_SQLITE_INSERT_URLS, {"now": now, "rows": json.dumps(packed)})
        result = conn.execute(
            select(urls.c.url, urls.c.id).where(among(conn, urls.c.url, [r["url"] for r in rows]))
        )
    return {u: int(i) for u, i in result}


def _entry_values(e: NewUrl) -> dict[str, Any]:
    if not 0 < e.importance <= 1:
        raise ValueError(f"importance of {e.url} must be in (0, 1], got {e.importance}")
    patterns = list(e.ignore_patterns)
    return {
        "importance": float(e.importance),
        "selector": e.selector,
        "ignore_patterns": json.dumps(patterns) if patterns else None,
    }


def _slot_values(s: SlotRecord) -> dict[str, Any]:
    return {
        "slot": s.slot,
        "scheduler": s.scheduler,
        "started_at": s.started_at,
        "duration_s": s.duration_s,
        "polls": s.polls,
        "hits": s.hits,
        "misses": s.misses,
        "not_modified": s.not_modified,
        "errors": s.errors,
        "overrun": s.overrun,
        "lag_s": s.lag_s,
        "capacity": s.capacity,
        "knapsack_fill": s.knapsack_fill,
    }
