"""The cluster's Prometheus figures of this worker, refreshed after a slot at most once a
second.

Called by the crawl loop after each slot (the cluster step's ``after_slot``), as a
background task in a thread (not awaited: under load the thread hop and the read took about
10 ms, 4% of a 0.25 s slot, when the slot waited for it; a refresh still running when the
next slot ends makes that slot skip its own). At most one refresh a second
(``REFRESH_EVERY_S``): a scrape comes every few seconds at most and the cluster-wide
figures change once per coordinator round (every ``heartbeat_s``), while with short slots
(tens a second, as when slots run back to back) a refresh per slot cost a thread hop and a
database read per slot for nothing. It reads this worker's leases and weights from memory,
and the cluster_state row (one primary-key read: the coordinator's last packing, the same
for every worker) from the database. The counters (fenced polls, and the moves and
overloads this process made as the coordinator) are kept as running totals by the worker
and the coordinator; the metrics add the difference since the last call. A database error
leaves the cluster-wide gauges as they were (the next slot tries again): metrics never stop
a slot.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import TYPE_CHECKING

from crawler.metrics import CrawlerMetrics
from crawler.store import StoreError

if TYPE_CHECKING:  # _cluster imports the loop, which imports this module
    from crawler.service._cluster import ClusterMember

log = logging.getLogger(__name__)

#: seconds between two refreshes of a worker's cluster figures
REFRESH_EVERY_S = 1.0

#: the last refresh per worker: when it started (monotonic), and its task (a reference
#: keeps the task alive until it is done)
_last: weakref.WeakKeyDictionary[ClusterMember, tuple[float, asyncio.Future[None]]] = (
    weakref.WeakKeyDictionary()
)


def export_cluster_metrics_soon(metrics: CrawlerMetrics, member: ClusterMember) -> None:
    """Start :func:`export_cluster_metrics` in a thread, unless the last one still runs or
    started less than ``REFRESH_EVERY_S`` ago."""
    now = time.monotonic()
    previous = _last.get(member)
    if previous is not None and (not previous[1].done() or now - previous[0] < REFRESH_EVERY_S):
        return
    _last[member] = (
        now,
        asyncio.ensure_future(asyncio.to_thread(export_cluster_metrics, metrics, member)),
    )


def export_cluster_metrics(metrics: CrawlerMetrics, member: ClusterMember) -> None:
    """Bring ``metrics``' cluster figures up to date with ``member`` and cluster_state."""
    weights = member._weights
    metrics.set_cluster_worker(
        len(member.leases), float(sum(weights.get(s, 0.0) for s in member.leases)), member.capacity
    )
    coordinator = member.coordinator
    metrics.set_coordinator(coordinator is not None and coordinator.is_coordinator)
    metrics.set_cluster_totals(
        fenced_polls=member.fenced_polls_total,
        moves=coordinator.moves_total if coordinator is not None else 0,
        overloads=coordinator.overloads_total if coordinator is not None else 0,
    )
    try:
        state = member.store.cluster.cluster_state()
    except StoreError as exc:
        log.debug("cluster metrics: cluster_state not read: %s", exc)
        return
    if state is not None:
        metrics.set_cluster_state(
            state.live_workers,
            state.total_weight,
            state.total_capacity,
            state.shortfall_workers,
            state.shortfall_capacity,
        )
