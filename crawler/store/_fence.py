"""The fencing token of the service lock: a holder that lost its lock commits nothing.

The service lock (``_lock.py``) on PostgreSQL is a session advisory lock. When that session
ends while the process lives on (``pg_terminate_backend``, a network cut, a server restart),
another service can take the lock at once, and the first one does not know until it next
looks. Both then polled and committed. The lock alone cannot close that window; a fencing
token can:

* ``service_fence`` keeps one row per lock role: a ``generation`` that only grows. A service
  bumps it (``claim``) once it holds the lock and the schema is migrated, before it loads
  or polls anything, and remembers the value it got.
* Every slot commit starts with ``check``: ``UPDATE service_fence SET checked_at = now
  WHERE role = :role AND generation = :mine``, in the commit's own transaction. A row count
  other than 1 raises ``FencedOut`` and the transaction rolls back: nothing of the slot
  lands. An UPDATE rather than a ``SELECT ... FOR SHARE``: it is the same statement on both
  databases, and on SQLite (whose driver begins the transaction at the first write) it takes
  the write lock at once, so nobody can bump the generation between the check and the
  commit. On PostgreSQL its row lock makes a new holder's ``claim`` wait until the commit
  in flight has ended (``LOCK_TIMEOUT_S`` at most): a commit either lands before the new
  holder loads the saved state, or not at all. One row, one index probe, prepared once:
  +0.1 ms (PostgreSQL) and +0.2 ms (SQLite) on a 20-poll commit of 1-16 ms, medians on
  the shared test machine under load (``benchmarks/lock_check.py``).
* A holder that stops cleanly sets ``released_at`` (``release``). A new holder that finds
  it unset took over from one that died or lost its session and may still be finishing the
  slot it checked before it lost the lock: the service then leaves out the slots starting
  within one slot length of its claim (``CrawlService``), so no page is polled by both in
  one slot window.
* SQLite's ``flock`` cannot be lost silently, but the same path runs there (a deleted lock
  file would otherwise let two services in), so both databases behave alike.

Shared holders (cluster workers) bump the generation too, so a single service that lost its
lock to a cluster commits nothing either; they do not check it themselves: their commits are
fenced per site by lease epochs (``_cluster.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, bindparam, select, text, update

from crawler.store._sql import is_postgres
from crawler.store._types import StoreError
from crawler.store._upsert import upsert
from crawler.store.models import UTCDateTime, service_fence

#: how long a new holder's ``claim`` waits for a commit of the previous holder in flight
LOCK_TIMEOUT_S = 10.0


#: the commit's check, prepared once (it runs in every slot commit)
_CHECK = text(
    "UPDATE service_fence SET checked_at = :now WHERE role = :role AND generation = :generation"
).bindparams(bindparam("now", type_=UTCDateTime()))


class FencedOut(StoreError):  # noqa: N818 - reads as the condition it reports
    """This process's generation of the lock is no longer the stored one: another service
    took the database's lock since; nothing was written."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A claimed generation, and whether the previous holder let the lock go cleanly (if
    not, it died or lost its session, and may still be finishing a slot)."""

    generation: int
    predecessor_released: bool


def claim(conn: Connection, role: str, holder: str) -> Claim:
    """In the caller's transaction: the next generation of ``role``'s fence (1 the first
    time), recorded with ``holder``."""
    now = datetime.now(UTC)
    query = select(service_fence.c.released_at).where(service_fence.c.role == role)
    if is_postgres(conn):
        conn.execute(text(f"SET LOCAL lock_timeout = '{int(LOCK_TIMEOUT_S * 1000)}ms'"))
        query = query.with_for_update()  # waits for a commit in flight (its check's lock)
    previous = conn.execute(query).first()
    upsert(
        conn,
        service_fence,
        [{"role": role, "generation": 1, "holder": holder, "taken_at": now}],
        ["role"],
        ["holder", "taken_at"],
        set_={
            "generation": service_fence.c.generation + 1,
            "checked_at": None,
            "released_at": None,
        },
    )
    released = previous is None or previous.released_at is not None
    return Claim(int(current(conn, role) or 0), released)


def release(conn: Connection, role: str, generation: int) -> None:
    """Record that the holder of ``generation`` let the lock go cleanly (nothing if another
    holder claimed a generation since)."""
    conn.execute(
        update(service_fence)
        .where(service_fence.c.role == role, service_fence.c.generation == generation)
        .values(released_at=datetime.now(UTC))
    )


def current(conn: Connection, role: str) -> int | None:
    """The stored generation of ``role`` (None: never claimed)."""
    value = conn.execute(
        select(service_fence.c.generation).where(service_fence.c.role == role)
    ).scalar()
    return None if value is None else int(value)


def check(conn: Connection, role: str, generation: int, where: str = "") -> None:
    """In a commit's transaction, before anything else is written: raise ``FencedOut`` unless
    ``generation`` is still ``role``'s stored one (the row stays locked until the commit)."""
    result = conn.execute(
        _CHECK, {"now": datetime.now(UTC), "role": role, "generation": generation}
    )
    if result.rowcount == 1:
        return
    now = current(conn, role)
    raise FencedOut(
        f"another process took this database's {role} lock{where} (its generation is "
        f"{now}, this process holds {generation}): nothing of this commit was written"
    )
