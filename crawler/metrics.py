"""Prometheus metrics of the crawl service (docs/metrics.md), in one place.

One :class:`CrawlerMetrics` per service instance creates its metrics on its own
:class:`prometheus_client.CollectorRegistry` (a fresh one unless given), so tests and
several services in one process never collide. The loop calls:

* :meth:`CrawlerMetrics.observe_polls` once per chunk of finished polls (hot path: a
  counter increment per outcome and per chunk, one histogram observation per poll; the
  per-poll :meth:`CrawlerMetrics.observe_poll` cost 2-4 µs a poll, about 1 µs more);
* :meth:`CrawlerMetrics.observe_slot` once per slot, which closes the slot: the
  poll counts accumulated since the previous slot feed the hit-ratio window;
* :meth:`CrawlerMetrics.set_watch` whenever the watch list or the wanted
  frequencies change (typically once per slot);
* :meth:`CrawlerMetrics.observe_commit` once per database slot commit.

All of it runs on the service's event loop thread; nothing here blocks or does I/O.

``crawler_hit_ratio`` is hits per *successful* poll (hit, miss or not_modified;
errors excluded) over the last ``hit_ratio_window_slots`` closed slots. It is NaN
until a successful poll has been seen, so an alert on a low ratio does not fire on
a fresh service.

``crawler_last_slot_timestamp_seconds`` starts at the construction time of the
metrics object (the service start), so a loop that never runs a slot is caught by
the same "stalled" alert as one that stops.
"""

from __future__ import annotations

import heapq
import math
import platform
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from crawler.detect import JUDGE_ERROR_KINDS
from crawler.fetch import ERROR_KINDS as FETCH_ERROR_KINDS

__all__ = [
    "COMMIT_BUCKETS",
    "DEFERRED_REASONS",
    "DELIVERY_OUTCOMES",
    "ERROR_KINDS",
    "OUTCOMES",
    "POLL_BUCKETS",
    "SLOT_BUCKETS",
    "CrawlerMetrics",
    "SlotCounts",
]

#: Outcomes of one poll, the label values of ``crawler_polls_total``.
OUTCOMES: Final[tuple[str, ...]] = ("hit", "miss", "error", "not_modified")

#: The fetcher's closed set of error kinds (label values of ``crawler_poll_errors_total``),
#: taken from the fetcher itself so the two cannot drift, and the change detector's (a page
#: that could not be judged). An unknown kind counts as ``other``.
ERROR_KINDS: Final[tuple[str, ...]] = (*FETCH_ERROR_KINDS, *JUDGE_ERROR_KINDS)

#: Why a poll was deferred (label values of ``crawler_polls_deferred_total``): see
#: ``crawler.workers.DEFERRED_REASONS``.
DEFERRED_REASONS: Final[tuple[str, ...]] = (
    "politeness",
    "backoff",
    "timeout",
    "shutdown",
    "lease",
)
#: the per-source discovery caps a dropped find is counted under
DISCOVERY_CAPS: Final[tuple[str, ...]] = ("new_per_slot", "new_per_day", "auto_watched")

#: What one attempt to deliver an event did (``crawler_delivery_attempts_total``).
DELIVERY_OUTCOMES: Final[tuple[str, ...]] = ("delivered", "failed", "dead", "gone")

#: One HTTP poll: a fast 304 on loopback takes a few ms, a slow origin up to the timeout.
POLL_BUCKETS: Final[tuple[float, ...]] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
)  # fmt: skip
#: One whole slot (select, fetch all, detect, commit): from tests' 0.05 s slots to minutes.
SLOT_BUCKETS: Final[tuple[float, ...]] = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip
#: One database transaction committing a slot.
COMMIT_BUCKETS: Final[tuple[float, ...]] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SlotCounts:
    """The polls of one closed slot, as accumulated by :meth:`CrawlerMetrics.observe_poll`."""

    polls: int
    hits: int
    misses: int
    errors: int
    not_modified: int
    bytes: int

    @property
    def successful(self) -> int:
        """Polls that got an answer to compare: hits, misses and not-modified."""
        return self.hits + self.misses + self.not_modified


