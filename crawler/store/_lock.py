"""One service per database: a lock the database side holds, gone when its holder dies.

Two ``crawler run`` on one database both crawled (every URL polled twice, politeness
bypassed, slot numbers duplicated, the scheduler state overwritten by whichever wrote last).
The service therefore takes a lock before it touches anything, and a second one refuses.

Decisions:

* **PostgreSQL**: a session-level advisory lock (``pg_try_advisory_lock``) held on a
  dedicated connection (out of the pool, autocommit: never idle in a transaction) for the
  service's lifetime. The server drops it when that session ends, whatever killed the
  process (kill -9, OOM, a lost host): no stale lock to clean up. Advisory locks are per
  database already; the key adds the schema (``current_schema()``; several crawlers, and the
  tests, live in separate schemas of one database) and a *role* ("service" today): the
  two-int form ``(NAMESPACE, crc32(schema NUL role))``. The holder is described from the
  server's own tables (``pg_locks`` joined with ``pg_stat_activity``: its backend, client
  address and ``application_name``, which the lock connection sets to
  ``crawler <role> pid=.. host=..``), so nothing is written that could go stale.
* **SQLite**: ``flock(LOCK_EX | LOCK_NB)`` on a sidecar file ``<database>.lock`` next to
  the database. The kernel releases it when the process dies. ``flock`` rather than POSIX
  ``fcntl`` locks: an ``fcntl`` lock is dropped when *any* descriptor of the file is closed
  by the process, and two opens in one process do not conflict; ``flock`` belongs to the
  open file description (two services in one process conflict too). A sidecar rather than
  the database file: SQLite itself holds ``fcntl`` locks on the database, and a SQLite-level
  lock (``locking_mode=EXCLUSIVE`` or a long write transaction) would also shut out the
  CLI's ``add``/``list`` while the service runs. The holder writes its pid, host and start
  time into the file for the refusal message. The file is never deleted (unlinking a lock
  file races with a process that has it open).
* **Shared mode** (``shared=True``: ``pg_try_advisory_lock_shared``/``LOCK_SH``): several
  holders at once, none while an exclusive holder exists. Meant for the cluster's
  workers (each takes the "service" role shared, so a non-cluster ``crawler run`` and a
  cluster cannot mix) and its coordinator (the "coordinator" role, exclusive, on the same
  connection type).
* ``ServiceLock.ensure()`` re-checks a PostgreSQL lock (the server restarted, the network
  cut the session): it reconnects and takes the lock again if nobody else has, and says
  False when another process took it meanwhile (then this one must stop).
  ``ServiceLock.watch(interval, on_lost)`` does that from a daemon thread; the service
  stops itself (as on SIGTERM) when told its lock is gone.
* **A fencing token, and a check at every slot.** A watch every 15 s left a window: after
  ``pg_terminate_backend`` a second service took the lock at once while the first polled on
  until its next look (13 slots of 0.5 s polled by both on the test's site). So a holder
  bumps the lock's *generation* in ``service_fence`` once it holds the lock
  (``claim_fence``; ``_fence.py``), every slot commit checks in its own transaction that the
  generation is still its own (else nothing lands), and the service calls ``ensure()``
  before every slot's first request (the hook ``CrawlLoop.may_poll``). On PostgreSQL that
  is one round trip on the lock's own connection (is the lock still granted to this
  session: a terminated session fails it at once), then, only if the session died, a new
  session that takes the lock again only if it is free *and* the generation is still this
  holder's (a service that came and went meanwhile may have committed: this one's memory
  is stale, it must stop). On SQLite it reads the generation (the flock itself cannot be
  lost, but a deleted lock file lets a second service in). An exclusive holder whose check
  cannot reach the database does not poll that slot: it cannot tell whether another
  service has taken over. What is left is the slot in progress when the lock went: its
  polls were checked at its start (``tests/service/test_session_loss.py``: 0 pages polled
  by both after the takeover).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from crawler.store import _fence
from crawler.store._engine import translate_errors
from crawler.store._types import StoreError, StoreUnavailable

log = logging.getLogger(__name__)

#: first key of every crawler advisory lock ("craw"), so they are easy to find in pg_locks
NAMESPACE = 0x63726177
SERVICE = "service"
#: what a refused process is told to do
_ADVICE = (
    "Stop it first, or give this one another database (or PostgreSQL schema). The lock "
    "goes with its holder: if that process is gone, it is released by itself"
)


class ServiceLockHeld(StoreError):  # noqa: N818 - reads as the condition it reports
    """Another process holds the lock; ``holders`` describe it (pid, host, since, ...)."""

    def __init__(self, message: str, holders: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.holders = holders


class ServiceLockLost(ServiceLockHeld):
    """This service held the lock, lost its session, and another process took the lock
    meanwhile: it stopped polling and commits nothing more."""

    def __init__(self, role: str, where: str) -> None:
        super().__init__(
            f"another process took this database's {role} lock ({where}) while this "
            "service ran (its lock's database session had ended, or its lock file was "
            "removed): this service stopped polling at once and committed nothing since. "
            "One service runs per database: stop the other one first if this one should run",
            [],
        )


def owner_info(what: str = "crawler run") -> dict[str, Any]:
    """This process, as a lock holder describes itself."""
    return {
        "what": what,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def lock_key(schema: str, role: str) -> int:
    """The second advisory-lock key (a signed int4) of ``role`` in ``schema``."""
    value = zlib.crc32(f"{schema}\0{role}".encode())
    return value - 2**32 if value >= 2**31 else value


@dataclass
class ServiceLock:
    """A held lock; release it with ``release()`` or by leaving the ``with`` block."""

    role: str
    shared: bool
    where: str
    owner: dict[str, Any]
    _engine: Engine | None = None
    _conn: Connection | None = None
    _fd: int | None = None
    _key: int = 0
    _idle_ms: int = 0  # the cluster's coordinator: end_session_when_idle
    #: the fence generation this holder took (``claim_fence``; None: not claimed)
    generation: int | None = None
    _db: Engine | None = None  # where the fence is read on SQLite (the store's engine)
    #: the previous holder did not let the lock go cleanly (it died or lost its session):
    #: it may still be finishing a slot when ``claim_fence`` returns
    took_over: bool = False
    released: bool = field(default=False)
    _mutex: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> ServiceLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def release(self) -> None:
        """Give the lock up (idempotent); stops a ``watch``."""
        self._stop.set()
        with self._mutex:
            self._release()

    def _release(self) -> None:
        if self.released:
            return
        self.released = True
        if self._db is not None and self.generation is not None and not self.shared:
            try:  # the next holder need not wait for this one's last slot
                with self._db.begin() as conn:
                    _fence.release(conn, self.role, self.generation)
            except SQLAlchemyError as exc:
                log.warning("the %s lock's clean release not recorded: %s", self.role, exc)
        if self._conn is not None:
            with contextlib.suppress(SQLAlchemyError):  # a dead session holds nothing
                # unlocked before the session ends: the server ends a closed session
                # after the client has gone on, and a next holder asking at once would
                # still find it held
                _pg_unlock(self._conn, self._key, self.shared)
            with contextlib.suppress(SQLAlchemyError):
                self._conn.close()
            self._conn = None
        if self._fd is not None:
            if not self.shared:  # the description goes with the holder
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def end_session_when_idle(self, seconds: float) -> None:
        """PostgreSQL (the cluster's coordinator): have the server end this
        lock's session, and so release the lock, once it has been idle for ``seconds``
        (``idle_session_timeout``, PostgreSQL 14+): a holder that is paused (SIGSTOP) or
        hung loses the lock to the next one instead of holding it while doing nothing.
        The holder must then touch the lock (``ensure``) more often than that."""
        self._idle_ms = max(1, int(seconds * 1000))
        if self._conn is not None:
            self._set_idle(self._conn)

    def _set_idle(self, conn: Connection) -> None:
        if self._idle_ms:
            with contextlib.suppress(SQLAlchemyError):  # an older server: no such setting
                conn.execute(
                    text("SELECT set_config('idle_session_timeout', :v, false)"),
                    {"v": f"{self._idle_ms}ms"},
                )

    def claim_fence(self, engine: Engine) -> int:
        """Take the next generation of this lock's fence (``_fence.py``), once the schema is
        migrated and before anything is loaded or polled; remembered as ``generation``.
        Raises StoreError (StoreUnavailable: retry) if the database refuses."""
        holder = (
            f"{self.owner.get('what', 'crawler')} pid={os.getpid()} host={socket.gethostname()}"
        )
        with translate_errors(f"taking the {self.role} lock's fence"), engine.begin() as conn:
            claimed = _fence.claim(conn, self.role, holder)
        with self._mutex:
            self.generation = claimed.generation
            self.took_over = not claimed.predecessor_released
            self._db = engine
        return claimed.generation

    def _fence_is_mine(self, conn: Connection | None) -> bool:
        """Whether no other holder claimed the fence since this one (read on ``conn``, else
        on the store's engine); shared holders and unclaimed locks do not check."""
        if self.shared or self.generation is None:
            return True
        if conn is not None:
            return _fence.current(conn, self.role) == self.generation
        assert self._db is not None
        with translate_errors(f"checking the {self.role} lock's fence"), self._db.connect() as c:
            return _fence.current(c, self.role) == self.generation

    def ensure(self) -> bool:
        """True if this process still holds the lock (a PostgreSQL lock whose session died
        is taken again when free); False if another process has it now. Raises
        StoreUnavailable when the database cannot be reached to tell."""
        with self._mutex:
            return self._ensure()

    def watch(self, interval_s: float, on_lost: Callable[[], None]) -> None:
        """Check the lock every ``interval_s`` seconds in a daemon thread (``ensure``) and
        call ``on_lost()`` once, from that thread, if another process has taken it (a
        PostgreSQL restart or a network cut ended this session and a second service
        started meanwhile). An unreachable database is checked again next time. Stops at
        ``release()``."""

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    held = self.ensure()
                except StoreError as exc:
                    log.warning("cannot check the %s lock (%s); trying again", self.role, exc)
                    continue
                if not held and not self._stop.is_set():
                    log.error(
                        "another process took the %s lock of this database (%s)",
                        self.role,
                        self.where,
                    )
                    on_lost()
                    return

        threading.Thread(target=loop, name=f"crawler-{self.role}-lock", daemon=True).start()

    def _ensure(self) -> bool:
        if self.released:
            return False
        if self._engine is None:  # SQLite: a flock lives as long as the descriptor
            return self._fence_is_mine(None)
        if self._conn is not None:
            try:
                held = self._conn.execute(_HELD, {"ns": NAMESPACE, "key": _oid(self._key)})
                if held.scalar():
                    return True
            except SQLAlchemyError:
                pass
            with contextlib.suppress(SQLAlchemyError):
                self._conn.close()
            self._conn = None
        try:
            conn = _pg_connection(self._engine, self.role)
        except SQLAlchemyError as exc:
            raise StoreUnavailable(f"re-taking the {self.role} lock: {_short(exc)}") from exc
        try:
            taken = _pg_try(conn, self._key, self.shared)
            if taken and self._fence_is_mine(conn):
                self._conn = conn
                self._set_idle(conn)
                return True
            if taken:  # a stale generation: given back before the session ends, since the
                # server ends a closed session after the client has gone on, and a next
                # holder asking at once would still find it held
                _pg_unlock(conn, self._key, self.shared)
        except SQLAlchemyError as exc:
            raise StoreUnavailable(f"re-taking the {self.role} lock: {_short(exc)}") from exc
        finally:
            if self._conn is not conn:
                conn.close()
        return False


def acquire(
    engine: Engine,
    owner: Mapping[str, Any] | None = None,
    *,
    role: str = SERVICE,
    shared: bool = False,
) -> ServiceLock:
    """Take the ``role`` lock of the database behind ``engine``, or raise ServiceLockHeld
    (someone else has it) or StoreUnavailable (the database cannot be reached)."""
    info = dict(owner) if owner is not None else owner_info()
    if engine.dialect.name == "postgresql":
        return _acquire_pg(engine, info, role, shared)
    return _acquire_sqlite(engine, info, role, shared)


# ----- PostgreSQL ---------------------------------------------------------------------------

_HELD = text(
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
    "AND classid = CAST(:ns AS oid) AND objid = CAST(:key AS oid) AND objsubid = 2 "
    "AND granted"
)
_HOLDERS = text(
    "SELECT a.pid, a.application_name, host(a.client_addr), a.backend_start, l.mode "
    "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid = CAST(:ns AS oid) AND l.objid = CAST(:key AS oid) AND l.objsubid = 2 "
    "AND l.granted ORDER BY a.backend_start"
)


def _oid(key: int) -> int:
    """The unsigned value pg_locks shows for a signed int4 key."""
    return key + 2**32 if key < 0 else key


def _pg_connection(engine: Engine, role: str) -> Connection:
    conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    conn.detach()  # out of the pool: closing it ends the session, and with it the lock
    name = f"crawler {role} pid={os.getpid()} host={socket.gethostname()}"[:63]
    conn.execute(text("SELECT set_config('application_name', :name, false)"), {"name": name})
    return conn


def _pg_try(conn: Connection, key: int, shared: bool) -> bool:
    fn = "pg_try_advisory_lock_shared" if shared else "pg_try_advisory_lock"
    return bool(
        conn.execute(text(f"SELECT {fn}(:ns, :key)"), {"ns": NAMESPACE, "key": key}).scalar()
    )


def _pg_unlock(conn: Connection, key: int, shared: bool) -> None:
    fn = "pg_advisory_unlock_shared" if shared else "pg_advisory_unlock"
    conn.execute(text(f"SELECT {fn}(:ns, :key)"), {"ns": NAMESPACE, "key": key})


def _acquire_pg(engine: Engine, info: dict[str, Any], role: str, shared: bool) -> ServiceLock:
    try:
        conn = _pg_connection(engine, role)
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"taking the {role} lock: database unavailable: {_short(exc)}"
        ) from exc
    try:
        schema = conn.execute(text("SELECT coalesce(current_schema(), '')")).scalar() or ""
        database = conn.execute(text("SELECT current_database()")).scalar()
        key = lock_key(str(schema), role)
        where = f"PostgreSQL database {database}, schema {schema or '(none)'}"
        if _pg_try(conn, key, shared):
            return ServiceLock(role, shared, where, info, _engine=engine, _conn=conn, _key=key)
        rows = conn.execute(_HOLDERS, {"ns": NAMESPACE, "key": _oid(key)}).all()
    except SQLAlchemyError as exc:
        conn.close()
        raise StoreUnavailable(f"taking the {role} lock: {_short(exc)}") from exc
    conn.close()
    holders = [
        {
            "backend_pid": pid,
            "application_name": app,
            "client_addr": addr or "local socket",
            "since": start.isoformat(timespec="seconds") if start is not None else None,
            "mode": mode,
        }
        for pid, app, addr, start, mode in rows
    ]
    described = "; ".join(
        f"{h['application_name'] or 'a session'} (PostgreSQL backend {h['backend_pid']}, "
        f"client {h['client_addr']}, since {h['since']})"
        for h in holders
    )
    raise ServiceLockHeld(
        f"another crawler {role} already runs on this database ({where}): "
        f"{described or 'a session that has just ended; try again'}. {_ADVICE}.",
        holders,
    )


# ----- SQLite -------------------------------------------------------------------------------


def lock_path(engine: Engine) -> Path | None:
    """The sidecar lock file of a SQLite database (None for an in-memory one)."""
    database = make_url(str(engine.url)).database
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return None
    real = Path(os.path.realpath(Path(database).expanduser()))  # one file, one lock
    return real.with_name(real.name + ".lock")


def _acquire_sqlite(engine: Engine, info: dict[str, Any], role: str, shared: bool) -> ServiceLock:
    path = lock_path(engine)
    if path is None:  # an in-memory database: nobody else can open it
        return ServiceLock(role, shared, "in-memory SQLite database", info)
    database = path.with_suffix("")
    if role != SERVICE:
        path = path.with_name(f"{database.name}.{role}.lock")
    where = f"SQLite database {database} (lock file {path})"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StoreUnavailable(f"cannot open the lock file {path}: {exc}") from exc
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        holders = _read_holders(fd)
        os.close(fd)
        described = "; ".join(
            f"{h.get('what', 'a process')} pid {h.get('pid', '?')} on host "
            f"{h.get('host', '?')} since {h.get('since', '?')}"
            for h in holders
        )
        raise ServiceLockHeld(
            f"another crawler {role} already runs on this database ({where}): "
            f"{described or 'a process that has not described itself yet'}. {_ADVICE}.",
            holders,
        ) from None
    except OSError as exc:
        os.close(fd)
        raise StoreUnavailable(f"cannot lock {path}: {exc}") from exc
    _write_holder(fd, info, shared)
    return ServiceLock(role, shared, where, info, _fd=fd)


def _read_holders(fd: int) -> list[dict[str, Any]]:
    """The holders' descriptions written in the lock file (one JSON object per line)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        raw = os.read(fd, 65536).decode("utf-8", "replace")
    except OSError:
        return []
    out: list[dict[str, Any]] = []
    for line in raw.splitlines():
        with contextlib.suppress(ValueError):
            doc = json.loads(line)
            if isinstance(doc, dict):
                out.append(doc)
    return out


def _write_holder(fd: int, info: dict[str, Any], shared: bool) -> None:
    line = (json.dumps(info, default=str, sort_keys=True) + "\n").encode()
    with contextlib.suppress(OSError):  # the description is a courtesy, the flock is the lock
        if shared:
            os.lseek(fd, 0, os.SEEK_END)
        else:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, line)


def _short(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    message = str(orig if orig is not None else exc).strip()
    return message.splitlines()[0] if message else type(exc).__name__
