"""The crawl loop: one slot = select, fetch and judge, learn, commit.

Components are built from the settings by the service. The scheduler is pure and
synchronous; the store is synchronous and runs in a worker thread; fetching and judging are
the ``Poller``'s (in this process or in crawl workers: the loop does not know which).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from crawler import schedulers
from crawler.detect import snapshot_limit
from crawler.metrics import CrawlerMetrics
from crawler.schedulers import FloatArray, IdArray
from crawler.service._bounds import Constraints
from crawler.service._caps import HostCaps
from crawler.service._clock import SlotClock, Tick
from crawler.service._discovery import DiscoverySide
from crawler.service._health import HealthWatch
from crawler.service._inflight import GRACE_S, InFlight, Stream
from crawler.service._records import RecentRecords, after_poll, asks_for_text, changed_of
from crawler.service._steps import (
    Alongside,
    ClusterStep,
    Polled,
    SlotStep,
    default_steps,
)
from crawler.service._watch import (
    StoreWatch,
    WatchFollower,
    WatchSource,
    WatchUpdate,
    merge_saved,
)
from crawler.settings import Settings
from crawler.store import (
    OUTCOMES,
    FencedOut,
    Outcome,
    PollRecord,
    SlotRecord,
    Store,
    StoreError,
    StoreUnavailable,
    UrlRecord,
)
from crawler.workers import PollAnswer, Poller, PollJob

if TYPE_CHECKING:
    from crawler.service._cluster import ClusterMember

log = logging.getLogger("crawler.service")

#: slots kept in memory while the database refuses commits
MAX_PENDING_SLOTS = 10_000
#: changes logged one by one (at INFO, with the URL) per slot; the slot line counts them all
CHANGES_LOGGED_PER_SLOT = 50

#: what a slot-start guard answers: poll this slot, leave it out, or stop the loop
Verdict = Literal["poll", "skip", "stop"]

#: poll outcomes as the metrics count them (a baseline poll is a successful miss)
_METRIC_OUTCOME = {
    "hit": "hit",
    "miss": "miss",
    "not_modified": "not_modified",
    "baseline": "miss",
    "error": "error",
}
#: the outcomes the scheduler learns from (a baseline has no before; a failure says nothing)
_FEEDBACK = frozenset(("hit", "miss", "not_modified"))


class PollPermit(Protocol):
    """Whether this process may send requests now (a cluster worker that has not renewed
    its leases in time may not: crawler/service/_renewal.py)."""

    async def may_poll(self, loop: WatchFollower) -> bool:
        """Asked at every slot start before any request; False leaves the slot out."""
        ...

    def valid(self) -> bool:
        """False once polling must stop."""
        ...

    async def lapse(self) -> None:
        """Returns when polling must stop: the slot in flight is cut there."""
        ...


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
    #: polls selected but not made (see ``crawler.workers.DEFERRED_REASONS``)
    deferred: int = 0

    @classmethod
    def of(cls, record: SlotRecord, *, seq: int, baselines: int) -> SlotSummary:
        """The summary of the slot ``record`` (its commit not done yet)."""
        return cls(
            seq=seq,
            polls=record.polls,
            hits=record.hits,
            misses=record.misses,
            not_modified=record.not_modified,
            baselines=baselines,
            errors=record.errors,
            duration_s=record.duration_s,
            lag_s=record.lag_s,
            overrun=record.overrun,
            committed=False,
            deferred=sum(n for _, _, n in record.deferrals),
        )


class CrawlLoop:
    """Polls the watched URLs slot after slot and learns which ones change."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        poller: Poller,
        metrics: CrawlerMetrics,
    ) -> None:
        self.settings = settings
        self.store = store
        self.poller = poller
        self.metrics = metrics
        self.scheduler: schedulers.Scheduler | None = None
        self.slots_run = 0
        self.last_slot_monotonic: float | None = None
        self._watch_version: object = None
        self._pending: list[tuple[SlotRecord, list[PollRecord], schedulers.State]] = []
        self._recent = RecentRecords()
        self._flush_lock = asyncio.Lock()
        self._stop: asyncio.Event | None = None
        #: per-host politeness caps told to the scheduler (crawler.service._caps)
        self.caps = HostCaps(settings)
        # operator bounds, pause and the failure record (_bounds.py)
        self.constraints = Constraints(settings)
        #: health events (page.failing, page.recovered, page.stopped_changing): _health.py
        self.health = HealthWatch(settings, store)
        #: where the watch list comes from, and what the commits are fenced by: the whole
        #: store, or (set by the service) a cluster worker's leases (_watch.py)
        self.source: WatchSource = StoreWatch(store)
        # discovery: a share of each slot's polls follows links from the sources
        self.discovery = DiscoverySide(settings, store, poller, metrics)
        #: the features' parts of every slot, their hooks called in this order (_steps.py)
        self.steps: list[SlotStep] = default_steps(self)
        #: every slot's polls as they are answered; those that outlive their slot
        self.inflight = InFlight(poller, settings.effective_poll_linger(), GRACE_S)
        #: "may this process poll?", awaited by ``run`` at every slot start before any
        #: request, with the watch list's sync beside it (a single service's database lock:
        #: _service.py); "skip" leaves the slot out, "stop" sets the stop event and ends the
        #: run; None: always
        self.may_poll: Callable[[], Awaitable[Verdict]] | None = None
        #: asked before every slot's requests, after ``may_poll`` and its sync (it may sync
        #: the watch list itself), and cuts a slot in flight (a cluster worker's renew
        #: deadline); None: always
        self.permit: PollPermit | None = None
        #: set to end ``run`` after the slot in flight, before the next one starts (a
        #: cluster worker leaving: nothing sent is cut)
        self.leaving = False

    # ----- start-up ---------------------------------------------------------------------

    def join_cluster(self, member: ClusterMember) -> None:
        """Crawl as a cluster worker (before ``load``): the watch list is the leased
        sites' URLs, the rules, hosts and discovery sources read are those of its own
        sites, no request goes out past its renew deadline, and its part of every slot
        (probes of sites gained, sites asked held, its metrics) is one more step."""
        self.source = member
        self.constraints.scope = member.sites
        self.caps.scope = member
        self.discovery.owns = member.owns
        self.permit = member
        self.steps.append(ClusterStep(self, member))

    async def load(self) -> None:
        """Restore the scheduler from the database (or start one) and sync the watch list."""
        name = self.settings.scheduler
        # one scan after the other: run at once, they contend for the GIL and are slower
        state = await asyncio.to_thread(self.source.saved_state, name)
        watched = await asyncio.to_thread(self.source.watch_list)
        if state is not None:
            self.scheduler = schedulers.restore(state)
            log.info(
                "restored scheduler %s: %d URLs, slot %s",
                name,
                self.scheduler.size,
                state.get("slot"),
            )
        else:
            self.scheduler = schedulers.create(
                name, capacity=1.0, seed=self.settings.seed, **self.settings.scheduler_params
            )
            log.info("started a new %s scheduler", name)
        self._apply_watch_list(*watched)
        await self._apply_constraints(None)  # every URL's groups, bounds, pause
        # compiled loops ready before the first slot (seconds on a first start), off the loop
        await asyncio.to_thread(self.scheduler.warm_up)
        await self.discovery.prepare()  # the listing worker, started with the service

    async def sync_watch_list(self, *, force: bool = False) -> bool:
        """Take the watch-list source's changes since the last look (an operator's edits,
        pages discovery added, a cluster's lease changes); True if any."""
        assert self.scheduler is not None
        update = await self.source.sync(self.scheduler, self._watch_version, force=force)
        if update is None:
            return False
        added = self._apply_update(update)
        gained = update.ids if added is None else added  # None: every URL is new
        if update.replaced is not None:  # lost and regained: another may have polled
            gained = np.union1d(gained, update.replaced)
            # their polls still running were made under the old lease: they land nothing
            # (those of the sites lost went with their URLs; those of the sites held under
            # the same lease land: a lease change elsewhere no longer drops answers the
            # sites have served)
            dropped = set(update.replaced.tolist())
            for host in self.inflight.drop(lambda url_id: url_id not in dropped):
                self.metrics.observe_deferred("lease", host)
        self.health.stale(gained.tolist())
        await self._apply_constraints(added)
        return True

    def _apply_update(self, update: WatchUpdate) -> IdArray | None:
        """Watch what a watch-list source says (``update``), the saved rows of the URLs it
        gained restored; returns the URLs added (None: the scheduler was rebuilt, so every
        constraint is to be given to it again, not only the added URLs')."""
        assert self.scheduler is not None
        # the slots its bounded URLs were last selected in: a rebuilt scheduler's guard, or
        # a URL dropped and taken again, would count their bounds from the last poll the
        # scheduler learned from, and a poll with no feedback since (a first poll, a
        # failure, one in flight) could be followed by another within the bound
        replaced = update.replaced if update.replaced is not None else np.empty(0, np.int64)
        may_rebuild = update.saved is not None or replaced.size > 0
        selections = self.scheduler.selections() if may_rebuild else None
        if replaced.size:  # dropped, then taken again
            known, _ = self.scheduler.frequencies()
            if (dropped := np.intersect1d(known, replaced)).size:
                self.scheduler.remove(dropped)
        rebuilt = False
        if update.saved is not None:
            try:
                merged = merge_saved(self.scheduler, update.saved, self.settings.seed)
            except ValueError as exc:  # a corrupt saved row: those URLs restart learning
                log.warning("saved rows of the gained URLs not usable (they restart): %s", exc)
                merged = None
            if merged is None:
                log.warning("saved rows of the gained URLs not restored; they restart")
            elif merged is not self.scheduler:
                merged.set_capacity(self.scheduler.capacity)
                self.scheduler, rebuilt = merged, True
        added = self._apply_watch_list(update.version, update.ids, update.importance)
        if selections is not None and (rebuilt or replaced.size):
            self.scheduler.keep_selections(*selections)
        if rebuilt:  # the guard's constraints are not part of a scheduler's state
            self.caps.forget_applied()
            self.constraints.forget_applied()
            return None
        if replaced.size:  # removed and added again: their constraints are to be given again
            self.constraints.forget(replaced)
        return added

    async def _apply_constraints(self, added: IdArray | None) -> None:
        """Host groups and caps (of the URLs ``added``; None: all), and the
        operator's bounds, pause and revivals, which the saved state does not keep."""
        assert self.scheduler is not None
        await self.caps.load_groups(self.scheduler, self.store, added)
        list_version = self.source.list_version(self._watch_version)
        try:  # on a failure, retried at the next slot
            await self.constraints.refresh(self.scheduler, self.store, list_version)
        except StoreError:
            self._watch_version = None
            raise

    def _apply_watch_list(self, version: object, ids: IdArray, importance: FloatArray) -> IdArray:
        """Make the scheduler watch ``ids``; returns the ids it did not watch before."""
        assert self.scheduler is not None
        self._recent.clear()  # an edit may have changed a URL's rules, or removed it
        known, _ = self.scheduler.frequencies()
        gone = np.setdiff1d(known, ids, assume_unique=True)
        new = ~np.isin(ids, known, assume_unique=True)
        if gone.size:
            self.scheduler.remove(gone)
            if self.inflight.carrying:  # their polls still running land nothing
                dropped = set(gone.tolist())
                for host in self.inflight.drop(lambda url_id: url_id not in dropped):
                    self.metrics.observe_deferred("timeout", host)
        if new.any():
            self.scheduler.add(ids[new], importance=importance[new])
        self._apply_importance(ids[~new], importance[~new])
        self.set_capacity()
        self._watch_version = version
        if gone.size or new.any():
            log.info(
                "watch list: %d URLs (+%d, -%d), capacity %.3g polls per slot",
                self.scheduler.size,
                int(new.sum()),
                gone.size,
                self.scheduler.capacity,
            )
        return ids[new]

    def _apply_importance(self, ids: IdArray, importance: FloatArray) -> None:
        """Give the scheduler the importance an operator changed (``crawler edit
        --importance``) of URLs it already watches; learning is kept."""
        assert self.scheduler is not None
        if not ids.size:
            return
        known, current = self.scheduler.importances()
        at = np.searchsorted(known, ids)  # both sorted; every id in ``ids`` is watched
        moved = current[at] != importance
        if moved.any():
            self.scheduler.set_importance(ids[moved], importance[moved])
            log.info("importance changed for %d watched URLs", int(moved.sum()))

    def set_capacity(self) -> None:
        """The scheduler's polls per slot: the capacity less what the steps poll
        themselves (discovery's share)."""
        assert self.scheduler is not None
        capacity = self.settings.effective_capacity(self.scheduler.size)
        wanted = capacity - sum(step.reserved(capacity) for step in self.steps)
        if wanted != self.scheduler.capacity:
            self.scheduler.set_capacity(wanted)

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
        self._stop = stop
        # A slot that overran (the next one is already due) commits in the background while
        # the next slot selects and fetches; it is reported once its commit is done, before
        # the next slot commits. Otherwise each slot commits and is reported at its end.
        deferred: _Deferred | None = None
        try:
            while max_slots is None or self.slots_run < max_slots:
                tick = await clock.wait(stop)
                if tick is None or self.leaving:
                    break
                synced = False  # the watch list's changes taken already (with the verdict)
                verdict: Verdict = "poll"
                if self.may_poll is not None:
                    verdict, synced = await self._may_poll_and_sync(), True
                if verdict == "stop":
                    stop.set()
                    break
                if verdict == "skip" or (
                    self.permit is not None and not await self.permit.may_poll(self)
                ):
                    continue
                summary, commit = await self._slot(tick, clock, deferred, on_slot, synced)
                deferred = None
                if summary.overrun:
                    deferred = _Deferred(summary, commit)
                else:
                    _report(await _committed(summary, commit), on_slot)
        finally:
            await self._cut_in_flight("shutdown")
            if deferred is not None:
                _report(await _committed(deferred.summary, deferred.commit), on_slot)
        await self.flush()

    async def run_slot(self, tick: Tick, clock: SlotClock | None = None) -> SlotSummary:
        """One slot, end to end (committed, or kept pending, when it returns)."""
        summary, commit = await self._slot(tick, clock, None, None)
        return await _committed(summary, commit)

    async def _may_poll_and_sync(self) -> Verdict:
        """``may_poll``'s verdict, with the watch list's changes taken meanwhile: each is a
        database read in a thread, and the slot's first request waits for both, so they are
        made at once rather than one after the other (the watch list's sync changes nothing
        a verdict depends on; a slot left out then polls none of it)."""
        assert self.may_poll is not None
        check = asyncio.ensure_future(self.may_poll())
        try:
            await self._sync_or_warn()
        except BaseException:  # the sync failed (a bug) or the loop is cancelled: both end
            check.cancel()
            raise
        return await check

    async def _sync_or_warn(self) -> None:
        """``sync_watch_list``; a database error is logged (the next slot tries again)."""
        try:
            await self.sync_watch_list()
        except StoreError as exc:
            log.warning("watch list not refreshed: %s", exc)

    async def _slot(
        self,
        tick: Tick,
        clock: SlotClock | None,
        previous: _Deferred | None,
        on_slot: Callable[[SlotSummary], None] | None,
        synced: bool = False,
    ) -> tuple[SlotSummary, asyncio.Task[bool]]:
        """One slot; its commit is a task (started after ``previous``'s commit is done and
        reported). The summary's ``committed`` is filled in from the task. ``synced``: the
        watch list's changes were taken at this slot's start already."""
        assert self.scheduler is not None
        started = time.monotonic()
        started_at = datetime.now(UTC)
        if not synced:
            await self._sync_or_warn()
        steps, scheduler = self.steps, self.scheduler
        for step in steps:  # caps, capacity: what changed since the last slot
            await step.before_select(scheduler)
        ids = scheduler.select()
        for step in steps:  # sites just gained, URLs a sitemap says changed
            ids = await step.add_picks(scheduler, ids)
        ids = self._not_in_flight(ids)  # a poll still running from an earlier slot
        tally = _Tally()
        # the slot's stop: the service's, or the permit's lapse (then nothing more is sent)
        stop, watching = _halt(self._stop, self.permit)
        try:
            if stop is not None and stop.is_set():
                ids = ids[:0]
            try:
                records = await self._records(ids)
            except StoreError as exc:  # the database went away since the slot's start
                log.warning("URL records not read: this slot polls nothing: %s", exc)
                records = {}
            settings = self.settings  # a text is kept only when snapshots are kept at all
            keep_text = snapshot_limit(settings.store_snapshots, settings.snapshot_max_bytes) != 0
            # URLs without a baseline text: fetched and judged as first polls (docs/history.md)
            jobs = [
                _poll_job(r, asks_for_text(r, keep_text))
                for i in ids.tolist()
                if (r := records.get(int(i))) is not None
            ]
            picked = {j.url for j in jobs}  # what runs alongside polls none of them
            carried = self.inflight.hosts()  # polls still running from earlier slots
            for step in steps:  # a host's cap; bodies of start pages discovery reads
                jobs, held = step.admit(jobs, carried)
                for job in held:
                    tally.defer(job.host, "politeness")
                    self.metrics.observe_deferred("politeness", job.host)
            deadline = (
                started
                + self.settings.effective_slot_deadline()
                - min(tick.lag_s, self.settings.effective_slot_deadline() / 2)
            )  # on the slot grid: a late start does not push every later slot back
            # discovery's share, alongside and through the same poller, never a URL here
            repolled = asyncio.Event()  # the re-polls are done: discovery polls what they heard
            side = Alongside(picked, scheduler.size, deadline, stop, repolled)
            works = [asyncio.ensure_future(w) for st in steps if (w := st.alongside(side))]
            if works:  # discovery's polls go before a host's queued re-polls wherever they
                # arrive (the poller queues them ahead); letting its work start first also puts
                # them before the re-poll a host would otherwise have in flight already: on a
                # host that takes one poll a slot, they are not starved by the scheduler's
                await asyncio.sleep(0)
            # outcomes recorded chunk by chunk, as the answers come, while the rest are
            # fetched; at the deadline the poller defers what is queued and carries what is
            # in flight (it lands in the slot in which it ends: _inflight.py); a stop request
            # cuts the slot short at once, and so does a poller that overruns its deadline
            # by GRACE_S
            stream = self.inflight.start(jobs, records, deadline)
            try:
                async for arrival in self.inflight.poll_until(stream, deadline, stop):
                    self._land(*arrival, tally)
                for arrival in self.inflight.arrived():  # carried polls that ended meanwhile
                    self._land(*arrival, tally)
            finally:
                repolled.set()
            reason = "timeout"
            if self._stop is not None and self._stop.is_set():
                reason = "shutdown"
            elif stop is not None and stop.is_set():
                reason = "lease"
            if not stream.settled:  # cut short: not polled
                await self.inflight.close(stream)
                for job in stream.unanswered():
                    tally.defer(job.host, reason)
                    self.metrics.observe_deferred(reason, job.host)
            self.inflight.keep(stream)
            if stop is not None and stop.is_set():  # nothing goes on past a stop
                cut = list(self.inflight.carrying)
            else:  # a stuck poller's carried polls
                cut, reason = self.inflight.overdue(), "timeout"
            for host in await self.inflight.cut(cut):
                tally.defer(host, reason)
                self.metrics.observe_deferred(reason, host)
            self.inflight.landed()
            for work in works:
                await _alongside_done(work)
        finally:
            if watching is not None:
                watching.cancel()
        polls = tally.polls  # the slot's tallies, all from its poll records
        counts = dict.fromkeys(OUTCOMES, 0)
        for p in polls:
            counts[p.outcome] += 1
        ages = [a for step in steps if (a := step.version_ages(polls)) is not None]
        _learn(scheduler, polls, ages[0] if ages else None)  # ages: believed Last-Modified
        polled = Polled(scheduler, polls, records)
        for step in steps:  # floors and ceilings, health, failures back off, which caps bind
            await step.after_polls(polled)
        duration = time.monotonic() - started
        overrun = clock.overran(tick.planned) if clock is not None else False
        fill = self._wanted_total() / self.scheduler.capacity
        slot = SlotRecord(
            slot=self.scheduler.slot,
            scheduler=self.scheduler.name,
            started_at=started_at,
            duration_s=duration,
            polls=len(polls),
            hits=counts["hit"],
            misses=counts["miss"],
            not_modified=counts["not_modified"],
            errors=counts["error"],
            overrun=overrun,
            lag_s=tick.lag_s,
            capacity=self.scheduler.capacity,
            knapsack_fill=fill,
            deferrals=tally.deferrals(),
            failures=polled.failures,
            health_events=polled.health_events,
        )
        self._pending.append((slot, polls, self.scheduler.take_delta()))
        if previous is not None:
            _report(await _committed(previous.summary, previous.commit), on_slot)
        commit = asyncio.ensure_future(self.flush())
        self.slots_run += 1
        self.last_slot_monotonic = time.monotonic()
        self.metrics.observe_slot(time.monotonic() - started, tick.lag_s, overrun)
        self.metrics.set_watch(self.scheduler.size, self.scheduler.capacity, fill)
        for step in steps:  # the cluster worker's metrics
            step.after_slot(slot)
        summary = SlotSummary.of(slot, seq=tick.seq, baselines=counts["baseline"])
        return summary, commit

    async def flush(self) -> bool:
        """Commit every slot not yet committed, oldest first. False if the database refused
        (unavailable, or an error): the slots stay pending and are retried after the next
        slot; the oldest are dropped, loudly, only beyond ``MAX_PENDING_SLOTS``."""
        async with self._flush_lock:  # one commit at a time, in slot order
            return await self._flush()

    async def _flush(self) -> bool:
        while self._pending:
            slot, polls, delta = self._pending[0]
            began = time.monotonic()
            try:
                fence = self.source.fence(slot.slot)
                fenced = await asyncio.to_thread(self.store.commit_slot, slot, polls, delta, fence)
                self.source.committed(slot.slot, fenced)
            except FencedOut as exc:  # another service has the database: never retried
                log.error("%d slot(s) not committed, dropped: %s", len(self._pending), exc)
                self._pending.clear()
                return False
            except StoreError as exc:
                unavailable = isinstance(exc, StoreUnavailable)
                (log.warning if unavailable else log.error)(
                    "slot %d not committed, %d slot(s) kept for retry: %s",
                    slot.slot,
                    len(self._pending),
                    exc,
                )
                if len(self._pending) > MAX_PENDING_SLOTS:
                    dropped = self._pending.pop(0)
                    log.error(
                        "dropped the records of slot %d after %d pending slots; its URLs' "
                        "learning rows are saved again when they are next polled",
                        dropped[0].slot,
                        MAX_PENDING_SLOTS,
                    )
                return False
            self.metrics.observe_commit(time.monotonic() - began)
            self._pending.pop(0)
        return True

    # ----- steps ------------------------------------------------------------------------

    def _wanted_total(self) -> float:
        """sum(x) over the watched URLs (the knapsack fill's numerator), without copying the
        per-URL arrays as ``frequencies()`` would."""
        assert self.scheduler is not None
        return self.scheduler.wanted_total()

    async def _records(self, ids: np.ndarray) -> dict[int, UrlRecord]:
        """What the polls of ``ids`` need: from this loop's own recent polls, else read."""
        records, missing = self._recent.split(ids.tolist())
        if not missing:
            return records
        # A URL polled in a slot whose commit is still pending: use that poll's headers and
        # hashes. Taken before reading, so a commit finishing meanwhile changes nothing.
        latest = {p.url_id: p for _, polls, _ in self._pending for p in polls}
        read = await asyncio.to_thread(self.store.url_records, missing)
        for uid in latest.keys() & read.keys():
            read[uid] = after_poll(read[uid], latest[uid])
        records.update(read)
        return records

    def _land(self, stream: Stream, answers: Sequence[PollAnswer], tally: _Tally) -> None:
        """Record a chunk of ``stream``'s answers in this slot (a carried poll's too: it lands
        in the slot in which it ended); a cut stream's are dropped."""
        if stream.closed:
            return
        final = stream.take(answers)
        if not final:
            return
        records = stream.records
        self._recent.polled(records, self._outcomes(final, records, tally))
        for step in self.steps:  # discovery's changed start pages; host caps
            step.observe(final, records)

    def _not_in_flight(self, ids: IdArray) -> IdArray:
        """``ids`` less the URLs whose poll from an earlier slot is still running (their
        picks are dropped: the budget counts a poll in the slot that started it)."""
        running = self.inflight.url_ids()
        if not running or not ids.size:
            return ids
        return ids[~np.isin(ids, np.fromiter(running, np.int64, len(running)))]

    async def _cut_in_flight(self, reason: str) -> None:
        """Cut every poll still running from an earlier slot (counted in no slot: the watch
        list changed, or the loop ends)."""
        if self.inflight.carrying:
            hosts = await self.inflight.cut(list(self.inflight.carrying))
            for host in hosts:
                self.metrics.observe_deferred(reason, host)

    def _outcomes(
        self, answers: Sequence[PollAnswer], records: dict[int, UrlRecord], tally: _Tally
    ) -> list[PollRecord]:
        """The poll records of ``answers`` (also added to ``tally``, with the feedback)."""
        now = datetime.now(UTC)
        polls: list[PollRecord] = []
        keep_text = self.settings.store_snapshots
        # the metrics of the chunk's polls, recorded at once at its end
        counted: dict[str, int] = {}
        durations: list[float] = []
        received = 0  # bytes
        for a in answers:
            url_id, fetched, status = a.url_id, a.outcome, a.status
            rec = records[url_id]
            if fetched == "deferred":  # not polled: no record, no feedback, not an error
                reason = a.deferred or "timeout"
                tally.defer(rec.host, reason)
                self.metrics.observe_deferred(reason, rec.host)
                continue
            if a.truncated:
                self.metrics.observe_truncated()
            outcome: Outcome
            content_hash = raw_hash = old_hash = snapshot = None
            etag, last_modified = a.etag, a.last_modified
            if fetched == "error":
                outcome = "error"
                etag = last_modified = None
            elif fetched == "not_modified":
                outcome = "not_modified" if rec.last_hash is not None else "baseline"
                content_hash = rec.last_hash
                etag, last_modified = etag or rec.etag, last_modified or rec.last_modified
            else:
                changed = changed_of(a.changed, a.content_hash, rec)
                outcome = "baseline" if changed is None else "hit" if changed else "miss"
                text = a.text
                if keep_text and text is not None:
                    # a hit's after, or a baseline's text (or a miss's, asked for): the before
                    # of the next change (docs/history.md)
                    snapshot = text.decode("utf-8", "replace")  # cut by answer_of
                content_hash, raw_hash, old_hash = a.content_hash, a.raw_hash, rec.last_hash
            failed = outcome == "error"
            duration, size, kind = a.duration_s, a.bytes_received, a.error_kind
            polls.append(
                PollRecord(
                    url_id=url_id,
                    outcome=outcome,
                    polled_at=now,
                    status=status,
                    duration_s=duration,
                    bytes=size,
                    content_hash=content_hash,
                    raw_hash=raw_hash,
                    old_hash=old_hash,
                    etag=etag,
                    last_modified=last_modified,
                    error_kind=kind if failed else None,
                    error=a.error if failed else None,
                    snapshot=snapshot,
                    truncated=a.truncated,
                )
            )
            if outcome == "hit":
                tally.hits += 1
                _log_change(rec.url, tally.hits)
            counted_as = _METRIC_OUTCOME[outcome]
            counted[counted_as] = counted.get(counted_as, 0) + 1
            durations.append(duration)
            if size > 0:
                received += size
            if failed:
                self.metrics.observe_poll_error(kind, rec.host)
        self.metrics.observe_polls(counted, durations, received)
        tally.polls += polls
        return polls