class _TopHosts(Collector):
    """A counter per host (and per ``extra`` label values) exposed for the ``top_k`` keys
    with the largest counts only: ``crawler_host_errors_total{host}``,
    ``crawler_host_deferred_total{host,reason}``.

    Cardinality is bounded twice: at most ``top_k`` series are exposed per scrape, and at
    most ``max_tracked`` keys are remembered (past that the lower half by count is
    forgotten; a forgotten key restarts from 0, which Prometheus' ``rate``/``increase``
    treat as a counter reset). A key's series may leave and re-enter the top K; its
    value stays monotonic while it is remembered.
    """

    def __init__(
        self, name: str, documentation: str, labels: list[str], top_k: int, max_tracked: int
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self.top_k = top_k
        self.max_tracked = max(max_tracked, 2 * top_k)
        self.counts: dict[tuple[str, ...], int] = {}

    def inc(self, *key: str) -> None:
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1
        if len(counts) > self.max_tracked:
            keep = heapq.nlargest(self.max_tracked // 2, counts.items(), key=lambda kv: kv[1])
            self.counts = dict(keep)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            self.name, f"{self.documentation} (top {self.top_k} only)", labels=self.labels
        )
        for key, n in heapq.nlargest(self.top_k, self.counts.items(), key=lambda kv: kv[1]):
            family.add_metric(list(key), float(n))
        yield family

    def describe(self) -> Iterable[Metric]:
        return [CounterMetricFamily(self.name, self.documentation, labels=self.labels)]


class CrawlerMetrics:
    """The crawl service's metrics, created on ``registry`` (a fresh one if not given).

    ``scheduler`` and ``slot_seconds`` fill ``crawler_scheduler_info`` and
    ``crawler_slot_length_seconds`` (the latter lets the stalled-loop alert scale with
    the configured slot). ``host_errors_top_k = 0`` turns ``crawler_host_errors_total``
    off. ``process_metrics`` adds the standard ``process_*`` collector.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        scheduler: str | None = None,
        slot_seconds: float | None = None,
        hit_ratio_window_slots: int = 100,
        host_errors_top_k: int = 20,
        host_errors_max_tracked: int = 10_000,
        process_metrics: bool = True,
        version: str | None = None,
    ) -> None:
        if hit_ratio_window_slots < 1:
            raise ValueError("hit_ratio_window_slots must be >= 1")
        self.registry: CollectorRegistry = registry if registry is not None else CollectorRegistry()
        reg = self.registry

        self.polls_total = Counter("crawler_polls", "Polls by outcome.", ["outcome"], registry=reg)
        self.poll_duration_seconds = Histogram(
            "crawler_poll_duration_seconds",
            "Wall time of one poll, request to verdict.",
            buckets=POLL_BUCKETS,
            registry=reg,
        )
        self.poll_errors_total = Counter(
            "crawler_poll_errors", "Failed polls by error kind.", ["kind"], registry=reg
        )
        self.fetched_bytes_total = Counter(
            "crawler_fetched_bytes", "Response body bytes received.", registry=reg
        )
        self.slots_total = Counter("crawler_slots", "Slots run.", registry=reg)
        self.slot_overrun_total = Counter(
            "crawler_slot_overrun", "Slots that took longer than the slot length.", registry=reg
        )
        self.slot_duration_seconds = Histogram(
            "crawler_slot_duration_seconds",
            "Wall time of one slot: select, fetch, detect, commit.",
            buckets=SLOT_BUCKETS,
            registry=reg,
        )
        self.slot_lag_seconds = Gauge(
            "crawler_slot_lag_seconds",
            "How late the last slot started after its scheduled start.",
            registry=reg,
        )
        self.last_slot_timestamp_seconds = Gauge(
            "crawler_last_slot_timestamp_seconds",
            "Unix time the last slot finished (the service start before the first slot).",
            registry=reg,
        )
        self.slot_length_seconds = Gauge(
            "crawler_slot_length_seconds", "Configured slot length.", registry=reg
        )
        self.watched_urls = Gauge("crawler_watched_urls", "URLs watched.", registry=reg)
        self.capacity_polls_per_slot = Gauge(
            "crawler_capacity_polls_per_slot", "Poll budget per slot.", registry=reg
        )
        self.knapsack_fill_ratio = Gauge(
            "crawler_knapsack_fill_ratio",
            "Sum of the wanted poll frequencies divided by the capacity.",
            registry=reg,
        )
        self.hit_ratio = Gauge(
            "crawler_hit_ratio",
            f"Hits per successful poll over the last {hit_ratio_window_slots} slots.",
            registry=reg,
        )
        self.db_commit_duration_seconds = Histogram(
            "crawler_db_commit_duration_seconds",
            "Wall time of one slot's database commit.",
            buckets=COMMIT_BUCKETS,
            registry=reg,
        )
        self.polls_deferred_total = Counter(
            "crawler_polls_deferred",
            "Polls not made in their slot (not polled, not errors), by reason.",
            ["reason"],
            registry=reg,
        )
        self.pages_truncated_total = Counter(
            "crawler_pages_truncated",
            "Pages judged cut at a parse limit (a change past the cut goes unseen).",
            registry=reg,
        )
        # discovery (crawler/service/_discovery.py): its polls, the new pages it found, and
        # how old they were when found (from their Last-Modified, when they carry one)
        self.discovery_polls_total = Counter(
            "crawler_discovery_polls",
            "Discovery polls made (fetches to find new pages), by result (ok, not_modified, "
            "error).",
            ["result"],
            registry=reg,
        )
        self.discovered_total = Counter(
            "crawler_discovered", "New pages found by discovery.", registry=reg
        )
        self.discovered_age_seconds = Histogram(
            "crawler_discovered_age_seconds",
            "Age of a new page when discovery found it (from its Last-Modified date).",
            buckets=(60, 300, 900, 1800, 3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600, 86400),
            registry=reg,
        )
        self.discovered_expired_total = Counter(
            "crawler_discovered_expired",
            "Discovered pages expired, by reason (unlinked, dead).",
            ["reason"],
            registry=reg,
        )
        self.discovery_reserved_polls = Gauge(
            "crawler_discovery_reserved_polls_per_slot",
            "Polls per slot kept for discovery (at most discovery_share of the capacity; less "
            "when every source's start pages are watched and few links wait).",
            registry=reg,
        )
        self.discovery_paced_start_pages = Gauge(
            "crawler_discovery_paced_start_pages",
            "Watched start pages the scheduler must read at least every few slots, paced by "
            "their yield of new pages.",
            registry=reg,
        )
        self.discovery_start_floor_polls = Gauge(
            "crawler_discovery_start_floor_polls_per_slot",
            "Polls per slot the paced start pages' floors ask of the scheduler, in all.",
            registry=reg,
        )
        self.discovery_capped_total = Counter(
            "crawler_discovery_capped",
            "Pages a source found past its caps, dropped: by cap (new_per_slot, new_per_day: "
            "not recorded; auto_watched: recorded, not watched).",
            ["cap"],
            registry=reg,
        )
        self.discovery_watched_ceiling = Gauge(
            "crawler_discovery_watched_ceiling_polls_per_slot",
            "Polls per slot the URLs discovery put on the watch list may take together (the "
            "sum of their upper bounds, discovery_watched_share of the scheduler's; 0 = not "
            "bound).",
            registry=reg,
        )
        self.scheduler_info = Info("crawler_scheduler", "The scheduler in use.", registry=reg)
        self.build_info = Info("crawler_build", "Version of the crawler.", registry=reg)
        self._init_cluster(reg)  # the cluster worker's and coordinator's figures
        self._init_delivery(reg)

        # Pre-bound children: no label lookup on the hot path; every series exists at 0.
        self._poll_outcome = {o: self.polls_total.labels(outcome=o) for o in OUTCOMES}
        self._error_kind = {k: self.poll_errors_total.labels(kind=k) for k in ERROR_KINDS}
        self._poll_observe = self.poll_duration_seconds.observe
        self._bytes_inc = self.fetched_bytes_total.inc
        self._deferred = {r: self.polls_deferred_total.labels(reason=r) for r in DEFERRED_REASONS}
        for result in ("ok", "not_modified", "error"):  # discovery's series exist at 0
            self.discovery_polls_total.labels(result=result)
        for reason in ("unlinked", "dead"):
            self.discovered_expired_total.labels(reason=reason)
        for cap in DISCOVERY_CAPS:
            self.discovery_capped_total.labels(cap=cap)

        self._host_errors: _TopHosts | None = None
        self._host_deferred: _TopHosts | None = None
        if host_errors_top_k > 0:
            self._host_errors = _TopHosts(
                "crawler_host_errors",
                "Failed polls per host, for the hosts with most errors",
                ["host"],
                host_errors_top_k,
                host_errors_max_tracked,
            )
            reg.register(self._host_errors)
            self._host_deferred = _TopHosts(
                "crawler_host_deferred",
                "Polls deferred per host and reason, for the (host, reason) pairs most deferred",
                ["host", "reason"],
                host_errors_top_k,
                host_errors_max_tracked,
            )
            reg.register(self._host_deferred)
        if process_metrics:
            ProcessCollector(registry=reg)

        # The open slot's counts (plain ints: cheap), folded into the window per slot.
        self._slot = {o: 0 for o in OUTCOMES}
        self._slot_bytes = 0
        self._window: deque[tuple[int, int]] = deque(maxlen=hit_ratio_window_slots)
        self._window_hits = 0
        self._window_successful = 0

        if version is None:
            version = _package_version()
        self.build_info.info({"version": version, "python": platform.python_version()})
        if scheduler is not None:
            self.set_scheduler(scheduler)
        if slot_seconds is not None:
            self.slot_length_seconds.set(slot_seconds)
        self.hit_ratio.set(math.nan)
        self.last_slot_timestamp_seconds.set(time.time())
        # host caps (crawler.service._caps): counts, not a series per host (a watch list
        # may span 100,000 hosts); which hosts are capped and bind is in the host_caps table
        self.capped_hosts = Gauge(
            "crawler_capped_hosts", "Hosts with a politeness cap on their polls per slot.",
            registry=reg,
        )  # fmt: skip
        self.cap_binding_hosts = Gauge(
            "crawler_cap_binding_hosts",
            "Capped hosts whose planned polls per slot reach their cap (the cap binds).",
            registry=reg,
        )
        self.backed_off_hosts = Gauge(
            "crawler_backed_off_hosts",
            "Hosts held back by a Retry-After (429 or 503) until it expires.",
            registry=reg,
        )
        self.binding_cap_polls_per_slot = Gauge(
            "crawler_binding_cap_polls_per_slot",
            "Polls per slot the binding hosts are held to (the sum of their caps).",
            registry=reg,
        )

    # ------------------------------------------------------------------ hot path
    def observe_poll(
        self,
        outcome: str,
        duration_s: float,
        bytes_: int = 0,
        error_kind: str | None = None,
        host: str | None = None,
    ) -> None:
        """Record one finished poll.

        ``outcome`` is one of :data:`OUTCOMES` (``ValueError`` otherwise: a programming
        error). ``error_kind`` (only read when ``outcome == "error"``) is one of
        :data:`ERROR_KINDS`; ``None`` or an unknown kind counts as ``other``. ``host``,
        when given for an error, feeds the bounded top-K ``crawler_host_errors_total``.
        """
        self.observe_polls({outcome: 1}, (duration_s,), bytes_)
        if outcome == "error":
            self.observe_poll_error(error_kind, host)

    def observe_polls(
        self, outcomes: Mapping[str, int], durations: Iterable[float], bytes_: int = 0
    ) -> None:
        """Record finished polls together, as ``observe_poll`` does one by one: ``outcomes``
        counts them by outcome (``ValueError`` for one not in :data:`OUTCOMES`),
        ``durations`` are their durations, ``bytes_`` their bytes in all. The errors' kinds
        and hosts are :meth:`observe_poll_error`'s."""
        for outcome, n in outcomes.items():
            try:
                child = self._poll_outcome[outcome]
            except KeyError:
                raise ValueError(
                    f"unknown poll outcome {outcome!r}; expected one of {OUTCOMES}"
                ) from None
            if n:
                child.inc(n)
                self._slot[outcome] += n
        observe = self._poll_observe
        for duration_s in durations:
            observe(duration_s)
        if bytes_ > 0:
            self._bytes_inc(bytes_)
            self._slot_bytes += bytes_

    def observe_poll_error(self, error_kind: str | None, host: str | None = None) -> None:
        """The kind of a failed poll (one of :data:`ERROR_KINDS`; ``None`` or an unknown
        kind counts as ``other``), and its ``host`` for the bounded top-K
        ``crawler_host_errors_total``; the poll itself is counted by ``observe_polls``."""
        child = self._error_kind.get(error_kind or "other")
        (child if child is not None else self._error_kind["other"]).inc()
        if host is not None and self._host_errors is not None:
            self._host_errors.inc(host)

    def observe_deferred(self, reason: str, host: str | None = None) -> None:
        """Record one poll deferred for ``reason`` (one of :data:`DEFERRED_REASONS`;
        ``ValueError`` otherwise); ``host`` feeds ``crawler_host_deferred_total``."""
        try:
            self._deferred[reason].inc()
        except KeyError:
            raise ValueError(
                f"unknown deferral reason {reason!r}; expected one of {DEFERRED_REASONS}"
            ) from None
        if host is not None and self._host_deferred is not None:
            self._host_deferred.inc(host, reason)

    def observe_truncated(self) -> None:
        """Record one page judged cut at a parse limit."""
        self.pages_truncated_total.inc()

    # ------------------------------------------------------------------ per slot
    def observe_slot(
        self, duration_s: float, lag_s: float = 0.0, overrun: bool = False
    ) -> SlotCounts:
        """Close the current slot: slot counters, lag, and the hit-ratio window.

        The slot's polls are those recorded with :meth:`observe_poll` since the previous
        call; they are returned. ``lag_s`` is how late the slot started; ``overrun`` says
        the slot took longer than its length.
        """
        s = self._slot
        counts = SlotCounts(
            polls=s["hit"] + s["miss"] + s["error"] + s["not_modified"],
            hits=s["hit"],
            misses=s["miss"],
            errors=s["error"],
            not_modified=s["not_modified"],
            bytes=self._slot_bytes,
        )
        self._slot = {o: 0 for o in OUTCOMES}
        self._slot_bytes = 0

        self.slots_total.inc()
        if overrun:
            self.slot_overrun_total.inc()
        self.slot_duration_seconds.observe(duration_s)
        self.slot_lag_seconds.set(max(lag_s, 0.0))
        self.last_slot_timestamp_seconds.set(time.time())

        window = self._window
        if len(window) == window.maxlen:
            old_hits, old_ok = window[0]
            self._window_hits -= old_hits
            self._window_successful -= old_ok
        window.append((counts.hits, counts.successful))
        self._window_hits += counts.hits
        self._window_successful += counts.successful
        self.hit_ratio.set(self.current_hit_ratio)
        return counts

    def set_watch(self, watched: int, capacity: float, knapsack_fill: float) -> None:
        """The watch list's size, the poll budget per slot, and sum(wanted) / capacity."""
        self.watched_urls.set(watched)
        self.capacity_polls_per_slot.set(capacity)
        self.knapsack_fill_ratio.set(knapsack_fill)

    def set_host_caps(
        self, capped: int, binding: int, backed_off: int, binding_polls: float
    ) -> None:
        """The host caps in force: how many hosts have one, bind, are backed off, and the
        polls per slot the binding ones are held to."""
        self.capped_hosts.set(capped)
        self.cap_binding_hosts.set(binding)
        self.backed_off_hosts.set(backed_off)
        self.binding_cap_polls_per_slot.set(binding_polls)

    def observe_discovery(
        self,
        ok: int,
        errors: int,
        ages_s: Sequence[float | None],
        expired: Sequence[str] = (),
        not_modified: int = 0,
    ) -> None:
        """One slot's discovery: polls made (ok, failed, answered 304), the ages of the new
        pages found (None: no date known), the reasons of the pages expired."""
        if ok:
            self.discovery_polls_total.labels(result="ok").inc(ok)
        if not_modified:
            self.discovery_polls_total.labels(result="not_modified").inc(not_modified)
        if errors:
            self.discovery_polls_total.labels(result="error").inc(errors)
        if ages_s:
            self.discovered_total.inc(len(ages_s))
        for age in ages_s:
            if age is not None:
                self.discovered_age_seconds.observe(max(0.0, age))
        for reason in expired:
            self.discovered_expired_total.labels(reason=reason).inc()

    def set_discovery_shares(self, reserved: int, paced: int, floor_polls: float) -> None:
        """Discovery's polls per slot this slot, and the watched start pages' floors."""
        self.discovery_reserved_polls.set(reserved)
        self.discovery_paced_start_pages.set(paced)
        self.discovery_start_floor_polls.set(floor_polls)

    def observe_capped(self, cap: str, count: int) -> None:
        """``count`` pages a source found past cap ``cap`` (one of ``DISCOVERY_CAPS``)."""
        if count:
            self.discovery_capped_total.labels(cap=cap).inc(count)

    def observe_commit(self, duration_s: float) -> None:
        """One slot's database commit took ``duration_s``."""
        self.db_commit_duration_seconds.observe(duration_s)

    def set_scheduler(self, name: str, **labels: str) -> None:
        """``crawler_scheduler_info{scheduler=name, ...} 1`` (e.g. ``realization="stride"``)."""
        self.scheduler_info.info({"scheduler": name, **labels})

    # ---------------------------------------------------- cluster (workers and coordinator)
    def _init_cluster(self, reg: CollectorRegistry) -> None:
        """The cluster's metrics. Each worker process exports its own (Prometheus' instance
        label tells them apart, no worker label here); the cluster-wide gauges (live workers,
        total weight and capacity, shortfall) are the coordinator's last packing as read from
        cluster_state by every worker, so take ``max`` over instances, never ``sum``. The
        counters of moves and overloads are counted by the process that was the coordinator
        when it made them: ``sum`` over instances is the cluster's total. A service not in a
        cluster leaves them at 0."""
        self.cluster_sites = Gauge(
            "crawler_cluster_sites", "Sites this worker holds a lease on.", registry=reg
        )
        self.cluster_weight = Gauge(
            "crawler_cluster_weight_polls_per_slot",
            "Learned weight of this worker's sites: their URLs' wanted polls per slot.",
            registry=reg,
        )
        self.cluster_capacity = Gauge(
            "crawler_cluster_capacity_polls_per_slot",
            "This worker's capacity in the packing (its bin size), polls per slot.",
            registry=reg,
        )
        self.cluster_is_coordinator = Gauge(
            "crawler_cluster_is_coordinator",
            "1 while this worker holds the coordinator lock, else 0.",
            registry=reg,
        )
        self.cluster_live_workers = Gauge(
            "crawler_cluster_live_workers",
            "Live workers at the coordinator's last packing (same on every worker: use max).",
            registry=reg,
        )
        self.cluster_total_weight = Gauge(
            "crawler_cluster_total_weight_polls_per_slot",
            "Learned weight of all sites at the last packing, polls per slot (use max).",
            registry=reg,
        )
        self.cluster_total_capacity = Gauge(
            "crawler_cluster_total_capacity_polls_per_slot",
            "Capacity of the live workers at the last packing, polls per slot (use max).",
            registry=reg,
        )
        self.cluster_shortfall_workers = Gauge(
            "crawler_cluster_shortfall_workers",
            "More workers the learned weights need at the last packing (0: enough; use max).",
            registry=reg,
        )
        self.cluster_shortfall_capacity = Gauge(
            "crawler_cluster_shortfall_polls_per_slot",
            "Capacity missing at the last packing, polls per slot (use max).",
            registry=reg,
        )
        self.cluster_moves_total = Counter(
            "crawler_cluster_moves",
            "Sites this process moved to another worker while it was the coordinator.",
            registry=reg,
        )
        self.cluster_overloads_total = Counter(
            "crawler_cluster_overloads",
            "Worker overloads this process saw while it was the coordinator.",
            registry=reg,
        )
        self.cluster_fenced_polls_total = Counter(
            "crawler_cluster_fenced_polls",
            "Polls this worker made whose commit was refused: the site's lease had moved.",
            registry=reg,
        )
        self._cluster_seen: dict[str, int] = {}

    def set_cluster_worker(self, sites: int, weight: float, capacity: float) -> None:
        """This worker's leases: how many sites, their weight, its capacity (once per slot)."""
        self.cluster_sites.set(sites)
        self.cluster_weight.set(weight)
        self.cluster_capacity.set(capacity)

    def set_cluster_state(
        self,
        live_workers: int,
        total_weight: float,
        total_capacity: float,
        shortfall_workers: int,
        shortfall_capacity: float,
    ) -> None:
        """The coordinator's last packing, as read from cluster_state."""
        self.cluster_live_workers.set(live_workers)
        self.cluster_total_weight.set(total_weight)
        self.cluster_total_capacity.set(total_capacity)
        self.cluster_shortfall_workers.set(shortfall_workers)
        self.cluster_shortfall_capacity.set(shortfall_capacity)

    def set_coordinator(self, is_coordinator: bool) -> None:
        self.cluster_is_coordinator.set(1 if is_coordinator else 0)

    def set_cluster_totals(self, fenced_polls: int, moves: int, overloads: int) -> None:
        """The running totals of this process (fenced polls; moves and overloads made as
        the coordinator): the counters grow by the difference since the last call."""
        seen = self._cluster_seen
        for key, value, counter in (
            ("fenced", fenced_polls, self.cluster_fenced_polls_total),
            ("moves", moves, self.cluster_moves_total),
            ("overloads", overloads, self.cluster_overloads_total),
        ):
            if value > seen.get(key, 0):
                counter.inc(value - seen.get(key, 0))
            seen[key] = max(value, seen.get(key, 0))

    # ------------------------------------------------------------------ delivery
    def _init_delivery(self, reg: CollectorRegistry) -> None:
        """The outbox and its webhooks (crawler/delivery). Updated from the delivery thread
        (prometheus_client's metrics are thread-safe); in a cluster only the worker holding
        the delivery lock delivers, so ``sum`` over instances is the cluster's figure."""
        self.delivery_events_written_total = Counter(
            "crawler_delivery_events_written",
            "Events taken from the outbox and fanned out to the destinations (each once).",
            registry=reg,
        )
        self.delivery_attempts_total = Counter(
            "crawler_delivery_attempts",
            "Attempts to deliver an event, by destination id and outcome: delivered, "
            "failed (retried later), dead (dead-lettered) or gone (410: destination disabled).",
            ["destination", "outcome"],
            registry=reg,
        )
        self.delivery_outbox_depth = Gauge(
            "crawler_delivery_outbox_depth",
            "Deliveries not done yet: pending ones and events not fanned out.",
            registry=reg,
        )
        self.delivery_oldest_pending_age_seconds = Gauge(
            "crawler_delivery_oldest_pending_age_seconds",
            "Age of the oldest event not delivered yet (0: none).",
            registry=reg,
        )
        self.delivery_paced_seconds_total = Counter(
            "crawler_delivery_paced_seconds",
            "Seconds the deliverer waited to keep its CPU under delivery_busy_share while "
            "other processes kept the machine busy (delivery_busy_above).",
            registry=reg,
        )

    def observe_delivery_attempt(self, destination: int, outcome: str) -> None:
        if outcome not in DELIVERY_OUTCOMES:
            raise ValueError(f"unknown delivery outcome {outcome!r}")
        self.delivery_attempts_total.labels(str(destination), outcome).inc()

    def set_outbox(self, depth: int, oldest_age_s: float) -> None:
        self.delivery_outbox_depth.set(depth)
        self.delivery_oldest_pending_age_seconds.set(oldest_age_s)

    def observe_delivery_paced(self, seconds: float) -> None:
        self.delivery_paced_seconds_total.inc(seconds)

    # ------------------------------------------------------------------ reading
    @property
    def current_hit_ratio(self) -> float:
        """The windowed hit ratio (NaN before any successful poll)."""
        if self._window_successful == 0:
            return math.nan
        return self._window_hits / self._window_successful


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("crawler")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"
