"""Host caps, per-URL bounds and failures of a scheduler's URLs: the rules every slot obeys.

A ``Guard`` keeps, row by row alongside a scheduler's arrays, what the operator and the web
impose on the allocation, and it enforces the hard part of it on each slot's selection:

- **host groups and caps**: each URL may belong to a group (its host) with a cap in polls
  per slot (politeness). Each group has a credit that grows by its cap every slot (up to
  ``cap`` for an integer cap, ``cap + 1`` otherwise: the fraction carried over is kept, and
  floor(credit) never exceeds ``ceil(cap)``, so an idle host does not save up a burst); a
  slot polls at most
  ``floor(credit)`` of the group's URLs and pays one per poll. A cap of 0.5 is one poll
  every other slot, 1.5 alternates one and two, 10 is at most 10 polls in any slot.
- **bounds**: ``lower`` and ``upper`` in polls per slot. ``upper`` is enforced as a minimum
  gap: a URL is not polled again before ``ceil(1 / upper)`` slots (``upper`` 0: paused,
  never). ``lower`` is enforced as a deadline: a URL whose gap reaches ``floor(1 / lower)``
  slots is polled in that slot ahead of the scheduler's own picks (the most overdue first),
  as far as its host's credit and the slot's polls allow. So a feasible bound holds
  exactly, slot by slot; when the bounds cannot all be met (more deadlines in a slot than
  polls, or than a host's cap) the caps and the capacity win, and the rest slip a slot.
- **pause**: a paused URL is never polled and keeps everything it learned; ``resume``
  restores its bounds.
- **failures** (a failed poll is information, but about reachability, not about change):
  ``report_failures`` counts each URL's consecutive failures. After ``s`` of them the URL's
  frequency is capped at ``max(floor, x0 * backoff**s)``, x0 being its share when the streak
  began (exponential back-off to a floor). A ``gone`` failure (HTTP 410), or
  ``retire_after`` consecutive ``permanent`` ones (404, an unknown host), retires the URL: it
  is then polled only as a probe, exactly every ``ceil(1 / probe)`` slots. ``transient``
  failures (timeouts, 5xx, 429, refused connections) never retire. Any successful poll
  ends the streak and revives a retired URL at once; ``revive`` does it by hand. Failures
  never touch what the scheduler learned: a failed poll gives its learning no feedback, so
  a good URL that times out for an hour comes back with the same estimates.

The guard is not part of the scheduler's saved state: the bounds and caps come from the
store and settings at every start, and the failure streaks from the store's record of
failed polls (the service re-applies them). ``last`` (the slot of each URL's last
selection) restarts at the start slot, so the first gap after a restart is not checked
against ``upper``.

``limits()`` gives the bounds in force (pause, failures and retirement folded in) for
the allocation: the schedulers that allocate by an optimum (``bayes``, ``optimal``) solve
the constrained optimum with them; the others' wanted frequencies are projected on them
(``project``), and every scheduler's selection is then filtered by ``enforce``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from crawler.schedulers._fill import constrained_fill, proportional_curve
from crawler.schedulers._limits import Limits
from crawler.schedulers._realize import CreditArray

FloatArray = NDArray[np.float64]
IdArray = NDArray[np.int64]
IndexArray = NDArray[np.intp]
BoolArray = NDArray[np.bool_]

FailureKind = Literal["transient", "permanent", "gone"]
FAILURE_KINDS: tuple[FailureKind, ...] = ("transient", "permanent", "gone")

#: re-solve the projection of the wanted frequencies this often (slots) in between changes
PROJECT_EVERY = 32
#: at most this much stride credit is kept by a URL the guard turned away
_CREDIT_CEILING = 2.0
#: the per-row arrays, each with its dtype and the value of a new row (None: the slot):
#: group label (-1: none), bounds, pause, slot of the last selection, consecutive
#: failures (and of them the permanent ones), share when the streak began, retirement
_ROWS: dict[str, tuple[type[np.generic], float | int | bool | None]] = {
    "label": (np.int64, -1),
    "lower": (np.float64, 0.0),
    "upper": (np.float64, 1.0),
    "paused": (np.bool_, False),
    "last": (np.int32, None),
    "streak": (np.int32, 0),
    "permanent": (np.int32, 0),
    "base": (np.float64, 0.0),
    "retired": (np.bool_, False),
}


def classify_failure(status: int | None = None, error: str | None = None) -> FailureKind:
    """The kind of a failed poll: ``gone`` for 410; ``permanent`` for 404 and for a host
    that does not exist (error ``dns`` / ``nxdomain``); ``transient`` for the rest
    (timeouts, 5xx, 429, refused or reset connections, other 4xx such as 403)."""
    if status == 410:
        return "gone"
    if status == 404:
        return "permanent"
    if error is not None and error.lower() in ("dns", "nxdomain", "unknown_host"):
        return "permanent"
    return "transient"


class Guard:
    """The constraints and failure record of n rows (see the module docstring)."""

    def __init__(
        self,
        n: int,
        slot: int,
        *,
        backoff: float = 0.5,
        floor: float = 1e-3,
        retire_after: int = 3,
        probe: float = 1e-3,
    ) -> None:
        if not 0 < backoff < 1:
            raise ValueError(f"backoff must be in (0, 1), got {backoff!r}")
        if not 0 < floor <= 1 or not 0 < probe <= 1:
            raise ValueError("floor and probe must be polls per slot in (0, 1]")
        if retire_after < 1:
            raise ValueError(f"retire_after must be at least 1, got {retire_after!r}")
        self.backoff, self.floor, self.retire_after, self.probe = (
            float(backoff),
            float(floor),
            int(retire_after),
            float(probe),
        )
        self.label: IdArray
        self.lower: FloatArray
        self.upper: FloatArray
        self.paused: BoolArray
        self.last: NDArray[np.int32]
        self.streak: NDArray[np.int32]
        self.permanent: NDArray[np.int32]
        self.base: FloatArray
        self.retired: BoolArray
        #: the projection's per-row scale (``project``; empty until a projection is made)
        self._scale: FloatArray = np.ones(0)
        for name, (dtype, fill) in _ROWS.items():
            setattr(self, name, np.full(n, slot if fill is None else fill, dtype=dtype))
        self.caps: dict[int, float] = {}
        #: bumped on every change of what the allocation must respect
        self.version = 0
        self._dense: tuple[IndexArray, IdArray, FloatArray] | None = None
        #: each capped group's credit left by the last slot, by label (sorted)
        self._credit_labels: IdArray = np.empty(0, dtype=np.int64)
        self._credit_values: FloatArray = np.empty(0)
        self._limits: Limits | None = None
        self._projected_at = -1
        self._projected_version = -1
        self._active = False
        self._active_version = -1
        self._gap_cache: tuple[IndexArray, FloatArray] | None = None
        self._gap_version = -1

    # ----- rows -------------------------------------------------------------------------

    def insert(self, where: IndexArray, count: int, slot: int) -> None:
        """Rows for ``count`` new URLs at ``where`` (np.insert positions): no group, no
        bounds, no failures."""
        for name, (dtype, fill) in _ROWS.items():
            new = np.full(count, slot if fill is None else fill, dtype=dtype)
            setattr(self, name, np.insert(getattr(self, name), where, new))
        self._changed(groups=True)

    def delete(self, keep: BoolArray) -> None:
        """Drop the rows where ``keep`` is False."""
        for name in _ROWS:
            setattr(self, name, getattr(self, name)[keep])
        self._changed(groups=True)

    # ----- the operator's and the service's settings ------------------------------------

    def set_groups(self, rows: IndexArray, labels: ArrayLike) -> None:
        """Put rows in groups (integer labels >= 0; -1: no group)."""
        raw = np.asarray(labels)
        if raw.ndim == 0:
            raw = np.full(rows.size, raw)
        if raw.shape != rows.shape or (raw.size and not np.issubdtype(raw.dtype, np.integer)):
            raise ValueError("groups must be one integer label per id (-1: no group)")
        if np.any(raw < -1):
            raise ValueError("group labels must be >= 0 (or -1 for no group)")
        self.label[rows] = raw.astype(np.int64)
        self._changed(groups=True)

    def set_caps(self, caps: Mapping[int, float | None]) -> None:
        """Cap groups at some polls per slot (None: no cap)."""
        checked: dict[int, float | None] = {}
        for label, value in caps.items():
            if value is None:
                checked[int(label)] = None
                continue
            v = float(value)
            if not math.isfinite(v) or v <= 0:
                raise ValueError(
                    f"the cap of group {label} must be a positive number, got {value!r}"
                )
            checked[int(label)] = v
        for label, cap in checked.items():
            if cap is None:
                self.caps.pop(label, None)
            else:
                self.caps[label] = cap
        self._changed(groups=True)

    def set_bounds(
        self, rows: IndexArray, lower: ArrayLike | None, upper: ArrayLike | None
    ) -> None:
        """Per-row bounds in polls per slot (None keeps the current one)."""
        lo = self.lower[rows] if lower is None else _per_row(lower, rows.size, "lower")
        hi = self.upper[rows] if upper is None else _per_row(upper, rows.size, "upper")
        if np.any(lo > hi):
            raise ValueError("every lower bound must be at most its upper bound")
        self.lower[rows], self.upper[rows] = lo, hi
        self._changed()

    def set_paused(self, rows: IndexArray, paused: bool) -> None:
        self.paused[rows] = paused
        self._changed()

    # ----- failures ---------------------------------------------------------------------

    def fail(self, rows: IndexArray, kinds: list[FailureKind], shares: FloatArray) -> None:
        """Record failed polls; ``shares`` are the rows' polls per slot before the failure
        (the base of the back-off when a streak starts)."""
        for j, (row, kind) in enumerate(zip(rows.tolist(), kinds, strict=True)):
            if self.streak[row] == 0:
                self.base[row] = max(float(shares[j]), self.floor)
            self.streak[row] += 1
            if kind == "transient":
                self.permanent[row] = 0
            else:
                self.permanent[row] += 1
                if kind == "gone" or self.permanent[row] >= self.retire_after:
                    self.retired[row] = True
        self._changed()

    def succeed(self, rows: IndexArray) -> None:
        """Successful polls: their streaks end, retired ones come back."""
        if rows.size == 0:
            return
        failing = rows[(self.streak[rows] > 0) | self.retired[rows]]
        if failing.size == 0:
            return
        self.streak[failing] = 0
        self.permanent[failing] = 0
        self.retired[failing] = False
        self._changed()

    def set_probe(self, probe: float) -> None:
        """A retired URL's polls per slot from now on (in (0, 1])."""
        if not 0 < probe <= 1:
            raise ValueError("probe must be polls per slot in (0, 1]")
        self.probe = float(probe)
        self._changed()

    # ----- what the allocation respects -------------------------------------------------

    def limits(self) -> Limits:
        """The caps and bounds in force: pause, back-off and retirement folded in."""
        if self._limits is not None:
            return self._limits
        group, labels, cap = self._groups()
        failing = self.streak > 0
        if not (failing.any() or self.retired.any() or self.paused.any()):
            # nothing to fold in: the bounds as set (lower <= upper holds), not copies
            self._limits = Limits(group, labels, cap, self.lower, self.upper)
            return self._limits
        upper = self.upper.copy()
        if failing.any():
            backed = np.maximum(
                self.floor, self.base[failing] * self.backoff ** self.streak[failing]
            )
            upper[failing] = np.minimum(upper[failing], backed)
        upper[self.retired] = np.minimum(self.upper[self.retired], self.probe)
        upper[self.paused] = 0.0
        lower = np.minimum(self.lower, upper)
        lower[failing & ~self.retired] = 0.0  # a failing URL's minimum waits for its return
        lower[self.retired & ~self.paused] = upper[self.retired & ~self.paused]
        self._limits = Limits(group, labels, cap, lower, upper)
        return self._limits

    def active(self) -> bool:
        """Whether anything here constrains the allocation (nothing does: the scheduler
        behaves exactly as without a guard)."""
        if self._active_version != self.version:
            self._active = bool(
                self.caps
                or np.any(self.lower > 0)
                or np.any(self.upper < 1)
                or self.paused.any()
                or self.retired.any()
                or np.any(self.streak > 0)
            )
            self._active_version = self.version
        return self._active

    def project(self, shares: FloatArray, capacity: float, slot: int) -> FloatArray:
        """The wanted polls per slot, scaled to fit the caps, budget and bounds: per URL
        clip(t_h * shares, lower, upper), the largest such scaling (see
        ``constrained_fill`` with a proportional curve). Re-solved every ``PROJECT_EVERY``
        slots and on every change; in between the per-URL scale is reused."""
        if (
            self._projected_version != self.version
            or slot - self._projected_at >= PROJECT_EVERY
            or self._scale.size != shares.size
        ):
            limits = self.limits()
            fitted = constrained_fill(*proportional_curve(shares), capacity, limits).x
            with np.errstate(divide="ignore", invalid="ignore"):
                self._scale = np.where(shares > 0, fitted / shares, 1.0)
            self._projected_at, self._projected_version = slot, self.version
            return fitted
        limits = self.limits()
        return np.asarray(
            np.clip(shares * self._scale, limits.lower, limits.upper), dtype=np.float64
        )

    # ----- each slot --------------------------------------------------------------------

    def enforce(
        self, rows: IndexArray, slot: int, k: int, credit: CreditArray | None = None
    ) -> tuple[IndexArray, IndexArray]:
        """Filter a slot's picks (row positions, in the scheduler's order of preference):
        drop what is paused, too soon for its upper bound or over its host's credit, put the
        URLs that reached their lower bound's deadline first, keep at most k. Returns the
        kept rows and the dropped ones (for the caller to give their stride credit back).

        With ``credit`` (a stride realization's per-URL credits), polls left free by the
        dropped picks go to the other due URLs (credit >= 1) that are allowed, largest
        credit first; each pays 1 from its credit. Without it a stride scheduler would keep
        picking the backlog of a capped host, only to see it dropped again."""
        floored, max_gap = self._deadlines()
        allowed = rows[slot - self.last[rows] >= self._min_gap(rows)]
        forced = np.empty(0, dtype=np.intp)
        if floored.size:
            late = slot - self.last[floored] - max_gap
            due = np.flatnonzero(late >= 0)
            if due.size:
                forced = floored[due[np.argsort(-late[due], kind="stable")]]
                is_forced = np.zeros(self.label.size, dtype=bool)
                is_forced[forced] = True
                allowed = allowed[~is_forced[allowed]]
        order = np.concatenate([forced, allowed]).astype(np.intp)
        group, labels, cap = self._groups()
        host_credit = self._host_credit(labels, cap) if labels.size else None
        if host_credit is not None:
            order = self._within_credit(order, group, host_credit)
        kept = order[:k]
        taken = np.zeros(self.label.size, dtype=bool)
        taken[kept] = True
        dropped = rows[~taken[rows]]
        if credit is not None and kept.size < k:
            kept = self._refill(kept, k, taken, rows, credit, slot, group, host_credit)
        if host_credit is not None:
            self._keep_credit(labels, cap, host_credit)
        self.last[kept] = slot
        return kept, dropped

    def _refill(
        self,
        kept: IndexArray,
        k: int,
        taken: BoolArray,
        rows: IndexArray,
        credit: CreditArray,
        slot: int,
        group: IndexArray,
        host_credit: FloatArray | None,
    ) -> IndexArray:
        """Fill the polls left free with the allowed URLs of the largest stride credit (the
        due ones first, then those nearest to due: with an integer capacity a poll not made
        in its slot is lost for good). Each pays 1 from its credit."""
        need = k - kept.size
        taken[rows] = True
        many = 8 * need + 64
        # The largest credits first: stride credits spread over [0, 1), so those above
        # 1 - 4 many / n are about 4 many URLs, usually more than enough; ranking them
        # spares the passes over all n (all of them are ranked when they are too few).
        floor = 1.0 - 4.0 * many / max(credit.size, 1)
        pool = np.flatnonzero(credit >= floor) if floor > 0 else np.arange(credit.size)
        pool = pool[~taken[pool]]
        pool = pool[slot - self.last[pool] >= self._min_gap(pool)]
        if pool.size < many and floor > 0:
            pool = np.flatnonzero(~taken)
            pool = pool[slot - self.last[pool] >= self._min_gap(pool)]
        if pool.size == 0:
            return kept
        many = min(pool.size, many)
        if many < pool.size:
            pool = pool[np.argpartition(-credit[pool], many - 1)[:many]]
        pool = pool[np.argsort(-credit[pool], kind="stable")]
        if host_credit is not None:
            pool = self._within_credit(pool, group, host_credit, limit=need)
        extra = pool[:need]
        credit[extra] -= 1.0
        return np.concatenate([kept, extra]).astype(np.intp)

    def allowed(self, slot: int) -> BoolArray:
        """Rows that their upper bound (pause, back-off, retirement) lets be polled now."""
        allowed: BoolArray = (slot - self.last) >= self._min_gap(slice(None))
        return allowed

    def _min_gap(self, rows: IndexArray | slice) -> FloatArray:
        """The fewest slots between two polls of some rows (their upper bound)."""
        with np.errstate(divide="ignore"):
            out: FloatArray = np.ceil(1.0 / self.limits().upper[rows] - 1e-9)
        return out

    def _deadlines(self) -> tuple[IndexArray, FloatArray]:
        """The rows with a lower bound and for each the most slots before it is overdue
        (never before the upper bound's gap: lower == upper between whole slots). Kept
        until the limits change."""
        if self._gap_cache is None or self._gap_version != self.version:
            limits = self.limits()
            floored = np.flatnonzero(limits.lower > 0)
            with np.errstate(divide="ignore"):
                max_gap = np.maximum(
                    np.floor(1.0 / limits.lower[floored] + 1e-9), self._min_gap(floored)
                )
            self._gap_cache = (floored, max_gap)
            self._gap_version = self.version
        return self._gap_cache

    def _host_credit(self, labels: IdArray, cap: FloatArray) -> FloatArray:
        """This slot's credit per group: last slot's plus the cap, at most ``cap`` for an
        integer cap and ``cap + 1`` for another, so that floor(credit) <= ceil(cap). (A
        ceiling of ceil(cap) threw away the fraction carried over: a busy host capped at
        1.98 got 1, 2, 1, 2, ... polls, 1.5 per slot.)"""
        credit = self._credit_array(labels)
        finite = np.where(np.isfinite(cap), cap, 1.0)
        whole = np.abs(finite - np.round(finite)) < 1e-9
        ceiling = np.where(whole, np.round(finite), finite + 1.0)
        return np.where(np.isfinite(cap), np.minimum(credit + cap, ceiling), np.inf)

    @staticmethod
    def _within_credit(
        order: IndexArray, group: IndexArray, credit: FloatArray, limit: int | None = None
    ) -> IndexArray:
        """Keep, in order, at most floor(credit) rows of each capped group, and at most
        ``limit`` rows in all (the credit is lowered by what is kept)."""
        if order.size == 0:
            return order
        g = group[order]
        keep = np.ones(order.size, dtype=bool)
        idx = np.flatnonzero(g >= 0)
        if idx.size:
            gs = g[idx]
            ranked = np.argsort(gs, kind="stable")
            sorted_g = gs[ranked]
            start = np.searchsorted(sorted_g, sorted_g, side="left")
            rank = np.empty(idx.size, dtype=np.int64)
            rank[ranked] = np.arange(idx.size) - start
            keep[idx] = rank < np.floor(credit[gs] + 1e-9)
        if limit is not None:
            keep &= np.cumsum(keep) <= limit
        if idx.size:
            credit -= np.bincount(g[keep & (g >= 0)], minlength=credit.size)
        return order[keep]

    def _keep_credit(self, labels: IdArray, cap: FloatArray, credit: FloatArray) -> None:
        """Store the groups' credit left after this slot (``credit`` is already net of
        what ``_within_credit`` kept)."""
        self._credit_values = np.where(np.isfinite(cap), credit, 0.0)
        self._credit_labels = labels

    def cap_load(self, shares: FloatArray) -> tuple[IdArray, FloatArray, FloatArray]:
        """Per capped group: its label, its cap and the polls per slot ``shares`` give it."""
        group, labels, cap = self._groups()
        grouped = group >= 0
        load = np.bincount(group[grouped], shares[grouped], minlength=labels.size)
        limited = np.isfinite(cap)
        return labels[limited], cap[limited], load[limited].astype(np.float64)

    # ----- internals --------------------------------------------------------------------

    def _credit_array(self, labels: IdArray) -> FloatArray:
        """The groups' credit left by the last slot, aligned with ``labels`` (0 for a group
        new since then)."""
        if self._credit_labels is labels:
            return self._credit_values.copy()
        out = np.zeros(labels.size)
        known = self._credit_labels
        if known.size and labels.size:
            at = np.minimum(np.searchsorted(known, labels), known.size - 1)
            same = known[at] == labels
            out[same] = self._credit_values[at[same]]
        return out

    def _changed(self, *, groups: bool = False) -> None:
        self.version += 1
        self._limits = None
        if groups:
            self._dense = None

    def _groups(self) -> tuple[IndexArray, IdArray, FloatArray]:
        """Per row the index of its group (-1: none), the labels and each group's cap."""
        if self._dense is None:
            labels = np.unique(self.label[self.label >= 0])
            group = np.full(self.label.size, -1, dtype=np.intp)
            grouped = self.label >= 0
            group[grouped] = np.searchsorted(labels, self.label[grouped])
            cap = np.array([self.caps.get(int(label), np.inf) for label in labels.tolist()])
            self._dense = (group, labels.astype(np.int64), cap.astype(np.float64))
        return self._dense


def refund(credit: CreditArray, rows: IndexArray) -> None:
    """Give a turned-away URL its stride credit back (at most ``_CREDIT_CEILING``)."""
    if rows.size:
        credit[rows] = np.minimum(credit[rows] + 1.0, _CREDIT_CEILING)


def _per_row(values: ArrayLike, count: int, what: str) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(count, float(arr))
    if arr.shape != (count,):
        raise ValueError(f"{what} bounds must have one value per id")
    if not np.all(np.isfinite(arr)) or np.any((arr < 0) | (arr > 1)):
        raise ValueError(f"{what} bounds must be polls per slot in [0, 1]")
    return arr
