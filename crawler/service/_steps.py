"""The slot's steps: what each feature does in a slot, without the loop branching on it.

The crawl loop's slot is a fixed sequence (``CrawlLoop._slot``, drawn in ARCHITECTURE.md):
sync the watch list, *before_select*, select, *add_picks*, drop the URLs still in flight,
build the polls, *admit*, poll (with what runs *alongside*), land each chunk of answers
(*observe*), learn (with the polled versions' ages: *version_ages*), *after_polls*, record,
commit, *after_slot*. The words in italics are the hooks of ``SlotStep``; host caps,
operator constraints (failures), health, discovery, the last change (believed
``Last-Modified`` headers) and the cluster each hang on them as one ``SlotStep``, the way
Scrapy's engine calls its extensions and never names one. The loop calls every step's hook
in the order of its list (``CrawlLoop.steps``), and a step that does not need a hook
inherits a no-op.

The order is the feature's dependencies: discovery first (its share changes the capacity
the caps compare with; its ceilings and floors for the constraints), health before the
constraints (health reads the failure record as it was before the slot), host caps next
(it reports which caps bind once the slot's failures backed off), the last change after
them (it only reads the answers), the cluster's metrics after the record.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from crawler.schedulers import FloatArray, IdArray, Scheduler
from crawler.service._bounds import Constraints
from crawler.service._caps import HostCaps
from crawler.service._cluster_metrics import export_cluster_metrics_soon
from crawler.service._discovery import DiscoverySide
from crawler.service._health import HealthWatch
from crawler.service._last_change import LastChanges
from crawler.store import (
    FailureRow,
    HealthEvent,
    PollRecord,
    SlotRecord,
    StoreError,
    UrlRecord,
)
from crawler.workers import PollAnswer, PollJob

if TYPE_CHECKING:  # the loop builds its steps: it imports this module
    from crawler.service._cluster import ClusterMember
    from crawler.service._loop import CrawlLoop

log = logging.getLogger("crawler.service")


@dataclass(slots=True)
class Polled:
    """A slot's polls once every answer it waits for landed, and what the steps add to its
    record."""

    scheduler: Scheduler
    polls: list[PollRecord]
    #: the URL records the polls were made for (url_id -> record)
    records: dict[int, UrlRecord]
    failures: tuple[FailureRow, ...] = ()
    health_events: tuple[HealthEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class Alongside:
    """What a step may run alongside the slot's polls."""

    #: the URLs the slot polls (a step's own polls leave them alone)
    picked: set[str]
    watched: int
    #: the slot's deadline (a ``time.monotonic()`` time)
    deadline: float
    stop: asyncio.Event | None
    #: set once the slot's own polls are answered
    repolled: asyncio.Event


class SlotStep:
    """A feature's part in every slot; each hook is a no-op unless overridden."""

    def reserved(self, capacity: float) -> float:
        """Polls per slot of ``capacity`` the step makes itself, kept from the scheduler."""
        return 0.0

    async def before_select(self, scheduler: Scheduler) -> None:
        """Tell the scheduler what changed (caps, capacity) before it selects."""

    async def add_picks(self, scheduler: Scheduler, ids: IdArray) -> IdArray:
        """The URL ids to poll this slot: ``ids`` and any the step adds (or less any it
        holds back)."""
        return ids

    def admit(
        self, jobs: list[PollJob], carried: Counter[str]
    ) -> tuple[list[PollJob], list[PollJob]]:
        """(the polls to make, those held back: deferred for politeness); ``carried``: the
        polls per host still running from earlier slots."""
        return jobs, []

    def alongside(self, slot: Alongside) -> Awaitable[object] | None:
        """Work run while the slot's polls are made (awaited before the slot learns)."""
        return None

    def observe(self, answers: Sequence[PollAnswer], records: dict[int, UrlRecord]) -> None:
        """Learn from a chunk of answers that landed (never "running": polls that ended)."""

    def version_ages(self, polls: Sequence[PollRecord]) -> FloatArray | None:
        """Slots since the version each of the slot's ``polls`` saw last changed (NaN:
        unknown), for the scheduler to learn from with their outcomes; None: the step
        knows of no age."""
        return None

    async def after_polls(self, polled: Polled) -> None:
        """After the scheduler learned from the slot's polls, before its record is made."""

    def after_slot(self, record: SlotRecord) -> None:
        """The slot's record is made and its commit started."""


