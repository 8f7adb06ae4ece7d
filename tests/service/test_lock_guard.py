"""The service checks its database lock at every slot start, in-process, on both databases:
taken over by another holder, it stops before its next slot's first request."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sqlalchemy import text

from crawler.fetch import validate_url
from crawler.service import CrawlService, SlotSummary
from crawler.store import NewUrl, ServiceLock, ServiceLockHeld, ServiceLockLost, Store
from crawler.store._lock import lock_path
from crawler.testsite import ChangingSite
from tests.service.conftest import service_settings

TAKEOVER_AFTER = 5


def _take_over(database_url: str, service: CrawlService, db_backend: str) -> ServiceLock:
    """Another service gets in: on PostgreSQL the service's lock session is ended (as by
    ``pg_terminate_backend``), on SQLite its lock file is deleted; the newcomer takes the
    lock and claims the fence, as ``crawler run`` does."""
    lock = service._lock
    assert lock is not None
    other = Store(database_url)
    if db_backend == "postgresql":
        assert lock._conn is not None
        backend = lock._conn.execute(text("SELECT pg_backend_pid()")).scalar()
        with other.engine.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": backend})
    else:
        path = lock_path(other.engine)
        assert isinstance(path, Path)
        path.unlink()
    deadline = time.monotonic() + 10
    while True:
        try:
            taken = other.acquire_service_lock()
            break
        except ServiceLockHeld:  # the termination is asynchronous
            assert time.monotonic() < deadline
            time.sleep(0.02)
    other.claim_service_fence(taken)
    return taken


async def test_a_service_taken_over_stops_before_its_next_slot(
    database_url: str, db_backend: str, site: ChangingSite
) -> None:
    with Store(database_url) as store:
        store.add_urls([NewUrl(validate_url(u)) for u in site.urls()[:10]])
    settings = service_settings(database_url, capacity=4.0, slot_seconds=0.1)
    summaries: list[SlotSummary] = []
    taken: list[ServiceLock] = []
    served_at_takeover: list[int] = []
    async with CrawlService(settings) as service:

        def on_slot(summary: SlotSummary) -> None:
            summaries.append(summary)
            if len(summaries) == TAKEOVER_AFTER:
                served_at_takeover.append(site.truth.served)
                taken.append(_take_over(database_url, service, db_backend))

        try:
            await asyncio.wait_for(service.run(asyncio.Event(), 50, on_slot), 30)
        finally:
            for lock in taken:
                lock.release()
    # stopped at the next slot's start: not one request more. (A slot that overran had its
    # successor polling already when it was reported: that one is not committed.)
    assert site.truth.served == served_at_takeover[0]
    assert len(summaries) in (TAKEOVER_AFTER, TAKEOVER_AFTER + 1)
    assert [s.committed for s in summaries[TAKEOVER_AFTER:]] in ([], [False])
    assert isinstance(service.lost, ServiceLockLost)
    assert "another process took this database's service lock" in str(service.lost)
    with Store(database_url) as store:
        assert store.stats().slots == TAKEOVER_AFTER
