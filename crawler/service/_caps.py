"""Per-host politeness caps: what each host can take in one slot, told to the scheduler.

The fetcher is polite per host (``crawler.fetch``: a minimum delay between a host's request
starts, raised by robots.txt Crawl-delay; at most ``per_host_concurrency`` requests at once;
no request while a 429/503 Retry-After lasts). A scheduler that does not know it plans polls
a host cannot take: they queue behind the delay and the slot overruns, or the deadline defers
them, and the budget the optimum planned is not what happens. ``HostCaps`` puts every watched
URL in its host's group (``Scheduler.set_groups``, the host key of ``crawler.sites``) and caps
each group at what the host can take (``Scheduler.set_group_caps``), so that the scheduler
allocates by the constrained optimum (docs/constraints.md).

**The cap** of a host, in polls per slot (``derive_cap``): with ``d`` the delay between its
request starts (the configured ``per_host_min_delay_s``, or its Crawl-delay when larger), ``t``
its measured mean response time, ``c`` = ``per_host_concurrency``, ``L`` the slot's length and
``W = min(L, slot deadline)`` the time a slot's polls have:

    s   = max(d, t / c)            seconds between the host's request starts it sustains
    cap = HEADROOM * min(L / s, 1 + (W - t) / s), at least MIN_CAP

``L / s``: over many slots the host cannot start more requests than one per ``s`` (the
fetcher's delay carries over from one slot to the next, so the deadline, often longer than a
slot, is not what counts). ``1 + (W - t) / s``: in one slot the first request starts at once
and the last must be answered by ``W``. ``HEADROOM`` (0.9) leaves the host a slot now and
then with one request less: at exactly ``L / s`` a slot's first request starts at the later
of the slot's start and the host's delay after the previous slot's last request, so its
lateness is the running maximum of the slots' start jitter and never recovers (measured:
with caps of exactly 2 on 0.5 s slots every slot overran from slot 79 on). With 2 s slots,
1 s delay and fast pages the cap is 1.8: 2 polls in four slots of five, 1 in the fifth.
No delay and no response time measured yet: no cap. When a page takes longer than ``W`` no
cap keeps the slot on time (one poll overruns it), so only ``L / s`` applies: a first
version capped such a host at ``MIN_CAP`` and starved it, e.g. every host of a service with
50 ms slots whose pages took 60 ms under load.

**robots.txt.** A host not answered yet also has its robots.txt fetched in its first slot,
through the same gate: one request of its cap. Until its first answer its cap is one less
(at least 1), so that first slot does not overrun either.

**Retry-After.** A 429, or a 503 with Retry-After, backs the host off in the fetcher until the
time it says; meanwhile every poll of it is deferred ("backoff"). The host's cap drops to
``MIN_CAP`` (a cap must be positive) until that time, then returns to its derived value: the
scheduler gives the polls to other hosts instead of losing them.

**What the fetcher reports.** Every ``PollAnswer`` carries the fetch's ``duration_s``, the
Retry-After of a rate-limited poll (or the back-off time left of a deferred one) in
``retry_after_s``, and ``host_delay_s``, the host's delay when a Crawl-delay raised it: one
float per answer, the same for the in-process poller and the crawl workers (a worker sends its
answers as plain tuples; no other message). The response time is an exponentially weighted
mean (``RESPONSE_ALPHA``) of the answers that made a request (not deferred, not
rate-limited before sending), leaving out a host's first answer, whose time includes fetching
its robots.txt and waiting out the delay after it.

**Only caps that can bind.** A cap at or over the scheduler's capacity is not given to it
(one host can never take more than all the polls), so a service whose hosts are not limited
allocates exactly as before: ``bayes`` rounds its intervals to whole slots only without
constraints, so a cap of 300 on a 2-poll budget still changed its frequencies.

**Cheap.** Only the hosts whose facts changed in a slot (or whose back-off ended) are
re-derived; a cap is given to the scheduler again only when it moved by more than
``REAPPLY_RATIO`` (the response time wobbles; each change makes the scheduler re-solve its
allocation: 0.7 s for 100,000 URLs on 5,000 hosts), and such drifts at most every
``DRIFT_EVERY`` slots; what sets the cap changing (a new host, a back-off beginning or
ending, a Crawl-delay) is applied at once. Groups are set for every watched URL at start and
for the new URLs at each watch-list change (the guard is not in the saved state).

**Reporting.** Every ``STATUS_EVERY`` slots (and after a change of caps) the scheduler's
``cap_status`` says which caps bind (the plan reaches the cap). Metrics are counts
(``crawler_capped_hosts``, ``crawler_cap_binding_hosts``, ``crawler_backed_off_hosts``,
``crawler_binding_cap_polls_per_slot``), not one series per host: a watch list may span
100,000 hosts, and per-host series would swamp Prometheus. Per host, the current caps go to
the ``host_caps`` table (rewritten only when a cap or its binding changed) for ``crawler
list`` and ``crawler stats``.

``host_caps = false`` turns all of it off: the scheduler is told nothing about hosts (the
behaviour before caps, kept for side-by-side measurements).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

import numpy as np

from crawler import schedulers
from crawler.metrics import CrawlerMetrics
from crawler.schedulers import IdArray
from crawler.settings import Settings
from crawler.sites import host_key
from crawler.store import HostCapRow, Store, StoreError, UrlRecord
from crawler.workers import PollAnswer, PollJob

log = logging.getLogger("crawler.service")

#: the smallest cap (polls per slot): a backed-off host, or one too slow to answer in a slot
MIN_CAP = 1e-3
#: the share of what a host can take that its cap allows (slack for the slots' start jitter)
HEADROOM = 0.9
#: weight of a new response time in a host's mean
RESPONSE_ALPHA = 0.2
#: a derived cap is given to the scheduler again only when it moved by more than this
REAPPLY_RATIO = 0.1
#: slots between two applications of caps that only drifted (a response time moving by more
#: than REAPPLY_RATIO); a new host, a back-off, a Crawl-delay are applied at once
DRIFT_EVERY = 10
#: what sets a cap, when a change to or from it is applied at once
_URGENT = frozenset({"retry_after", "crawl_delay", "robots"})
#: slots between two reads of which caps bind (metrics and the host_caps table)
STATUS_EVERY = 10


def derive_cap(
    *,
    slot_s: float,
    window_s: float,
    delay_s: float,
    response_s: float,
    concurrency: int,
) -> float | None:
    """A host's cap in polls per slot (see the module docstring); None when nothing limits
    it (no delay and no response time measured)."""
    spacing = max(delay_s, response_s / max(1, concurrency))
    if not spacing > 0 or not math.isfinite(spacing):
        return None
    sustained = slot_s / spacing
    if response_s > window_s:  # not even one answer fits in a slot: slots overrun anyway
        return max(MIN_CAP, HEADROOM * sustained)
    fits = 1.0 + (window_s - response_s) / spacing
    return max(MIN_CAP, HEADROOM * min(sustained, fits))


@dataclass(slots=True)
class _Host:
    """What is known of one host."""

    label: int
    #: its Crawl-delay as the fetcher enforces it, when above the configured delay
    crawl_delay_s: float | None = None
    #: mean response time (None: not measured yet)
    response_s: float | None = None
    #: ``time.monotonic()`` end of a Retry-After back-off (0: none)
    backoff_until: float = 0.0
    #: answered at least once (its first answer's time includes fetching robots.txt)
    answered: bool = False


class CapsScope(Protocol):
    """A cluster worker, as its host caps see it."""

    worker_id: str

    def sites(self) -> Sequence[str]:
        """The sites it leases (``host[:port]``)."""
        ...


class HostCaps:
    """The host groups and caps of one crawl loop's scheduler."""

    def __init__(self, settings: Settings) -> None:
        self.enabled = settings.host_caps
        self.slot_s = settings.slot_seconds
        self.window_s = min(settings.slot_seconds, settings.effective_slot_deadline())
        self.delay_s = settings.per_host_min_delay_s
        self.concurrency = settings.per_host_concurrency
        self.robots = settings.respect_robots
        self._hosts: dict[str, _Host] = {}
        self._names: list[str] = []  # label -> host key
        self._applied: dict[int, float] = {}  # label -> cap the scheduler has
        self._reason: dict[int, str] = {}  # label -> what sets its cap
        self._dirty: set[str] = set()
        self._expiries: list[tuple[float, str]] = []  # (backoff end, host), a heap
        self._groups_missing = True  # all URLs' groups still to be set (start, or an error)
        self._slots = 0
        self._calls = 0  # apply() calls (slots)
        self._drift_at = -DRIFT_EVERY  # the call that last applied drifted caps
        self._capacity = math.nan  # the scheduler's capacity at the last apply()
        self._status_due = True
        self._saved: tuple[tuple[str, float, bool, str], ...] | None = None
        #: label -> (cap, planned polls per slot) at the last status read
        self.status: dict[int, tuple[float, float]] = {}
        #: a cluster worker's id and leased sites: the groups are then read from its own
        #: sites' URLs, and it saves only its own hosts' rows (None: a single service)
        self.scope: CapsScope | None = None

    # ----- groups -----------------------------------------------------------------------

    @property
    def groups_missing(self) -> bool:
        """Every URL's group is still to be set (not loaded yet, or a database error)."""
        return self.enabled and self._groups_missing

    def _host(self, key: str) -> _Host:
        h = self._hosts.get(key)
        if h is None:
            h = self._hosts[key] = _Host(len(self._names))
            self._names.append(key)
            self._dirty.add(key)
        return h

    def forget_applied(self) -> None:
        """The scheduler was replaced: every URL's group and every host's cap (what the
        fetcher learned is kept) are given to it again at the next ``load_groups``."""
        self._applied = {}
        self._reason = {}
        self._dirty.update(self._hosts)
        self._groups_missing = True
        self._capacity = math.nan

    def label_of(self, host: str) -> int:
        """The group label of a stored host (``host[:port]``)."""
        return self._host(host_key(host)).label

    def host_of(self, label: int) -> str:
        """The host key of a group label."""
        return self._names[label]

    def assign(self, scheduler: schedulers.Scheduler, ids: IdArray, hosts: Sequence[str]) -> None:
        """Put the URLs ``ids`` (with their stored hosts) in their hosts' groups; ids the
        scheduler does not watch are skipped."""
        if not self.enabled or not len(ids):
            return
        labels = np.fromiter((self.label_of(h) for h in hosts), np.int64, len(hosts))
        known, _ = scheduler.frequencies()
        keep = np.isin(ids, known)
        if keep.any():
            scheduler.set_groups(ids[keep], labels[keep])
            self._status_due = True

    async def load_groups(
        self, scheduler: schedulers.Scheduler, store: Store, added: IdArray | None
    ) -> None:
        """Set the groups of every watched URL (at start, or after an error), else of the
        URLs ``added`` to the watch list; a database error is logged and retried later."""
        if not self.enabled:
            return
        whole = self._groups_missing or added is None
        if not whole and (added is None or not added.size):
            return
        try:
            site_list = list(self.scope.sites()) if whole and self.scope is not None else None
            ids, hosts = await asyncio.to_thread(
                store.url_hosts, None if whole else added, site_list
            )
        except StoreError as exc:
            self._groups_missing = True
            log.warning("host groups not loaded (retried at the next slot): %s", exc)
            return
        self.assign(scheduler, ids, hosts)
        self.apply(scheduler)  # the new hosts' caps (from the settings) at once
        if whole:
            self._groups_missing = False
            log.info("host caps: %d URLs on %d hosts", ids.size, len(self._hosts))

    # ----- what the fetcher learned -----------------------------------------------------

    def observe(self, answers: Sequence[PollAnswer], records: dict[int, UrlRecord]) -> None:
        """Learn from a chunk of answers: Crawl-delays, Retry-After, response times."""
        if not self.enabled:
            return
        now = time.monotonic()
        hosts, dirty, alpha = self._hosts, self._dirty, RESPONSE_ALPHA
        for a in answers:
            rec = records.get(a.url_id)
            if rec is None:
                continue
            key = host_key(rec.host)
            h = hosts.get(key) or self._host(key)
            outcome = a.outcome
            wait = a.retry_after_s
            if outcome == "deferred" or a.error_kind == "rate_limited":
                if wait is not None and wait > 0 and now + wait > h.backoff_until + 0.5:
                    h.backoff_until = now + wait
                    heapq.heappush(self._expiries, (h.backoff_until, key))
                    dirty.add(key)
                continue
            fetched = outcome in ("ok", "not_modified") or a.host_delay_s is not None
            if fetched and a.host_delay_s != h.crawl_delay_s:
                h.crawl_delay_s = a.host_delay_s
                dirty.add(key)
            duration = a.duration_s
            if not h.answered:  # robots.txt and the wait for the gate after it: not a sample
                h.answered = True
                dirty.add(key)
                if self.robots:
                    continue
            if duration > 0 and math.isfinite(duration):
                old = h.response_s
                h.response_s = duration if old is None else old + alpha * (duration - old)
                dirty.add(key)

    def cap_of(self, key: str, now: float | None = None) -> tuple[float | None, str]:
        """A host's cap now and what sets it ("retry_after", "robots", "crawl_delay", "delay",
        "response_time"; cap None: "none")."""
        h = self._hosts.get(key)
        if h is None:
            h = _Host(-1)
        if now is None:
            now = time.monotonic()
        if h.backoff_until > now:
            return MIN_CAP, "retry_after"
        delay = self.delay_s
        reason = "delay"
        if h.crawl_delay_s is not None and h.crawl_delay_s > delay:
            delay, reason = h.crawl_delay_s, "crawl_delay"
        response = h.response_s or 0.0
        if response / max(1, self.concurrency) > delay:
            reason = "response_time"
        cap = derive_cap(
            slot_s=self.slot_s,
            window_s=self.window_s,
            delay_s=delay,
            response_s=response,
            concurrency=self.concurrency,
        )
        if cap is None:
            return None, "none"
        if self.robots and not h.answered and cap > 1:
            # not answered yet: its first slot also fetches robots.txt, one of its requests
            cap, reason = max(1.0, cap - 1.0), "robots"
        return cap, reason

    def make_room(
        self, jobs: list[PollJob], running: Counter[str]
    ) -> tuple[list[PollJob], list[PollJob]]:
        """(the jobs to send, those held back): each poll of a capped host still running
        from an earlier slot (``running``, per stored host) takes one of the host's polls of
        this slot, so that a host's polls in flight stay within its cap."""
        if not self.enabled or not running or not jobs:
            return jobs, []
        room = {
            host: n for host, n in running.items() if self.cap_of(host_key(host))[0] is not None
        }
        if not room:
            return jobs, []
        kept: list[PollJob] = []
        held: list[PollJob] = []
        for job in jobs:
            owed = room.get(job.host, 0)
            if owed > 0:
                room[job.host] = owed - 1
                held.append(job)
            else:
                kept.append(job)
        return kept, held

    # ----- telling the scheduler ---------------------------------------------------------

    def apply(self, scheduler: schedulers.Scheduler) -> dict[int, float | None]:
        """Give the scheduler the caps that changed (before a slot's selection); returns
        them (label -> cap, None: removed)."""
        if not self.enabled:
            return {}
        now = time.monotonic()
        expiries = self._expiries
        while expiries and expiries[0][0] <= now:
            _, key = heapq.heappop(expiries)
            self._dirty.add(key)
        self._calls += 1
        capacity = scheduler.capacity
        if capacity != self._capacity:  # a cap at or over the capacity cannot bind: re-check
            self._capacity = capacity
            self._dirty.update(self._hosts)
        if not self._dirty:
            return {}
        changes: dict[int, float | None] = {}
        drift_ok = self._calls - self._drift_at >= DRIFT_EVERY
        held: set[str] = set()
        drifted = False
        for key in self._dirty:
            h = self._hosts[key]
            cap, reason = self.cap_of(key, now)
            if cap is not None and cap >= capacity:
                cap = None  # cannot bind (and a cap changes how some schedulers allocate)
            old = self._applied.get(h.label)
            was = self._reason.get(h.label)
            if cap is None:
                if old is not None:
                    changes[h.label] = None
                    del self._applied[h.label]
                    self._reason.pop(h.label, None)
                continue
            urgent = old is None or (reason != was and bool({reason, was} & _URGENT))
            moved = old is not None and abs(cap - old) > REAPPLY_RATIO * old
            if moved and not urgent and not drift_ok:
                held.add(key)  # a drifting response time: at most every DRIFT_EVERY slots
                continue
            if urgent or moved:
                changes[h.label] = cap
                self._applied[h.label] = cap
                drifted = drifted or not urgent
            self._reason[h.label] = reason
        if drifted:
            self._drift_at = self._calls
        self._dirty = held
        if changes:
            scheduler.set_group_caps(changes)
            self._status_due = True
            log.debug("host caps changed: %s", {self._names[k]: v for k, v in changes.items()})
        return changes

    def caps(self) -> dict[str, float]:
        """The caps the scheduler has, by host key."""
        return {self._names[label]: cap for label, cap in self._applied.items()}

    # ----- reporting -------------------------------------------------------------------

    async def report(
        self, scheduler: schedulers.Scheduler, store: Store, metrics: CrawlerMetrics
    ) -> None:
        """After a slot: every ``STATUS_EVERY`` slots or after a change, read which caps bind
        and publish it (metrics; the host_caps table when anything changed)."""
        if not self.enabled:
            return
        self._slots += 1
        if not (self._status_due or self._slots % STATUS_EVERY == 0):
            return
        self._status_due = False
        self.status = scheduler.cap_status()
        now = time.monotonic()
        wall = datetime.now(UTC)
        rows: list[HostCapRow] = []
        binding = backed_off = 0
        binding_polls = 0.0
        for label, (cap, planned) in sorted(self.status.items()):
            if label >= len(self._names):
                continue
            key = self._names[label]
            binds = planned >= cap * 0.99  # (the plan is a numerical solution)
            reason = self._reason.get(label, "delay")
            until = None
            if reason == "retry_after":
                backed_off += 1
                left = self._hosts[key].backoff_until - now
                until = wall + timedelta(seconds=max(0.0, left))
            if binds:
                binding += 1
                binding_polls += cap
            rows.append(HostCapRow(key, cap, planned, binds, reason, until))
        metrics.set_host_caps(len(rows), binding, backed_off, binding_polls)
        saved = tuple((r.host, round(r.cap, 6), r.binding, r.reason) for r in rows)
        if saved == self._saved:
            return
        try:
            owner = None if self.scope is None else self.scope.worker_id
            await asyncio.to_thread(store.save_host_caps, rows, owner)
        except StoreError as exc:
            log.warning("host caps not saved (retried later): %s", exc)
            self._status_due = True
            return
        self._saved = saved