class CapsStep(SlotStep):
    """Per-host politeness caps (``crawler.service._caps``)."""

    def __init__(self, loop: CrawlLoop) -> None:
        self.loop = loop

    @property
    def caps(self) -> HostCaps:
        return self.loop.caps

    async def before_select(self, scheduler: Scheduler) -> None:
        if self.caps.groups_missing:  # still missing after an error
            await self.caps.load_groups(scheduler, self.loop.store, None)
        self.caps.apply(scheduler)

    def admit(
        self, jobs: list[PollJob], carried: Counter[str]
    ) -> tuple[list[PollJob], list[PollJob]]:
        return self.caps.make_room(jobs, carried)  # carried polls count against the cap

    def observe(self, answers: Sequence[PollAnswer], records: dict[int, UrlRecord]) -> None:
        self.caps.observe(answers, records)

    async def after_polls(self, polled: Polled) -> None:
        await self.caps.report(polled.scheduler, self.loop.store, self.loop.metrics)


class HealthStep(SlotStep):
    """Health events (``crawler.service._health``)."""

    def __init__(self, health: HealthWatch, constraints: Constraints) -> None:
        self.health, self.constraints = health, constraints

    async def after_polls(self, polled: Polled) -> None:
        failing = self.constraints.records  # the failure record before this slot's
        polled.health_events = await self.health.after_slot(polled.scheduler, polled.polls, failing)


class FailuresStep(SlotStep):
    """The operator constraints' failure record: failed polls back off
    (``crawler.service._bounds``)."""

    def __init__(self, constraints: Constraints) -> None:
        self.constraints = constraints

    async def after_polls(self, polled: Polled) -> None:
        polled.failures = self.constraints.after_slot(polled.scheduler, polled.polls)


class DiscoveryStep(SlotStep):
    """Discovery's share of the slot (``crawler.service._discovery``); the loop's
    ``discovery`` is read at each call (a test may replace it)."""

    def __init__(self, loop: CrawlLoop) -> None:
        self.loop = loop

    @property
    def side(self) -> DiscoverySide:
        return self.loop.discovery

    def reserved(self, capacity: float) -> float:
        return self.side.reserved(capacity)

    async def before_select(self, scheduler: Scheduler) -> None:
        """Re-read the discovery sources; their share changes the scheduler's capacity."""
        loop = self.loop
        try:
            await self.side.refresh()
            loop.set_capacity()  # discovery's share moves with what it needs
        except StoreError as exc:
            log.warning("discovery sources not refreshed: %s", exc)

    async def add_picks(self, scheduler: Scheduler, ids: IdArray) -> IdArray:
        """``ids`` and the watched URLs whose sitemap or feed ``lastmod`` moved (polled now,
        out of discovery's share: at most that many a slot, and discovery polls as many
        fewer)."""
        side, loop = self.side, self.loop
        room = side.reserved(loop.settings.effective_capacity(scheduler.size))
        hinted = side.take_hinted(room) if room else []
        if not hinted:
            return ids
        try:
            found = await asyncio.to_thread(loop.store.select_urls, hinted)
        except StoreError as exc:
            log.warning("lastmod hints not followed: %s", exc)
            return ids
        watched, _ = scheduler.frequencies()  # a cluster worker: its own URLs only
        extra = np.array([i for i, _ in found], dtype=np.int64)
        extra = np.setdiff1d(extra[np.isin(extra, watched)], ids)
        extra = scheduler.add_to_selection(extra)  # within pauses and bounds
        side.hint_polls(int(extra.size))
        if extra.size:
            log.info("polling %d watched URLs whose lastmod moved", extra.size)
        return np.union1d(ids, extra)

    def admit(
        self, jobs: list[PollJob], carried: Counter[str]
    ) -> tuple[list[PollJob], list[PollJob]]:
        return self.side.mark(jobs), []  # start pages discovery reads: bodies back too

    def alongside(self, slot: Alongside) -> Awaitable[object]:
        """Discovery's own polls, through the same poller, never of a URL the slot polls."""
        return self.side.run_slot(
            slot.picked, slot.watched, slot.deadline, slot.stop, slot.repolled
        )

    def observe(self, answers: Sequence[PollAnswer], records: dict[int, UrlRecord]) -> None:
        self.side.heard(answers, _url_of(records))  # the changed start pages' links

    async def after_polls(self, polled: Polled) -> None:
        side, loop, scheduler = self.side, self.loop, polled.scheduler
        constraints, metrics = loop.constraints, loop.metrics
        floors: dict[int, float] = {}
        if side.pacer:  # watched start pages: read at least as often as they pay
            floors = side.start_floors(scheduler.capacity)
            constraints.set_floors(scheduler, floors)
        # the URLs discovery watched: a bounded share of the scheduler's polls, together
        ceilings = side.watched_ceilings(scheduler.capacity, scheduler.size, floors)
        constraints.set_ceilings(scheduler, ceilings)
        metrics.discovery_watched_ceiling.set(sum(ceilings.values()))
        capacity = loop.settings.effective_capacity(scheduler.size)
        metrics.set_discovery_shares(side.reserved(capacity), len(floors), sum(floors.values()))
        records = polled.records
        side.note_dead([records[p.url_id].url for p in polled.polls if p.status in (404, 410)])


