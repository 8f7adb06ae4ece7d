"""Failed polls: reported to the scheduler, recorded in the store, so that they survive a restart.

After each slot every failed poll goes to ``Scheduler.report_failures`` with its kind from
``classify_failure(status, error_kind)``: ``gone`` (410), ``permanent`` (404, a host that does
not resolve) or ``transient`` (the rest: timeouts, 5xx, 429, refused connections). The
scheduler's guard backs the URL off and retires it by its rules (docs/constraints.md); its
learning is not touched. A successful poll ends the streak: the scheduler's ``feedback``
does that for hits, misses and 304s; a ``baseline`` poll (the first good answer of a URL
that never had one) gives no feedback, so it is revived here explicitly.

The record of each failing URL (streak, trailing permanent failures, retired, last kind and
error, the streak's start) is kept here and returned as ``FailureRow``s with the slot, to
be written in the slot's own transaction: a kill -9 keeps exactly the committed slots'
record. At the next start ``restore`` gives the scheduler the same state by replaying
failures, all URLs at once, one ``report_failures`` call per step: its transient failures,
then its trailing permanent ones, the first of all made a ``gone`` for a retired URL. The
replay is cut at ``REPLAY_STEPS`` transient and as many permanent failures per URL: the
back-off halves a URL's share per failure down to a floor of 0.001 polls per slot, reached
from any share within 10 halvings, so longer streaks plan the same; the stored streak keeps
its true length. The back-off's base is the URL's planned share at the replay (the share
when the streak began is not stored):
the learning is restored first, so it is the same share but for the other URLs' moves.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from crawler import schedulers
from crawler.schedulers import classify_failure
from crawler.store import FailureRow, PollRecord

IdArray = NDArray[np.int64]

#: failures replayed per URL at most at a restart (see the module docstring)
REPLAY_STEPS = 16


class FailureKeeper:
    """The failure record of the failing URLs, in step with the scheduler's guard."""

    def __init__(self) -> None:
        self.records: dict[int, FailureRow] = {}
        self._known: IdArray = np.empty(0, dtype=np.int64)
        self._cleared: list[int] = []  # revived by the operator: written with the next slot

    def forget_applied(self) -> None:
        """The scheduler was replaced: the next ``restore`` replays every stored record."""
        self._known = np.empty(0, dtype=np.int64)
        self.records = {}

    def forget(self, ids: IdArray) -> None:
        """Some URLs were dropped from the scheduler and taken again: the next ``restore``
        replays their stored records."""
        if self._known.size and ids.size:
            self._known = self._known[~np.isin(self._known, ids)]
        for uid in ids.tolist():
            self.records.pop(uid, None)

    def restore(
        self, scheduler: schedulers.Scheduler, ids: IdArray, rows: list[FailureRow]
    ) -> None:
        """Give the scheduler the stored record of the URLs it did not have before (all of
        them at the start; those added since on a watch-list change)."""
        new = ids[~np.isin(ids, self._known, assume_unique=True)] if self._known.size else ids
        gone = self._known[~np.isin(self._known, ids, assume_unique=True)]
        for uid in gone.tolist():
            self.records.pop(uid, None)
        self._known = ids
        todo = [r for r in rows if r.url_id not in self.records and _among(r.url_id, new)]
        if not todo:
            return
        plans = {r.url_id: plan for r in todo if (plan := _replay(r))}
        for step in range(max(len(p) for p in plans.values())):
            batch = [(uid, plan[step]) for uid, plan in plans.items() if step < len(plan)]
            scheduler.report_failures([u for u, _ in batch], [k for _, k in batch])
        for r in todo:
            self.records[r.url_id] = r

    def revive(self, scheduler: schedulers.Scheduler, ids: IdArray) -> None:
        """The operator revived ``ids`` (``crawler revive``): end their streaks."""
        watched = ids[np.isin(ids, self._known)]
        if watched.size:
            scheduler.revive(watched)
        for uid in watched.tolist():
            if self.records.pop(uid, None) is not None:
                self._cleared.append(uid)

    def after_slot(
        self, scheduler: schedulers.Scheduler, polls: list[PollRecord]
    ) -> tuple[FailureRow, ...]:
        """Report the slot's failed polls and the recoveries; the changed records."""
        failed: dict[int, PollRecord] = {}
        recovered: list[int] = []
        for p in polls:
            if p.outcome == "error":
                failed[p.url_id] = p
            elif p.url_id in self.records:
                recovered.append(p.url_id)
        out = [FailureRow(uid, 0) for uid in self._cleared]
        self._cleared = []
        if recovered:
            back = np.array(recovered, dtype=np.int64)
            back = back[np.isin(back, self._known)]
            if back.size:
                # a baseline poll gives no feedback: revive here, the next poll compared
                # with this answer
                scheduler.revive(back, answered=True)
            for uid in recovered:
                del self.records[uid]
                out.append(FailureRow(uid, 0))
        if not failed:
            return tuple(out)
        ids = list(failed)
        kinds = [classify_failure(failed[u].status, failed[u].error_kind) for u in ids]
        scheduler.report_failures(ids, kinds)
        failing_ids, _, retired = scheduler.failing()
        retired_now = set(failing_ids[retired].tolist())
        watched = set(failing_ids.tolist())
        for uid, kind in zip(ids, kinds, strict=True):
            if uid not in watched:  # removed during the slot
                continue
            p = failed[uid]
            old = self.records.get(uid)
            row = FailureRow(
                uid,
                (old.streak if old else 0) + 1,
                0 if kind == "transient" else (old.permanent if old else 0) + 1,
                uid in retired_now,
                kind,
                _describe(p),
                old.since if old and old.since else p.polled_at,
            )
            self.records[uid] = row
            out.append(row)
        return tuple(out)

    def failing(self) -> list[FailureRow]:
        return sorted(self.records.values(), key=lambda r: r.url_id)


def _replay(row: FailureRow) -> list[schedulers.FailureKind]:
    """The failures that put a guard in ``row``'s state: its transient failures, then its
    trailing permanent ones (the last a ``gone`` if it was one), the first made a ``gone``
    if the URL is retired (a retirement stays through later failures)."""
    permanent = min(row.permanent, row.streak)
    transient = row.streak - permanent
    plan: list[schedulers.FailureKind] = ["transient"] * min(transient, REPLAY_STEPS)
    plan += ["permanent"] * min(permanent, REPLAY_STEPS)
    if not plan:
        return ["gone"] if row.retired else []
    if row.kind == "gone":
        plan[-1] = "gone"
    if row.retired:
        plan[0] = "gone"
    return plan


def _among(uid: int, ids: IdArray) -> bool:
    at = int(np.searchsorted(ids, uid))
    return at < ids.size and int(ids[at]) == uid


def _describe(p: PollRecord) -> str:
    parts = [str(p.status)] if p.status is not None else []
    if p.error_kind:
        parts.append(p.error_kind)
    text = " ".join(parts)
    return f"{text}: {p.error}" if p.error else text