def _learn(
    scheduler: schedulers.Scheduler, polls: list[PollRecord], ages: FloatArray | None
) -> None:
    """The scheduler learns the slot's polls' outcomes and (when a step knows them:
    ``ages``, one per poll) their versions' ages, a first poll's age too."""
    if ages is None:
        learned = [p for p in polls if p.outcome in _FEEDBACK]  # baselines, errors: none
        if learned:
            scheduler.feedback(
                np.fromiter((p.url_id for p in learned), np.int64, len(learned)),
                np.fromiter((p.outcome == "hit" for p in learned), bool, len(learned)),
            )
        return
    outcome = [p.outcome for p in polls]
    ids = np.fromiter((p.url_id for p in polls), np.int64, len(polls))
    fed = np.fromiter((o in _FEEDBACK for o in outcome), bool, len(polls))
    if fed.any():
        hits = np.fromiter((o == "hit" for o in outcome), bool, len(polls))
        scheduler.feedback(ids[fed], hits[fed], changed_ago=ages[fed])
    first = np.fromiter((o == "baseline" for o in outcome), bool, len(polls))
    if first.any():
        scheduler.first_polls(ids[first], ages[first])


@dataclass(slots=True)
class _Tally:
    """A slot's outcomes so far: its poll records (its counts and the scheduler's feedback
    are read from them), and its polls not made, by host and reason."""

    polls: list[PollRecord] = field(default_factory=list)
    hits: int = 0  # for the change log's first CHANGES_LOGGED_PER_SLOT
    by_host: dict[tuple[str, str], int] = field(default_factory=dict)  # (host, reason) -> n

    def defer(self, host: str, reason: str) -> None:
        key = (host, reason)
        self.by_host[key] = self.by_host.get(key, 0) + 1

    def deferrals(self) -> tuple[tuple[str, str, int], ...]:
        """(host, reason, polls) for the slot's record, in a stable order."""
        return tuple((h, r, n) for (h, r), n in sorted(self.by_host.items()))


