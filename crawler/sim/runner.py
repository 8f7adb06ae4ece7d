"""Run one scheduler on one environment for S slots.

Each slot: the environment starts the slot (switching first if due), the scheduler
selects, the environment answers every poll, the scheduler gets all outcomes.

Oracles (schedulers whose class has ``needs_rates``) get the true p in ``add``. When a
switching environment changes p, the changed URLs are removed from the oracle and added
back with their new rates and importance, before that slot's ``select``: the oracle is
re-informed at once (its per-URL polling credit restarts for those URLs). Learning
schedulers are told nothing about a switch. When the importance changes (the thesis's
mirror swap), a scheduler that has a ``set_importance(ids, importance)`` method is given
the new weights; the others keep the weights given to ``add``.

Host groups (``EnvSpec.hosts``): when the spec's ``caps_known`` is True the scheduler is
told each URL's host and the hosts' caps (``set_groups``, ``set_group_caps``) and keeps to
them itself; otherwise it is told nothing and each slot's selection is truncated per host
as a polite fetcher would (``HostTruncation``: a host's polls beyond its credit are not
made and give no feedback). Either way the limit is the constrained one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from crawler import schedulers
from crawler.sim.catalog import EnvSpec
from crawler.sim.environment import Environment, IdArray
from crawler.sim.limit import LimitTracker
from crawler.sim.metrics import SlotRecord, default_window, summarize, window_series

Progress = Callable[[int], None]

_PROGRESS_EVERY = 2000


@dataclass
class RunResult:
    """Per-window series and summary of one run."""

    scheduler: str
    env: EnvSpec
    slots: int
    seed: int
    params: dict[str, Any]
    window: int
    seconds: float
    series: dict[str, list[float]]
    summary: dict[str, float | int | None]
    record: SlotRecord | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict (NaN becomes null)."""
        return {
            "scheduler": self.scheduler,
            "env": self.env.to_dict(),
            "slots": self.slots,
            "seed": self.seed,
            "params": self.params,
            "window": self.window,
            "seconds": self.seconds,
            "summary": {key: _clean(value) for key, value in self.summary.items()},
            "series": {key: [_clean(v) for v in values] for key, values in self.series.items()},
        }


def run(
    scheduler: str,
    env: EnvSpec,
    slots: int,
    *,
    seed: int = 0,
    params: dict[str, Any] | None = None,
    window: int | None = None,
    progress: Progress | None = None,
    keep_record: bool = False,
) -> RunResult:
    """Simulate ``scheduler`` (a registered name) on ``env`` for ``slots`` slots.

    ``seed`` drives the environment's changes and the scheduler's randomness (separate
    streams); ``progress`` is called with the number of slots done, now and then."""
    if slots < 1:
        raise ValueError(f"slots must be at least 1, got {slots}")
    window = default_window(slots) if window is None else int(window)
    if window < 1:
        raise ValueError(f"window must be at least 1 slot, got {window}")
    window = min(window, slots)
    params = dict(params or {})
    env_seed, scheduler_seed = np.random.SeedSequence(seed).spawn(2)
    environment = env.build(env_seed)
    oracle = schedulers.scheduler_class(scheduler).needs_rates
    sched = schedulers.create(
        scheduler,
        capacity=environment.capacity,
        seed=int(scheduler_seed.generate_state(1)[0]),
        **params,
    )
    sched.add(
        environment.ids,
        importance=_copy(environment.importance),
        rates=environment.p.copy() if oracle else None,
    )
    truncation: HostTruncation | None = None
    if environment.groups is not None and environment.caps is not None:
        if env.caps_known:
            sched.set_groups(environment.ids, environment.groups)
            sched.set_group_caps(dict(environment.caps))
        else:
            truncation = HostTruncation(environment.groups, environment.caps)
    started = time.perf_counter()
    rec = SlotRecord.empty(slots)
    _loop(sched, environment, rec, oracle, progress, truncation)
    seconds = time.perf_counter() - started
    return RunResult(
        scheduler=scheduler,
        env=env,
        slots=slots,
        seed=seed,
        params=params,
        window=window,
        seconds=seconds,
        series=window_series(rec, window),
        summary=summarize(rec, window),
        record=rec if keep_record else None,
    )