class LastChangeStep(SlotStep):
    """The polled versions' ages from believed ``Last-Modified`` headers
    (``crawler.service._last_change``)."""

    def __init__(self, slot_seconds: float) -> None:
        self.changes = LastChanges(slot_seconds)
        self._ages: dict[int, float] = {}  # url id -> age, of the answers landed this slot

    def observe(self, answers: Sequence[PollAnswer], records: dict[int, UrlRecord]) -> None:
        ages, changes = self._ages, self.changes
        for a in answers:
            record = records.get(a.url_id)
            if record is not None and a.last_modified is not None:
                age = changes.age(a, record)
                if age == age:  # not NaN
                    ages[a.url_id] = age

    def version_ages(self, polls: Sequence[PollRecord]) -> FloatArray | None:
        ages, self._ages = self._ages, {}
        if not ages:
            return None
        return np.fromiter((ages.get(p.url_id, np.nan) for p in polls), np.float64, len(polls))


class ClusterStep(SlotStep):
    """A cluster worker's part (``crawler.service._cluster``): sites just gained are polled
    at once (their hosts' first requests wait the host's delay from the old owner's last
    poll), sites asked of it and held until their polls in flight land are polled no more,
    and after each slot it is told what is still in flight and its cluster metrics are
    refreshed. The service adds it to a cluster worker's loop (``join_cluster``)."""

    def __init__(self, loop: CrawlLoop, cluster: ClusterMember) -> None:
        self.loop, self.cluster = loop, cluster

    async def add_picks(self, scheduler: Scheduler, ids: IdArray) -> IdArray:
        cluster = self.cluster
        # a gained site's probe within its pause and bound (marked: the next selections
        # count from it); a site asked of it, held until its polls in flight land, is
        # polled no more
        probes = scheduler.add_to_selection(cluster.take_probes(scheduler))
        return cluster.pollable(np.union1d(ids, probes))

    def admit(
        self, jobs: list[PollJob], carried: Counter[str]
    ) -> tuple[list[PollJob], list[PollJob]]:
        return self.cluster.mark(jobs), []  # hosts just gained: their old owner's delay first

    def after_slot(self, record: SlotRecord) -> None:
        self.cluster.carried(self.loop.inflight.url_ids())  # what an asked site waits for
        export_cluster_metrics_soon(self.loop.metrics, self.cluster)  # in the background


def default_steps(loop: CrawlLoop) -> list[SlotStep]:
    """The loop's steps, in the order their hooks run (module docstring)."""
    return [
        DiscoveryStep(loop),
        HealthStep(loop.health, loop.constraints),
        FailuresStep(loop.constraints),
        CapsStep(loop),
        LastChangeStep(loop.settings.slot_seconds),
    ]


def _url_of(records: dict[int, UrlRecord]) -> Callable[[int], str | None]:
    """A URL id's URL (None if unknown), for ``DiscoverySide.heard``."""
    return lambda url_id: r.url if (r := records.get(url_id)) is not None else None
