"""The service around the crawl loop: components, health, housekeeping, signals."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import TracebackType

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from prometheus_client import CollectorRegistry

from crawler.gc_policy import tune_gc
from crawler.health import AsyncServer, start_http_server
from crawler.metrics import CrawlerMetrics
from crawler.service._cluster import ClusterMember
from crawler.service._loop import CrawlLoop, SlotSummary
from crawler.service._pollers import build_poller
from crawler.settings import Settings
from crawler.store import ServiceLock, Store, StoreError

log = logging.getLogger("crawler.service")

PRUNE_EVERY_MINUTES = 60
#: how often the service checks it still holds its database's lock (store/_lock.py)
LOCK_CHECK_SECONDS = 15.0


def _stop_this_process() -> None:
    """Another service took this database's lock (this one's session had died): stop as
    on SIGTERM; a restart is then refused while the other one runs."""
    os.kill(os.getpid(), signal.SIGTERM)


class CrawlService:
    """Everything ``crawler run`` runs, as an async context manager.

    >>> async with CrawlService(settings) as service:
    ...     await service.run(stop_event)
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.store = store or Store(settings.database_url)
        self._own_store = store is None
        self.registry = registry or CollectorRegistry()
        self.metrics = CrawlerMetrics(
            self.registry, scheduler=settings.scheduler, slot_seconds=settings.slot_seconds
        )
        self.poller = build_poller(settings)
        self.loop = CrawlLoop(settings, self.store, self.poller, self.metrics)
        self._housekeeping = AsyncIOScheduler(timezone="UTC")
        self._http: AsyncServer | None = None
        self._lock: ServiceLock | None = None
        self._running = False
        self._started = time.monotonic()
        #: issue 20: this worker's membership in cluster mode (crawler/service/_cluster.py)
        self.cluster: ClusterMember | None = None
        if settings.cluster:
            metrics = f"http://{settings.metrics_host}:{settings.metrics_port}/metrics"
            self.cluster = ClusterMember(settings, self.store, metrics)

    async def __aenter__(self) -> CrawlService:
        # one service per database: refuse (ServiceLockHeld) before touching anything
        # (cluster workers share it: a cluster and a single service never mix; issue 20)
        self._lock = await asyncio.to_thread(
            functools.partial(self.store.acquire_service_lock, shared=self.cluster is not None)
        )
        self._lock.watch(LOCK_CHECK_SECONDS, _stop_this_process)
        try:
            return await self._start()
        except BaseException:
            if self.cluster is not None and self.cluster.worker_id:  # issue 20: leave
                await asyncio.to_thread(self.cluster.stop)
            self._lock.release()
            raise

    async def _start(self) -> CrawlService:
        await asyncio.to_thread(self.store.upgrade)
        if self.cluster is not None:  # issue 20: register, heartbeat, try to coordinate
            await asyncio.to_thread(self.cluster.start)
            self.loop.cluster = self.cluster
            self.loop.permit = self.cluster  # no poll past its renew deadline
        # the poller starts (crawl workers import, open their fetchers) while the scheduler loads
        starting = asyncio.ensure_future(self.poller.start())
        try:
            await self.loop.load()
        finally:
            await starting
        if self.settings.metrics_port:
            self._http = await start_http_server(
                self.settings.metrics_host,
                self.settings.metrics_port,
                self.registry,
                self.is_healthy,
            )
        self._housekeeping.add_job(
            self.prune,
            "interval",
            minutes=PRUNE_EVERY_MINUTES,
            id="prune-poll-log",
            next_run_time=datetime.now(UTC) + timedelta(seconds=5),
            coalesce=True,
            max_instances=1,
        )
        self._housekeeping.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._housekeeping.shutdown(wait=False)
        try:
            await self.loop.flush()
        finally:
            if self.cluster is not None and self.cluster.worker_id:  # issue 20: leave
                await asyncio.to_thread(self.cluster.stop)
            if self._http is not None:
                await self._http.close()
            await self.poller.aclose()
            if self._own_store:
                self.store.close()
            if self._lock is not None:
                self._lock.release()

    def is_healthy(self) -> tuple[bool, str]:
        """Healthy while the loop runs and its last slot ended recently."""
        if not self._running:
            return False, "the crawl loop is not running"
        last = self.loop.last_slot_monotonic or self._started
        allowed = 3 * self.settings.slot_seconds + self.settings.fetch_timeout_s + 30
        idle = time.monotonic() - last
        if idle > allowed:
            return False, f"no slot finished for {idle:.0f} s"
        return True, "ok"

    async def prune(self) -> None:
        """Drop poll-log rows older than the retention setting."""
        cutoff = datetime.now(UTC) - timedelta(days=self.settings.poll_log_retention_days)
        try:
            removed = await asyncio.to_thread(self.store.prune_poll_log, cutoff)
        except StoreError as exc:
            log.warning("poll log not pruned: %s", exc)
            return
        if removed:
            log.info("pruned %d poll-log rows older than %s", removed, cutoff.isoformat())

    async def run(
        self,
        stop: asyncio.Event,
        max_slots: int | None = None,
        on_slot: Callable[[SlotSummary], None] | None = None,
    ) -> None:
        """Run the crawl loop until ``stop`` is set."""
        self._running = True
        try:
            await self.loop.run(stop, max_slots, on_slot)
        finally:
            self._running = False


async def serve(settings: Settings, max_slots: int | None = None) -> None:
    """Run the service until SIGINT or SIGTERM, then stop cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with CrawlService(settings) as service:
        log.info(
            "crawling with %s: %d URLs, %.3g polls per %.3g s slot, database %s",
            settings.scheduler,
            service.loop.scheduler.size if service.loop.scheduler else 0,
            service.loop.scheduler.capacity if service.loop.scheduler else 0,
            settings.slot_seconds,
            settings.database_url.split("@")[-1],
        )
        tune_gc()
        await service.run(stop, max_slots)
    log.info("stopped cleanly")