def _loop(
    sched: schedulers.Scheduler,
    env: Environment,
    rec: SlotRecord,
    oracle: bool,
    progress: Progress | None,
    truncation: HostTruncation | None = None,
) -> None:
    """The hot loop: a few NumPy calls per slot beyond the scheduler's own work."""
    tracker = LimitTracker()
    limit = tracker.value(env)
    segments: list[tuple[int, float, float]] = [(0, limit, env.expected_changes())]
    weights = env.importance
    select, feedback, begin, poll = sched.select, sched.feedback, env.begin_slot, env.poll
    count_nonzero = np.count_nonzero
    polls_out, hits_out, value_out = rec.polls, rec.hits, rec.value
    slots = polls_out.size
    for t in range(slots):
        changed = begin()
        if changed is not None:
            segments.append((t, tracker.value(env), env.expected_changes()))
            if changed.size:
                _tell_scheduler(sched, env, changed, oracle)
        ids = select()
        if truncation is not None:
            ids = truncation.keep(ids)
        if ids.size:
            hit = poll(ids)
            feedback(ids, hit)
            count = int(count_nonzero(hit))
            polls_out[t] = ids.size
            hits_out[t] = count
            if weights is None:
                value_out[t] = count
            elif count:
                value_out[t] = float(weights[ids[hit]].sum())
        if progress is not None and (t + 1) % _PROGRESS_EVERY == 0:
            progress(t + 1)
    for k, (start, limit, changes) in enumerate(segments):
        end = segments[k + 1][0] if k + 1 < len(segments) else slots
        rec.limit[start:end] = limit
        rec.changes[start:end] = changes
    if progress is not None:
        progress(slots)


class HostTruncation:
    """What a polite fetcher does to a selection that ignores the hosts' caps: each host has
    a credit that grows by its cap every slot (up to ``ceil(cap)``); a slot polls at most
    ``floor(credit)`` of the host's selected URLs (in the selection's order) and pays one
    per poll; the other polls are not made."""

    def __init__(self, groups: IdArray, caps: dict[int, float]) -> None:
        self._groups = np.asarray(groups, dtype=np.int64)
        hosts = int(self._groups.max()) + 1 if self._groups.size else 0
        self._cap = np.full(hosts, np.inf)
        for host, cap in caps.items():
            if 0 <= host < hosts:
                self._cap[host] = cap
        self._credit = np.zeros(hosts)
        self.dropped = 0

    def keep(self, ids: IdArray) -> IdArray:
        """The ids of this slot's selection that the hosts' credits allow."""
        cap = self._cap
        ceiling = np.ceil(np.where(np.isfinite(cap), cap, 1.0) - 1e-9)
        self._credit = np.where(np.isfinite(cap), np.minimum(self._credit + cap, ceiling), np.inf)
        if ids.size == 0:
            return ids
        host = self._groups[ids]
        order = np.argsort(host, kind="stable")
        sorted_host = host[order]
        start = np.searchsorted(sorted_host, sorted_host, side="left")
        rank = np.empty(ids.size, dtype=np.int64)
        rank[order] = np.arange(ids.size) - start
        allowed = rank < np.floor(self._credit[host] + 1e-9)
        kept = ids[allowed]
        self._credit -= np.bincount(host[allowed], minlength=cap.size)
        self.dropped += int(ids.size - kept.size)
        return kept


def _tell_scheduler(
    sched: schedulers.Scheduler, env: Environment, changed: IdArray, oracle: bool
) -> None:
    importance = None if env.importance is None else env.importance[changed].copy()
    if oracle:
        sched.remove(changed)
        sched.add(changed, importance=importance, rates=env.p[changed].copy())
        return
    set_importance = getattr(sched, "set_importance", None)
    if importance is not None and callable(set_importance):
        set_importance(changed, importance)


def _copy(values: np.ndarray[Any, Any] | None) -> np.ndarray[Any, Any] | None:
    return None if values is None else values.copy()


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
