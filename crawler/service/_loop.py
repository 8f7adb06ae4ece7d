"""The crawl loop: one slot = select, fetch, judge, learn, commit (DESIGN.md).

Components are built from the settings and can be passed in for tests. The scheduler is
pure and synchronous; the store is synchronous and runs in a worker thread; the fetcher
and the change detector are asynchronous.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from crawler import schedulers
from crawler.detect import ChangeDetector, DetectItem, Verdict, WatchRules
from crawler.fetch import FetchConfig, Fetcher, FetchRequest, FetchResult
from crawler.metrics import CrawlerMetrics
from crawler.service._clock import SlotClock, Tick
from crawler.settings import Settings
from crawler.store import (
    OUTCOMES,
    Outcome,
    PollRecord,
    SlotRecord,
    Store,
    StoreError,
    StoreUnavailable,
    UrlRecord,
)

log = logging.getLogger("crawler.service")

#: slots kept in memory while the database refuses commits
MAX_PENDING_SLOTS = 10_000

#: poll outcomes as the metrics count them (a baseline poll is a successful miss)
_METRIC_OUTCOME = {
    "hit": "hit", "miss": "miss", "not_modified": "not_modified", "baseline": "miss",
    "error": "error",
}


@dataclass(frozen=True, slots=True)
class SlotSummary:
    """What one slot did."""

    seq: int
    polls: int
    hits: int
    misses: int
    not_modified: int
    baselines: int
    errors: int
    duration_s: float
    lag_s: float
    overrun: bool
    committed: bool


def fetch_config(settings: Settings) -> FetchConfig:
    """The fetcher's configuration from the service settings."""
    return FetchConfig(
        user_agent=settings.user_agent,
        timeout_s=settings.fetch_timeout_s,
        max_body_bytes=settings.fetch_max_body_bytes,
        max_redirects=settings.fetch_max_redirects,
        per_host_concurrency=settings.per_host_concurrency,
        per_host_min_delay_s=settings.per_host_min_delay_s,
        allow_private_addresses=settings.allow_private_addresses,
        respect_robots=settings.respect_robots,
        retries=settings.fetch_retries,
    )


