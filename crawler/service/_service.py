"""The service around the crawl loop: components, health, housekeeping, signals."""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TypeVar

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from prometheus_client import CollectorRegistry

from crawler.api import ChangeApi
from crawler.delivery import DeliveryProcess
from crawler.gc_policy import tune_gc
from crawler.health import AsyncServer, start_http_server
from crawler.metrics import CrawlerMetrics
from crawler.service._cluster import ClusterMember
from crawler.service._inflight import GRACE_S
from crawler.service._loop import CrawlLoop, SlotSummary, Verdict
from crawler.service._pollers import build_poller
from crawler.service._startup import in_thread, waiting_for_database
from crawler.settings import Settings
from crawler.store import (
    ServiceLock,
    ServiceLockLost,
    Store,
    StoreError,
)

#: seconds a starting service waits for its delivery process to have started
DELIVERY_READY_S = 60.0
log = logging.getLogger("crawler.service")

T = TypeVar("T")

PRUNE_EVERY_MINUTES = 60
#: how often a thread checks the service still holds its database's lock (store/_lock.py),
#: besides the loop's check at every slot start (a slot may last longer than this)
LOCK_CHECK_SECONDS = 15.0


def recorded_settings(settings: Settings) -> dict[str, object]:
    """What ``crawler run`` records for the admin commands: every setting but the database
    URL (it may hold a password; the commands found the database already) and the API token
    (a secret), and when."""
    document: dict[str, object] = settings.model_dump(
        mode="json", exclude={"database_url", "api_token"}
    )
    document["started_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    return document


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
        give_up: asyncio.Event | None = None,
    ) -> None:
        self.settings = settings
        #: set when the process is told to stop: a start-up step waiting for the database
        #: gives up (crawler/service/_startup.py)
        self._give_up = give_up
        self.store = store or Store(settings.database_url)
        self._own_store = store is None
        self.registry = registry or CollectorRegistry()
        self.metrics = CrawlerMetrics(
            self.registry, scheduler=settings.scheduler, slot_seconds=settings.slot_seconds
        )
        self.poller = build_poller(settings)
        self.loop = CrawlLoop(settings, self.store, self.poller, self.metrics)
        self._housekeeping = AsyncIOScheduler(timezone="UTC")
        #: the outbox's deliverer: a process of its own beside the crawl (crawler/delivery)
        self.deliverer: DeliveryProcess | None = None
        if settings.delivery:
            self.deliverer = DeliveryProcess(
                settings, self.metrics, exclusive_lock=settings.cluster
            )
        self._http: AsyncServer | None = None
        #: the change feed and API on the HTTP port (None: no port)
        self.change_api: ChangeApi | None = None
        self._lock: ServiceLock | None = None
        #: set when another process took this database's lock: ``serve`` raises it
        self.lost: ServiceLockLost | None = None
        self._unsure = False  # the last lock check could not reach the database
        self._first_poll_at = 0.0  # monotonic: taken over from a holder that did not release
        self._running = False
        self._started = time.monotonic()
        #: this worker's membership in cluster mode (crawler/service/_cluster.py)
        self.cluster: ClusterMember | None = None
        if settings.cluster:
            metrics = f"http://{settings.metrics_host}:{settings.metrics_port}/metrics"
            self.cluster = ClusterMember(settings, self.store, metrics)

    async def __aenter__(self) -> CrawlService:
        # one service per database: refuse (ServiceLockHeld) before touching anything
        # (cluster workers share it: a cluster and a single service never mix)
        self._lock = await self._waiting(
            "take the service lock",
            functools.partial(self.store.acquire_service_lock, shared=self.cluster is not None),
        )
        self._lock.watch(LOCK_CHECK_SECONDS, self._lost_from_thread)
        try:
            return await self._start()
        except BaseException:
            if self.cluster is not None and self.cluster.worker_id:  # leave the cluster
                await asyncio.to_thread(self.cluster.stop)
            self._lock.release()
            raise

    async def _waiting(self, what: str, call: Callable[[], T]) -> T:
        """A blocking start-up step, tried again while the database is unavailable."""
        return await waiting_for_database(what, in_thread(call), self._give_up)

    async def _start(self) -> CrawlService:
        await self._waiting("migrate the schema", self.store.upgrade)
        # the admin commands show bounds and shares with the running service's settings
        settings = recorded_settings(self.settings)
        await self._waiting(
            "record the settings", functools.partial(self.store.save_service_settings, settings)
        )
        # the lock's fencing token: from now on, a holder that lost the lock commits nothing
        lock = self._lock
        assert lock is not None
        await self._waiting(
            "claim the fence", functools.partial(self.store.claim_service_fence, lock)
        )
        if not lock.shared:  # cluster workers are fenced per site by their leases
            self.loop.may_poll = self._may_poll
            if lock.took_over:  # the previous holder may be finishing its last slot
                self._first_poll_at = math.inf  # from when this service is ready (below)
                log.info(
                    "the previous holder of this database's lock did not let it go cleanly "
                    "(it died or lost its database session): the slots of the next %.3g s "
                    "are left out, so that no page is polled by both in one slot",
                    self.settings.slot_seconds,
                )
        if self.cluster is not None:  # join the cluster: register, heartbeat, coordinate
            await self._waiting("register this worker", self.cluster.start)
            self.loop.join_cluster(self.cluster)
        # the poller starts (crawl workers import, open their fetchers) while the scheduler loads
        starting = asyncio.ensure_future(self.poller.start())
        try:
            await waiting_for_database("load the URLs", self.loop.load, self._give_up)
        finally:
            await starting
        if self.settings.metrics_port:
            # its own store (own connection pool): readers of the feed never take a
            # connection the slot's commit waits for
            self.change_api = ChangeApi(
                Store(self.settings.database_url),
                token=self.settings.api_token,
                diff_max_bytes=self.settings.delivery_diff_max_bytes,
                cache_entries=self.settings.api_feed_diff_cache,
            )
            self._http = await start_http_server(
                self.settings.metrics_host,
                self.settings.metrics_port,
                self.registry,
                self.is_healthy,
                self.change_api.install,
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
        if self.deliverer is not None:
            self.deliverer.start()
            # its imports take a couple of CPU seconds: delivering from the first slot on
            if not await asyncio.to_thread(self.deliverer.wait_ready, DELIVERY_READY_S):
                log.warning("the delivery process is not ready after %.0f s", DELIVERY_READY_S)
        if self._first_poll_at:  # one slot length from now, when the first slot could start
            self._first_poll_at = time.monotonic() + self.settings.slot_seconds
        if self.cluster is not None:  # loaded, serving, delivering: sites may come now
            # (last: a site given to a worker whose loop has not started waits there, and a
            # site asked of it is not released before the hand-over grace; under load the
            # delivery process alone took 10 s to be ready)
            await asyncio.to_thread(self.cluster.ready)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._housekeeping.shutdown(wait=False)
        if self.deliverer is not None:
            await asyncio.to_thread(self.deliverer.stop)
        try:
            await self.loop.flush()
        finally:
            if self.cluster is not None and self.cluster.worker_id:  # leave the cluster
                await asyncio.to_thread(self.cluster.stop)
            if self._http is not None:
                await self._http.close()
            if self.change_api is not None:
                self.change_api.store.close()
            self.loop.discovery.close()
            await self.poller.aclose()
            if self._own_store:
                self.store.close()
            if self._lock is not None:
                self._lock.release()

    async def _may_poll(self) -> Verdict:
        """The loop's ``may_poll`` hook, before every slot's first request: does this
        service still hold its database's lock (``ServiceLock.ensure``: one round trip on
        PostgreSQL)? Lost to another process: stop at once. Cannot tell (the database is
        unreachable): leave this slot out, as another service may be polling meanwhile.
        Also left out: the slots starting within one slot length of taking the lock over
        from a holder that did not release it (it may be finishing its last slot)."""
        assert self._lock is not None
        if time.monotonic() < self._first_poll_at:
            return "skip"
        try:
            held = await asyncio.to_thread(self._lock.ensure)
        except StoreError as exc:
            (log.debug if self._unsure else log.warning)(
                "slot not polled: cannot tell whether this service still holds the "
                "database's lock (%s); not polling until it can (checked every slot)",
                exc,
            )
            self._unsure = True
            return "skip"
        if held:
            if self._unsure:
                log.info("this service still holds the database's lock: polling again")
                self._unsure = False
            return "poll"
        self._lock_lost()
        return "stop"

    def _lock_lost(self) -> ServiceLockLost:
        assert self._lock is not None
        if self.lost is None:
            self.lost = ServiceLockLost(self._lock.role, self._lock.where)
            log.error("%s", self.lost)
        return self.lost

    def _lost_from_thread(self) -> None:
        """The lock's watch thread found the lock taken (a slot longer than its check)."""
        self._lock_lost()
        _stop_this_process()

    @property
    def http_server(self) -> AsyncServer | None:
        """The running HTTP server (metrics, health, change feed and API), if any."""
        return self._http

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
        """Drop poll-log rows and delivered events older than the retention setting, and
        changes past theirs."""
        cutoff = datetime.now(UTC) - timedelta(days=self.settings.poll_log_retention_days)
        try:
            removed = await asyncio.to_thread(self.store.prune_poll_log, cutoff)
        except StoreError as exc:
            log.warning("poll log not pruned: %s", exc)
            return
        if removed:
            log.info("pruned %d poll-log rows older than %s", removed, cutoff.isoformat())
        try:  # the outbox: delivered events (pending and dead ones stay)
            gone = await asyncio.to_thread(self.store.outbox.prune, cutoff)
        except StoreError as exc:
            log.warning("outbox not pruned: %s", exc)
        else:
            if gone:
                log.info("pruned %d delivered events older than %s", gone, cutoff.isoformat())
        await self.prune_changes()

    async def prune_changes(self) -> None:
        """Apply the retention of changes (``changes_keep_per_url``, ``changes_max_age_days``):
        each URL's oldest kept change keeps its before (docs/history.md)."""
        keep = self.settings.changes_keep_per_url or None  # 0: keep them all
        days = self.settings.changes_max_age_days or None  # 0: for ever
        if keep is None and days is None:
            return
        age = None if days is None else timedelta(days=days)
        try:
            done = await asyncio.to_thread(self.store.prune_changes, keep, age)
        except StoreError as exc:
            log.warning("changes not pruned: %s", exc)
            return
        if done.deleted:
            log.info(
                "pruned %d changes (beyond %s per URL or older than %s days); %d baselines moved",
                done.deleted, keep, days, done.baselines,
            )  # fmt: skip

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
    leaving = asyncio.Event()

    def on_signal() -> None:
        if leaving.is_set():  # a second signal: at once
            stop.set()
        leaving.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    async with CrawlService(settings, give_up=leaving) as service:
        log.info(
            "crawling with %s: %d URLs, %.3g polls per %.3g s slot, database %s",
            settings.scheduler,
            service.loop.scheduler.size if service.loop.scheduler else 0,
            service.loop.scheduler.capacity if service.loop.scheduler else 0,
            settings.slot_seconds,
            settings.database_url.split("@")[-1],
        )
        tune_gc()
        draining = asyncio.ensure_future(_leave(service, leaving, stop))
        try:
            await service.run(stop, max_slots)
        finally:
            draining.cancel()
    if service.lost is not None:  # another process has the database now (exit status 3)
        raise service.lost
    log.info("stopped cleanly")


async def _leave(service: CrawlService, leaving: asyncio.Event, stop: asyncio.Event) -> None:
    """On SIGINT or SIGTERM, stop the loop. A cluster worker first lets its slot in flight
    end and starts no other (at most a slot and its deadline, plus the loop's grace): its
    requests were sent,
    so their poll-log rows, changes and learning must land, and the sites it then frees are
    handed over whole (cutting the slot dropped the answers of requests the sites had
    already served). A single service stops at once, as before; a second signal too."""
    await leaving.wait()
    settings = service.settings
    if service.cluster is not None:
        # no slot starts from now on (one starting right after the slot in flight, as
        # after an overrun, was cut by the stop below with its requests sent)
        service.loop.leaving = True
        limit = (
            time.monotonic() + settings.slot_seconds + settings.effective_slot_deadline() + GRACE_S
        )
        while service._running and time.monotonic() < limit and not stop.is_set():
            await asyncio.sleep(0.02)
    stop.set()