@dataclass(frozen=True, slots=True)
class _Deferred:
    """A slot whose commit runs in the background during the next slot."""

    summary: SlotSummary
    commit: asyncio.Task[bool]


async def _committed(summary: SlotSummary, commit: asyncio.Task[bool]) -> SlotSummary:
    return dataclasses.replace(summary, committed=await commit)


def _halt(
    stop: asyncio.Event | None, permit: PollPermit | None
) -> tuple[asyncio.Event | None, asyncio.Task[None] | None]:
    """A slot's stop event: ``stop``, or (with a permit) an event set when either ``stop`` is
    set or the permit lapses, and the task that watches them (cancel it after the slot)."""
    if permit is None:
        return stop, None
    halt = asyncio.Event()
    if not permit.valid():
        halt.set()

    async def watch() -> None:
        waits: list[asyncio.Future[object]] = [asyncio.ensure_future(permit.lapse())]
        if stop is not None:
            waits.append(asyncio.ensure_future(stop.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        halt.set()

    return halt, asyncio.ensure_future(watch())


async def _alongside_done(task: Awaitable[object]) -> None:
    """Wait for what ran alongside a slot's polls (discovery); a failure there is logged,
    never the loop's end."""
    try:
        await task
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("discovery failed in this slot")


def _log_change(url: str, nth: int) -> None:
    """A change at INFO with its URL: the first ``CHANGES_LOGGED_PER_SLOT`` of a slot (a
    large watch list can change by the thousand in one slot; the slot line counts them all
    and ``crawler show URL`` lists each URL's changes)."""
    if nth <= CHANGES_LOGGED_PER_SLOT:
        log.info("changed: %s", url)
    elif nth == CHANGES_LOGGED_PER_SLOT + 1:
        log.info("more than %d changes in this slot: see crawler show URL", CHANGES_LOGGED_PER_SLOT)


def _report(summary: SlotSummary, on_slot: Callable[[SlotSummary], None] | None) -> None:
    log.info(
        "slot %d: polls=%d hits=%d misses=%d not_modified=%d errors=%d deferred=%d "
        "duration=%.3fs lag=%.3fs%s%s",
        summary.seq, summary.polls, summary.hits, summary.misses,
        summary.not_modified, summary.errors, summary.deferred, summary.duration_s, summary.lag_s,
        " OVERRUN" if summary.overrun else "", "" if summary.committed else " NOT COMMITTED",
    )  # fmt: skip
    if on_slot is not None:
        on_slot(summary)


def _poll_job(record: UrlRecord, asking: bool = False) -> PollJob:
    """The job of a poll of ``record``'s URL; ``asking`` (``asks_for_text``): judged as a
    first poll (no validators, no last hashes)."""
    r = record
    if asking:
        return PollJob(
            r.id, r.url, r.host, None, None, r.selector, tuple(r.ignore_patterns), None, None
        )
    return PollJob(
        r.id, r.url, r.host, r.etag, r.last_modified, r.selector, tuple(r.ignore_patterns),
        r.last_hash, r.last_raw_hash,
    )  # fmt: skip
