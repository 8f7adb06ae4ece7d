"""The deliverer: a loop with its own event loop, database engine and HTTP clients that
fans the outbox out to the destinations and sends what is due, beside the crawl (in a
process of its own: ``_process.py``).

One pass (``step``): fan out up to a batch of new events; record the answers of the
sends that finished; claim as many due deliveries as there is room for
(``delivery_concurrency`` in all; while several destinations are ready, at most a quarter
of it per destination, so one hanging destination cannot take every place; a destination
alone may use them all), read their payloads' context in one go, and start their sends as
tasks (a change's diff is made for its first send and stored with the answers); publish
the outbox's depth and age. The pass repeats at once while there is work, else after
``delivery_poll_s``. While sends are in flight, a pass waits for a quarter of
``delivery_concurrency`` answers (or ``delivery_poll_s``) before it writes them and claims
more: one write transaction per answer contended with the crawl's slot commits (SQLite has
one writer) and cost the crawl a third of its polls/s, and each transaction costs CPU, so
they are few and large (docs/results.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from crawler.delivery._context import event_context, event_contexts
from crawler.delivery._events import message_id
from crawler.delivery._filters import matches
from crawler.delivery._notify import NotifySender, notification
from crawler.delivery._pace import CpuPace
from crawler.delivery._payload import Context, event_body
from crawler.delivery._retry import RetryPolicy
from crawler.delivery._sender import Answer, WebhookSender
from crawler.delivery._signing import signed_headers
from crawler.fetch import AddressPolicy
from crawler.settings import Settings
from crawler.store import (
    DEAD,
    DELIVERED,
    PENDING,
    DeliveryOutcome,
    DueDelivery,
    OutboxStore,
    ServiceLock,
    ServiceLockHeld,
    Store,
    StoreError,
)

log = logging.getLogger("crawler.delivery")


class _Inc(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class DeliveryMetrics(Protocol):
    """What the deliverer counts: ``CrawlerMetrics``, or in a delivery process the pipe
    to the service's (``_process.py``)."""

    @property
    def delivery_events_written_total(self) -> _Inc: ...

    def observe_delivery_attempt(self, destination: int, outcome: str) -> None: ...

    def set_outbox(self, depth: int, oldest_age_s: float) -> None: ...

    def observe_delivery_paced(self, seconds: float) -> None: ...


#: the role of the lock a cluster's deliverer holds (one deliverer per database)
DELIVERY_ROLE = "delivery"
#: seconds between a waiting cluster worker's tries for the delivery lock
LOCK_RETRY_S = 5.0
#: seconds between two measures of the outbox's depth and age
BACKLOG_EVERY_S = 2.0
#: a destination may hold 1 / SHARE_PARTS of the places (``delivery_concurrency``) while
#: others are ready, so one that hangs leaves the rest to the others; alone, all of them
SHARE_PARTS = 4
#: a claim outlives the send's timeout by this much before the delivery is due again
CLAIM_MARGIN_S = 30.0


