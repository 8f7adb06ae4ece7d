"""What a page.changed payload reads at send time: the diff and the URL's learned rate.

The learned rate is what ``crawler show`` prints for the URL (``Store.url_detail``'s
per-scheduler fields): for the ``bayes`` scheduler, its sufficient statistics turned into a
rate by the scheduler's own ``estimate_rates`` (changes per slot, with its priors), given
here in changes per day. The other schedulers learn no rate: ``change_rate`` is null.

The deliverer reads the contexts of a whole claimed batch at once (``event_contexts``: one
thread hop, one connection, the change texts in one query): read one event at a time (two
connections, a ``url_detail`` and a thread hop each) they cost 24 ms of the deliverer's
time per event on a loaded 2-core machine and held delivery near 40 events/s
(benchmarks/delivery.py; docs/results.md has the figures before and after).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from crawler.delivery._diff import change_diff
from crawler.delivery._payload import Context
from crawler.detect import unified_diff
from crawler.schedulers.bayes import estimate_rates
from crawler.settings import Settings
from crawler.store import PAGE_CHANGED, EventRow, OutboxStore, Store

DAY_S = 86_400.0


def event_context(
    store: Store, outbox: OutboxStore, settings: Settings, event: EventRow
) -> Context:
    if event.type != PAGE_CHANGED or event.url_id is None:
        return Context()
    diff = change_diff(
        outbox,
        event.url_id,
        event.slot,
        event.payload.get("old_hash"),
        event.payload.get("new_hash"),
    )
    rate = learned_rate(store, settings, event.url) if event.url else None
    interval = DAY_S / rate if rate else None
    return Context(diff=diff, change_rate=rate, expected_interval_s=interval)


def event_contexts(
    outbox: OutboxStore, settings: Settings, batch: Sequence[EventRow]
) -> dict[int, Context]:
    """``event_context`` of each event of ``batch`` (by event id), read together."""
    changed = [(e, e.url_id) for e in batch if e.type == PAGE_CHANGED and e.url_id is not None]
    keys = [(uid, e.slot, e.payload.get("new_hash")) for e, uid in changed]
    texts = outbox.change_texts_many(keys) if keys else {}
    states: dict[int, dict[str, dict[str, Any]]] = {}
    if settings.scheduler == "bayes" and changed:
        states = outbox.url_states([uid for _, uid in changed])
    out = {e.id: Context() for e in batch}
    for (event, uid), key in zip(changed, keys, strict=True):
        before, after = texts.get(key, (None, None))
        diff = unified_diff(before, after) if before is not None and after is not None else None
        rate = rate_of(states.get(uid, {}), settings)
        out[event.id] = Context(
            diff=diff, change_rate=rate, expected_interval_s=DAY_S / rate if rate else None
        )
    return out


def learned_rate(store: Store, settings: Settings, url: str) -> float | None:
    """Changes per day the scheduler learned for ``url`` (None: it learns no rate, or has
    not observed the URL yet)."""
    if settings.scheduler != "bayes":
        return None
    detail = store.url_detail(url, recent=0)
    return rate_of(detail.state if detail is not None else {}, settings)


def rate_of(state: dict[str, dict[str, Any]], settings: Settings) -> float | None:
    """Changes per day from a URL's saved scheduler fields (``url_detail().state``)."""
    if settings.scheduler != "bayes":
        return None
    fields = state.get("bayes")
    if not fields or fields.get("corrupt"):
        return None
    try:
        per_slot = estimate_rates(
            np.array([fields["hit_time"]], dtype=np.float64),
            np.array([fields["miss_time"]], dtype=np.float64),
            np.array([fields["hit_count"]], dtype=np.float64),
            np.array([fields["miss_count"]], dtype=np.float64),
            float(settings.scheduler_params.get("prior_hits", 0.5)),
            float(settings.scheduler_params.get("prior_misses", 0.5)),
        )[0]
    except (KeyError, TypeError, ValueError):
        return None
    if not math.isfinite(per_slot) or per_slot <= 0:
        return None
    return float(per_slot) * DAY_S / settings.slot_seconds
