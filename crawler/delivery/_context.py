"""What a page.changed payload reads at send time: the diff and the URL's learned rate.

The learned rate is what ``crawler show`` prints for the URL (``Store.url_detail``'s
per-scheduler fields): for the ``bayes`` scheduler, its sufficient statistics turned into a
rate by the scheduler's own ``estimate_rates`` (changes per slot, with its priors), given
here in changes per day. The other schedulers learn no rate: ``change_rate`` is null.

The diff is made once, for the first send of the change's event, and stored with the
change (``changes.diff``) in the transaction that writes the send's answer: later sends
read it, as the feed and the API do. Made at fan-out instead, a backlog's fan-out made
every diff of the backlog before the first send (delivery beside the crawl fell from
50-70 to 14-28 events/s in benchmarks/delivery.py). The deliverer reads
the contexts of a whole claimed batch at once (``event_contexts``: one thread hop, one
connection, the diffs in one query, the learned rates in one): read one event at a time
(two connections, a ``url_detail`` and a thread hop each) they cost 24 ms of the
deliverer's time per event on a loaded 2-core machine and held delivery near 40 events/s
(benchmarks/delivery.py; docs/results.md has the figures before and after).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from crawler.delivery._diff import diff_of
from crawler.delivery._payload import Context
from crawler.schedulers.bayes import estimate_rates
from crawler.settings import Settings
from crawler.store import EventRow, OutboxStore, Store, change_key

DAY_S = 86_400.0


def event_context(
    store: Store, outbox: OutboxStore, settings: Settings, event: EventRow
) -> Context:
    """``event_contexts`` of one event."""
    return event_contexts(outbox, settings, [event])[event.id]


def event_contexts(
    outbox: OutboxStore,
    settings: Settings,
    batch: Sequence[EventRow],
    made: dict[int, str] | None = None,
) -> dict[int, Context]:
    """``event_context`` of each event of ``batch`` (by event id), read together: the
    stored diffs in one query, the learned rates in another. A diff not stored yet is made
    from the change's texts and put in ``made`` (change id -> diff) for the caller to
    store (the deliverer does, with the sends' answers: made once)."""
    changed = [(e, k) for e in batch if (k := change_key(e)) is not None]
    keys = [k for _, k in changed]
    diffs = outbox.change_diffs(keys) if keys else {}
    states: dict[int, dict[str, dict[str, Any]]] = {}
    if settings.scheduler == "bayes" and changed:
        states = outbox.url_states([k[0] for k in keys])
    out = {e.id: Context() for e in batch}
    for event, key in changed:
        rate = rate_of(states.get(key[0], {}), settings)
        found = diffs.get(key)
        diff = diff_of(found)
        fresh = found is not None and found.diff is None and found.change_id is not None
        if made is not None and fresh and diff is not None:  # the caller stores it, once
            assert found is not None and found.change_id is not None
            made[found.change_id] = diff
        out[event.id] = Context(
            diff=diff,
            change_rate=rate,
            expected_interval_s=DAY_S / rate if rate else None,
        )
    return out


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