class Deliverer:
    """``start()`` runs it in a daemon thread; ``stop()`` ends it (sends in flight are
    abandoned: their claims expire and they are sent again, with the same id)."""

    def __init__(
        self,
        settings: Settings,
        metrics: DeliveryMetrics | None = None,
        *,
        exclusive_lock: bool,
        on_ready: Callable[[], None] | None = None,
        pace: CpuPace | None = None,
    ) -> None:
        self.settings = settings
        #: the deliverer's own CPU limit while the machine is busy (_pace.py); a delivery
        #: process sets it, a deliverer in a thread of the service cannot tell its CPU apart
        self.pace = pace
        #: called once the deliverer's start-up work is done (claims of a stopped deliverer
        #: released), or, in a cluster, when it begins to wait for the delivery lock
        self.on_ready = on_ready
        self.metrics = metrics
        self.exclusive_lock = exclusive_lock
        self.policy = RetryPolicy(settings.delivery_retry_schedule)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stopping = threading.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._busy: Counter[int] = Counter()
        self._done: list[DeliveryOutcome] = []
        #: diffs made for sends in flight (change id -> diff), stored with their answers
        self._made: dict[int, str] = {}
        self._backlog_at = 0.0
        self._recorded_at = 0.0
        self.store: Store | None = None
        self.outbox: OutboxStore | None = None
        self.sender: WebhookSender | None = None
        self.notifier: NotifySender | None = None

    # ----- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="crawler-delivery", daemon=True)
        self._thread.start()

    def run_here(self) -> None:
        """Run in the calling thread until ``stop()`` (a delivery process's main thread)."""
        self._main()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # its loop has already ended
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except Exception:  # never take the service down: the outbox keeps the events
            log.exception("delivery stopped by an unexpected error; events stay in the outbox")
        finally:
            self._ready()  # no one waits for a deliverer that has ended

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stopping.is_set():
            return
        self.store = Store(self.settings.database_url)  # its own engine and connections
        self.outbox = self.store.outbox
        self.sender = WebhookSender(
            AddressPolicy(self.settings.allow_private_addresses),
            self.settings.delivery_timeout_s,
            self.settings.user_agent,
            self.settings.delivery_concurrency,  # connections kept per destination, at most
        )
        self.notifier = NotifySender(
            self.sender,
            self.settings.delivery_timeout_s,
            max(1, self.settings.delivery_concurrency // 4),
        )
        lock: ServiceLock | None = None
        try:
            if self.exclusive_lock:
                self._ready()  # the lock may come much later (when its holder dies)
                lock = await self._take_lock()
                if lock is None:
                    return
            # the one deliverer now (the service's lock, or the cluster's delivery lock):
            # what a killed deliverer had claimed is due again, sent with the same ids
            released = await self._release_claims()
            if released:
                log.info("delivery: %d send(s) of a stopped deliverer are due again", released)
            self._ready()
            while not self._stop.is_set():
                try:
                    busy = await self.step()
                except StoreError as exc:
                    log.warning("delivery: %s; trying again", exc)
                    busy = False
                if not busy:
                    await self._wait(self.settings.delivery_poll_s)
                await self._keep_pace()
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self.sender.aclose()
            self.notifier.close()
            if lock is not None:
                lock.release()
            self.store.close()

    def _ready(self) -> None:
        callback, self.on_ready = self.on_ready, None
        if callback is not None:
            callback()

    async def _release_claims(self) -> int:
        assert self.outbox is not None and self._stop is not None
        while not self._stop.is_set():
            try:
                return await asyncio.to_thread(self.outbox.release_claims)
            except StoreError as exc:
                log.warning("delivery: %s; trying again", exc)
                self._ready()  # started, if not delivering yet: the service need not wait
                await self._wait(LOCK_RETRY_S)
        return 0

    async def _take_lock(self) -> ServiceLock | None:
        """Cluster mode: wait for the delivery lock (one deliverer per database)."""
        assert self.store is not None and self._stop is not None
        while not self._stop.is_set():
            try:
                lock = await asyncio.to_thread(self.store.acquire_service_lock, role=DELIVERY_ROLE)
                log.info("delivering the cluster's events from this worker")
                return lock
            except ServiceLockHeld:
                pass
            except StoreError as exc:
                log.warning("delivery lock: %s; trying again", exc)
            await self._wait(LOCK_RETRY_S)
        return None

    async def _keep_pace(self) -> None:
        """Wait while over the CPU budget on a busy machine (_pace.py says why): until the
        budget is paid back, not one pause per pass, or a pass costing more than a pause
        pays back would keep delivery over its share."""
        assert self._stop is not None
        while self.pace is not None and not self._stop.is_set():
            pause = self.pace.pause()
            if pause <= 0:
                return
            await self._wait(pause)
            if self.metrics is not None:
                self.metrics.observe_delivery_paced(pause)

    async def _wait(self, seconds: float) -> None:
        assert self._stop is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    # ----- one pass ----------------------------------------------------------------------

    async def step(self) -> bool:
        """Fan out, record, claim and start sends; True if anything moved."""
        assert self.outbox is not None
        settings = self.settings
        fanned = await asyncio.to_thread(
            self.outbox.fan_out, matches, settings.delivery_batch, self.policy.first_delay
        )
        if fanned and self.metrics is not None:
            self.metrics.delivery_events_written_total.inc(fanned)
        # answers are written, and sends claimed, a quarter of the places at a time (a write
        # transaction per answer contended with the slot commits on SQLite; an eighth at a
        # time cost more CPU per event in transactions: docs/results.md)
        gather = max(1, settings.delivery_concurrency // SHARE_PARTS)
        recorded = 0
        if (
            len(self._done) >= gather
            or not self._tasks
            or time.monotonic() - self._recorded_at >= settings.delivery_poll_s
        ):
            recorded = await self._record()
            self._recorded_at = time.monotonic()
        room = settings.delivery_concurrency - len(self._tasks)
        due: list[DueDelivery] = []
        contexts: dict[int, Context] = {}
        if room > 0 and (not self._tasks or recorded >= gather or fanned):
            hold = timedelta(seconds=settings.delivery_timeout_s + CLAIM_MARGIN_S)
            due, contexts = await asyncio.to_thread(self._claim, room, hold)
        for item in due:
            self._busy[item.destination_id] += 1
            task = asyncio.create_task(self._deliver(item, contexts.get(item.event.id)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        await self._measure()
        if not (fanned or due) and self._tasks:
            await self._wait_answers(gather, settings.delivery_poll_s)
            return True
        return bool(fanned or recorded or due)

    def _claim(self, room: int, hold: timedelta) -> tuple[list[DueDelivery], dict[int, Context]]:
        """Claim due sends and read their payloads' context, in one thread hop (the
        contexts of the whole batch at once: _context.py says why)."""
        assert self.outbox is not None
        due = self.outbox.claim_due(room, hold, None, dict(self._busy), parts=SHARE_PARTS)
        if not due:
            return [], {}
        # a diff not stored yet is made here and stored with the answers (_record): once
        contexts = event_contexts(self.outbox, self.settings, [d.event for d in due], self._made)
        return due, contexts

    async def _wait_answers(self, want: int, timeout: float) -> None:
        """Until ``want`` answers wait to be written, no send is in flight, or ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self._done) < want and self._tasks:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            await asyncio.wait(
                set(self._tasks), timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )

    async def _record(self) -> int:
        assert self.outbox is not None
        done, self._done = self._done, []
        made, self._made = self._made, {}
        if done or made:
            try:
                await asyncio.to_thread(self.outbox.record, done, made)
            except StoreError:
                self._done = done + self._done  # written at the next pass
                self._made = made | self._made
                raise
        return len(done)

    async def _measure(self) -> None:
        if self.metrics is None or time.monotonic() - self._backlog_at < BACKLOG_EVERY_S:
            return
        assert self.outbox is not None
        self._backlog_at = time.monotonic()
        depth, oldest = await asyncio.to_thread(self.outbox.backlog)
        age = 0.0 if oldest is None else max(0.0, (datetime.now(UTC) - oldest).total_seconds())
        self.metrics.set_outbox(depth, age)

    async def _deliver(self, item: DueDelivery, context: Context | None = None) -> None:
        assert self.store is not None and self.outbox is not None and self.sender is not None
        try:
            if context is None:
                context = await asyncio.to_thread(
                    event_context, self.store, self.outbox, self.settings, item.event
                )
            max_bytes = self.settings.delivery_diff_max_bytes
            if item.body_format is not None and self.notifier is not None:  # apprise
                title, text = notification(
                    item.event, context, item.body_format, item.template, max_bytes
                )
                answer = await self.notifier.send(
                    item.destination_url, title, text, item.body_format
                )
            else:
                body = event_body(item.event, context, max_bytes)
                headers = signed_headers(item.secret, message_id(item.event.id), body)
                answer = await self.sender.send(item.destination_url, headers, body)
            await self._judge(item, answer)
        except StoreError as exc:  # the claim expires and the event is tried again
            log.warning("delivery of %s: %s", message_id(item.event.id), exc)
        except Exception as exc:  # a bug or an unforeseen answer: a failed attempt, counted
            log.exception("delivery of %s failed unexpectedly", message_id(item.event.id))
            await self._judge(item, Answer(None, f"internal error: {type(exc).__name__}: {exc}"))
        finally:
            self._busy[item.destination_id] -= 1

    async def _judge(self, item: DueDelivery, answer: Answer) -> None:
        """Turn an answer into the delivery's next state (and the destination's: 410
        disables it, 429/503 with Retry-After pauses it)."""
        assert self.outbox is not None
        now = datetime.now(UTC)
        ids = (item.event.id, item.destination_id)
        if answer.ok:
            self._outcome(item, DeliveryOutcome(*ids, DELIVERED, now, answer.status), "delivered")
            return
        error = answer.error or f"HTTP {answer.status}: {answer.text[:200]}"
        if answer.status == 410:
            reason = f"answered 410 Gone to {message_id(item.event.id)}"
            await asyncio.to_thread(self.outbox.disable_destination, item.destination_id, reason)
            log.warning("destination %d disabled: %s", item.destination_id, reason)
            self._outcome(item, DeliveryOutcome(*ids, PENDING, now, 410, error), "gone")
            return
        delay = self.policy.next_delay(item.attempts + 1, answer.retry_after)
        if delay is None:
            self._outcome(item, DeliveryOutcome(*ids, DEAD, now, answer.status, error), "dead")
            return
        at = now + timedelta(seconds=delay)
        if answer.retry_after is not None:
            await asyncio.to_thread(self.outbox.pause_destination, item.destination_id, at)
        self._outcome(item, DeliveryOutcome(*ids, PENDING, at, answer.status, error), "failed")

    def _outcome(self, item: DueDelivery, outcome: DeliveryOutcome, label: str) -> None:
        self._done.append(outcome)
        if self.metrics is not None:
            self.metrics.observe_delivery_attempt(item.destination_id, label)