class CrawlLoop:
    """Polls the watched URLs slot after slot and learns which ones change."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        fetcher: Fetcher,
        detector: ChangeDetector,
        metrics: CrawlerMetrics,
    ) -> None:
        self.settings = settings
        self.store = store
        self.fetcher = fetcher
        self.detector = detector
        self.metrics = metrics
        self.scheduler: schedulers.Scheduler | None = None
        self.slots_run = 0
        self.last_slot_monotonic: float | None = None
        self._watch_version: object = None
        self._pending: list[tuple[SlotRecord, list[PollRecord], schedulers.State]] = []

    # ----- start-up ---------------------------------------------------------------------

    async def load(self) -> None:
        """Restore the scheduler from the database (or start one) and sync the watch list."""
        name = self.settings.scheduler
        state = await asyncio.to_thread(self.store.load_scheduler_state, name)
        if state is not None:
            self.scheduler = schedulers.restore(state)
            log.info(
                "restored scheduler %s: %d URLs, slot %s",
                name, self.scheduler.size, state.get("slot"),
            )
        else:
            self.scheduler = schedulers.create(
                name, capacity=1.0, seed=self.settings.seed, **self.settings.scheduler_params
            )
            log.info("started a new %s scheduler", name)
        await self.sync_watch_list(force=True)

    async def sync_watch_list(self, *, force: bool = False) -> bool:
        """Add and remove URLs the operator changed since the last look; True if any."""
        assert self.scheduler is not None
        version = await asyncio.to_thread(self.store.watch_list_version)
        if not force and version == self._watch_version:
            return False
        ids, importance = await asyncio.to_thread(self.store.active_urls)
        known, _ = self.scheduler.frequencies()
        gone = np.setdiff1d(known, ids, assume_unique=True)
        new = ~np.isin(ids, known, assume_unique=True)
        if gone.size:
            self.scheduler.remove(gone)
        if new.any():
            self.scheduler.add(ids[new], importance=importance[new])
        self.scheduler.set_capacity(self.settings.effective_capacity(self.scheduler.size))
        self._watch_version = version
        if gone.size or new.any():
            log.info(
                "watch list: %d URLs (+%d, -%d), capacity %.3g polls per slot",
                self.scheduler.size, int(new.sum()), gone.size, self.scheduler.capacity,
            )
        return True

    # ----- the loop ---------------------------------------------------------------------

    async def run(
        self,
        stop: asyncio.Event,
        max_slots: int | None = None,
        on_slot: Callable[[SlotSummary], None] | None = None,
    ) -> None:
        """Run slots on the clock until ``stop`` is set (or ``max_slots`` ran); ``on_slot``
        sees every slot's summary."""
        clock = SlotClock(self.settings.slot_seconds)
        while max_slots is None or self.slots_run < max_slots:
            tick = await clock.wait(stop)
            if tick is None:
                break
            summary = await self.run_slot(tick, clock)
            log.info(
                "slot %d: polls=%d hits=%d misses=%d not_modified=%d errors=%d "
                "duration=%.3fs lag=%.3fs%s",
                summary.seq, summary.polls, summary.hits, summary.misses,
                summary.not_modified, summary.errors, summary.duration_s, summary.lag_s,
                " OVERRUN" if summary.overrun else "",
            )
            if on_slot is not None:
                on_slot(summary)
        await self.flush()

    async def run_slot(self, tick: Tick, clock: SlotClock | None = None) -> SlotSummary:
        """One slot, end to end."""
        assert self.scheduler is not None
        started = time.monotonic()
        started_at = datetime.now(UTC)
        try:
            await self.sync_watch_list()
        except StoreError as exc:
            log.warning("watch list not refreshed: %s", exc)
        ids = self.scheduler.select()
        records = await self._records(ids)
        requests = [
            FetchRequest(int(i), r.url, r.etag, r.last_modified)
            for i in ids.tolist()
            if (r := records.get(int(i))) is not None
        ]
        results = await self.fetcher.fetch_many(requests)
        verdicts = await self._judge(results, records)
        polls, fb_ids, fb_hits, counts = self._outcomes(results, verdicts, records)
        if fb_ids:
            self.scheduler.feedback(np.array(fb_ids, dtype=np.int64), np.array(fb_hits))
        duration = time.monotonic() - started
        overrun = clock.overran(tick.planned) if clock is not None else False
        _, x = self.scheduler.frequencies() if self.scheduler.size else (None, np.zeros(0))
        fill = float(np.sum(x)) / self.scheduler.capacity
        slot = SlotRecord(
            slot=self.scheduler.slot, scheduler=self.scheduler.name, started_at=started_at,
            duration_s=duration, polls=len(polls), hits=counts["hit"], misses=counts["miss"],
            not_modified=counts["not_modified"], errors=counts["error"], overrun=overrun,
            lag_s=tick.lag_s, capacity=self.scheduler.capacity, knapsack_fill=fill,
        )
        self._pending.append((slot, polls, self.scheduler.take_delta()))
        committed = await self.flush()
        self.slots_run += 1
        self.last_slot_monotonic = time.monotonic()
        self.metrics.observe_slot(time.monotonic() - started, tick.lag_s, overrun)
        self.metrics.set_watch(self.scheduler.size, self.scheduler.capacity, fill)
        return SlotSummary(
            tick.seq, len(polls), counts["hit"], counts["miss"], counts["not_modified"],
            counts["baseline"], counts["error"], duration, tick.lag_s, overrun, committed,
        )

    async def flush(self) -> bool:
        """Commit every slot not yet committed, oldest first. False if the database refused
        (unavailable, or an error): the slots stay pending and are retried after the next
        slot; the oldest are dropped, loudly, only beyond ``MAX_PENDING_SLOTS``."""
        while self._pending:
            slot, polls, delta = self._pending[0]
            began = time.monotonic()
            try:
                await asyncio.to_thread(self.store.commit_slot, slot, polls, delta)
            except StoreError as exc:
                unavailable = isinstance(exc, StoreUnavailable)
                (log.warning if unavailable else log.error)(
                    "slot %d not committed, %d slot(s) kept for retry: %s",
                    slot.slot, len(self._pending), exc,
                )
                if len(self._pending) > MAX_PENDING_SLOTS:
                    dropped = self._pending.pop(0)
                    log.error(
                        "dropped the records of slot %d after %d pending slots; its URLs' "
                        "learning rows are saved again when they are next polled",
                        dropped[0].slot, MAX_PENDING_SLOTS,
                    )
                return False
            self.metrics.observe_commit(time.monotonic() - began)
            self._pending.pop(0)
        return True

    # ----- steps ------------------------------------------------------------------------

    async def _records(self, ids: np.ndarray) -> dict[int, UrlRecord]:
        if ids.size == 0:
            return {}
        pending_ids = {p.url_id for _, polls, _ in self._pending for p in polls}
        records = await asyncio.to_thread(self.store.url_records, ids.tolist())
        if pending_ids:
            # A URL polled in a slot whose commit is still pending: use that poll's headers.
            latest = {p.url_id: p for _, polls, _ in self._pending for p in polls}
            for uid in pending_ids & records.keys():
                records[uid] = _apply_poll(records[uid], latest[uid])
        return records

    async def _judge(
        self, results: Sequence[FetchResult], records: dict[int, UrlRecord]
    ) -> dict[int, Verdict]:
        items: list[DetectItem] = []
        keys: list[int] = []
        for res in results:
            if res.outcome != "ok":
                continue
            rec = records[res.url_id]
            items.append(
                DetectItem(
                    body=res.body,
                    content_type=res.content_type,
                    rules=WatchRules(rec.selector, tuple(rec.ignore_patterns)),
                    previous_hash=rec.last_hash,
                    previous_raw_hash=rec.last_raw_hash,
                )
            )
            keys.append(res.url_id)
        verdicts = await self.detector.judge_many(items) if items else []
        return dict(zip(keys, verdicts, strict=True))

    def _outcomes(
        self,
        results: Sequence[FetchResult],
        verdicts: dict[int, Verdict],
        records: dict[int, UrlRecord],
    ) -> tuple[list[PollRecord], list[int], list[bool], dict[str, int]]:
        now = datetime.now(UTC)
        counts = dict.fromkeys(OUTCOMES, 0)
        polls: list[PollRecord] = []
        fb_ids: list[int] = []
        fb_hits: list[bool] = []
        keep_text = self.settings.store_snapshots
        for res in results:
            rec = records[res.url_id]
            outcome: Outcome
            if res.outcome == "error":
                outcome = "error"
                poll = PollRecord(
                    url_id=res.url_id, outcome="error", polled_at=now, status=res.status,
                    duration_s=res.duration_s, bytes=res.bytes_received,
                    error_kind=res.error_kind, error=res.error,
                )
            elif res.outcome == "not_modified":
                outcome = "not_modified" if rec.last_hash is not None else "baseline"
                poll = PollRecord(
                    url_id=res.url_id, outcome=outcome, polled_at=now, status=res.status,
                    duration_s=res.duration_s, bytes=res.bytes_received,
                    content_hash=rec.last_hash, etag=res.etag or rec.etag,
                    last_modified=res.last_modified or rec.last_modified,
                )
            else:
                verdict = verdicts[res.url_id]
                if verdict.changed is None:
                    outcome = "baseline"
                else:
                    outcome = "hit" if verdict.changed else "miss"
                snapshot = None
                if outcome == "hit" and keep_text and verdict.text is not None:
                    snapshot = verdict.text[: self.settings.snapshot_max_bytes].decode(
                        "utf-8", "replace"
                    )
                poll = PollRecord(
                    url_id=res.url_id, outcome=outcome, polled_at=now, status=res.status,
                    duration_s=res.duration_s, bytes=res.bytes_received,
                    content_hash=verdict.content_hash, raw_hash=verdict.raw_hash,
                    old_hash=rec.last_hash, etag=res.etag, last_modified=res.last_modified,
                    snapshot=snapshot,
                )
            counts[outcome] += 1
            polls.append(poll)
            if outcome in ("hit", "miss", "not_modified"):
                fb_ids.append(res.url_id)
                fb_hits.append(outcome == "hit")
            self.metrics.observe_poll(
                _METRIC_OUTCOME[outcome], res.duration_s, res.bytes_received, res.error_kind,
                rec.host if outcome == "error" else None,
            )
        return polls, fb_ids, fb_hits, counts


def _apply_poll(record: UrlRecord, poll: PollRecord) -> UrlRecord:
    if poll.outcome == "error":
        return record
    return UrlRecord(
        id=record.id, url=record.url, host=record.host,
        etag=poll.etag, last_modified=poll.last_modified,
        last_hash=poll.content_hash or record.last_hash,
        last_raw_hash=poll.raw_hash or record.last_raw_hash,
        selector=record.selector, ignore_patterns=record.ignore_patterns,
    )
