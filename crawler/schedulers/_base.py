"""The scheduler API shared by every scheduler (docs/schedulers.md, "The scheduler contract").

A scheduler keeps one row per watched URL in parallel NumPy arrays, sorted by URL id.
Subclasses name their own per-URL arrays in ``_url_fields`` (each a NumPy array attribute
``_<field>``); this base class inserts, deletes, validates, saves and restores them.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from crawler.schedulers._guard import FAILURE_KINDS, FailureKind, Guard, refund
from crawler.schedulers._realize import (
    REALIZATIONS,
    CreditArray,
    poll_shares,
    sampling_pick,
    stride_pick,
)
from crawler.schedulers._state import URL_PREFIX, SchedulerState

IdArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
IndexArray = NDArray[np.intp]
#: what ``state()``/``take_delta()`` return and ``from_state``/``restore`` take
State = SchedulerState


def as_id_array(ids: ArrayLike, what: str = "ids", *, check_repeats: bool = True) -> IdArray:
    """Validate and convert URL ids: a 1-D array of distinct integers (``check_repeats``
    False: the caller checks that they are distinct)."""
    arr = np.asarray(ids)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a 1-D array of integers")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if (
            np.issubdtype(arr.dtype, np.floating)
            and np.all(np.isfinite(arr))
            and np.all(arr == np.round(arr))
        ):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{what} must be integers, got dtype {arr.dtype}")
    out = arr.astype(np.int64, copy=False)
    if check_repeats:
        _check_repeats(out, what)
    return out


def _check_repeats(ids: IdArray, what: str) -> None:
    if ids.size > 1:
        ordered = np.sort(ids)  # cheaper than np.unique for the per-slot feedback check
        if np.any(ordered[1:] == ordered[:-1]):
            raise ValueError(f"{what} contains repeated ids")


class Scheduler(ABC):
    """Decides which URLs to poll in each slot and learns from the outcomes.

    Subclasses implement ``_wanted`` (the frequencies) and ``_learn`` (the feedback rule),
    or override ``_choose`` to pick the slot's URLs themselves.
    """

    name: ClassVar[str] = ""
    needs_rates: ClassVar[bool] = False
    #: per-URL arrays of the subclass, each stored as attribute ``_<field>``
    _url_fields: ClassVar[tuple[str, ...]] = ()
    #: plain scalar attributes of the subclass saved in state()
    _scalar_fields: ClassVar[tuple[str, ...]] = ()
    #: per-URL caches (a subset of ``_url_fields``) that ``_after_restore`` rebuilds from the
    #: rest; left out of ``take_delta()`` and optional in ``from_state()``
    _derived_fields: ClassVar[tuple[str, ...]] = ()
    #: per-URL fields added by a later release: a state saved before has none, and
    #: ``from_state()`` starts them at zero
    _added_fields: ClassVar[tuple[str, ...]] = ()
    #: whether the stride credit in ``_credit`` drives the selection (then polls the
    #: constraints turn away are given to other due URLs by their credit)
    _uses_credit: ClassVar[bool] = True
    #: whether the wanted frequencies already solve the constrained problem (then they are
    #: not projected on the constraints again)
    _solves_constraints: ClassVar[bool] = False

    def __init__(
        self, capacity: float, *, seed: int | None = None, realization: str = "stride"
    ) -> None:
        self.capacity = _check_capacity(capacity)
        if realization not in REALIZATIONS:
            raise ValueError(
                f"unknown realization {realization!r}: choose one of {', '.join(REALIZATIONS)}"
            )
        self.realization = realization
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._ids: IdArray = np.empty(0, dtype=np.int64)
        self._importance: FloatArray = np.empty(0, dtype=np.float64)
        self._rate: FloatArray = np.empty(0, dtype=np.float64)
        #: stride credit (float64; a subclass may keep it in float32 to save memory)
        self._credit: CreditArray = np.empty(0, dtype=np.float64)
        self._dirty: BoolArray = np.empty(0, dtype=bool)
        self._budget = 0.0
        self._slot = 0
        self._removed_since_select: set[int] = set()
        # Row positions of the last selection, in its order (None after add/remove): lets
        # feedback() find its rows among ~C instead of searching all n ids. Sorted only when
        # a feedback is not exactly the selection (sorting 10,000 rows cost 0.25-0.4 ms a
        # slot at a million URLs, and the common feedback never needs it).
        self._selected_rows: IndexArray | None = None
        self._selected_sorted: IndexArray | None = None
        self._selected_ids: IdArray = np.empty(0, dtype=np.int64)
        # Host caps, bounds and failures (None until one is set: then nothing changes).
        # Not part of state(): they come from the store and settings at every start.
        self._guard: Guard | None = None
        #: polls per slot of a retired URL (its probe), given to the guard when it exists
        self._probe = 1e-3
        #: the lowest polls per slot the failure back-off caps a failing URL at
        self._failure_floor = 1e-3
        #: (ids sorted, slots): last selections kept from a scheduler this one replaced
        #: (``keep_selections``), for the guard's rows that enter its table
        self._kept_selections: tuple[IdArray, NDArray[np.int32]] = (
            np.empty(0, dtype=np.int64),
            np.empty(0, dtype=np.int32),
        )

    # ----- public API -------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of watched URLs."""
        return int(self._ids.size)

    @property
    def slot(self) -> int:
        """Slots selected so far (``select()`` calls, across restores)."""
        return self._slot

    def params(self) -> dict[str, Any]:
        """The constructor arguments that recreate this scheduler (JSON-serializable)."""
        return {"capacity": self.capacity, "seed": self.seed, "realization": self.realization}

    def set_capacity(self, capacity: float) -> None:
        """Change the polls per slot from the next slot on."""
        self.capacity = _check_capacity(capacity)

    def add(
        self,
        ids: ArrayLike,
        importance: ArrayLike | None = None,
        rates: ArrayLike | None = None,
    ) -> None:
        """Watch new URLs. ``importance`` in (0, 1] (default 1); ``rates`` are change
        probabilities per slot, required by the oracle schedulers and ignored by the rest."""
        new_ids = as_id_array(ids)
        count = new_ids.size
        weights = _check_unit_interval(importance, count, "importance", default=1.0)
        if rates is None:
            if self.needs_rates:
                raise ValueError(
                    f"scheduler {self.name!r} is an oracle: add() needs the true change "
                    "probabilities as rates="
                )
            change = np.full(count, np.nan)
        else:
            change = _check_probabilities(rates, count)
        if count == 0:
            return
        present = self._positions(new_ids, strict=False)
        if np.any(present >= 0):
            dup = new_ids[present >= 0][:5].tolist()
            raise ValueError(f"ids already watched: {dup}")
        order = np.argsort(new_ids, kind="stable")
        new_ids, weights, change = new_ids[order], weights[order], change[order]
        initial = self._initial_values(count, weights, change)
        initial["importance"] = weights
        initial["rate"] = change
        initial["credit"] = self._rng.random(count)  # random phase: no start-up stall
        initial["dirty"] = np.ones(count, dtype=bool)
        where = np.searchsorted(self._ids, new_ids)
        self._ids = np.insert(self._ids, where, new_ids)
        for field in self._all_url_fields():
            current = getattr(self, "_" + field)
            setattr(self, "_" + field, np.insert(current, where, initial[field]))
        if self._guard is not None:
            self._guard.insert(where, count, self._slot)
        self._removed_since_select.difference_update(new_ids.tolist())
        self._selected_rows = None
        self._after_add()

    def set_importance(self, ids: ArrayLike, importance: ArrayLike) -> None:
        """Change the importance of watched URLs (each in (0, 1]); learning is kept."""
        which = as_id_array(ids)
        weights = _check_unit_interval(importance, which.size, "importance", default=1.0)
        pos = self._positions(which, strict=True)
        self._importance[pos] = weights
        self._dirty[pos] = True
        self._after_restore()  # rebuild whatever the subclass derives from the importance

    def remove(self, ids: ArrayLike) -> None:
        """Stop watching URLs; ids not watched are ignored."""
        gone = as_id_array(ids)
        pos = self._positions(gone, strict=False)
        pos = pos[pos >= 0]
        if pos.size == 0:
            return
        keep = np.ones(self._ids.size, dtype=bool)
        keep[pos] = False
        self._before_remove(keep)
        self._removed_since_select.update(self._ids[pos].tolist())
        self._ids = self._ids[keep]
        for field in self._all_url_fields():
            setattr(self, "_" + field, getattr(self, "_" + field)[keep])
        if self._guard is not None:
            self._guard.delete(keep)
        self._selected_rows = None
        self._after_remove()

    def warm_up(self) -> None:
        """Make the first ``select`` and ``feedback`` as quick as the next ones: a
        scheduler with compiled loops compiles (or loads) them for its arrays' types here,
        where a service can run it before its first slot and off its event loop. Changes
        nothing; by default there is nothing to do."""

    def select(self) -> IdArray:
        """This slot's URLs to poll: about ``capacity`` distinct ids."""
        self._removed_since_select.clear()
        self._budget += self.capacity
        most = math.ceil(self.capacity - 1e-9)
        k = min(math.floor(self._budget + 1e-9), most, self._ids.size)
        self._slot += 1
        if k <= 0:
            self._selected_rows = None
            return np.empty(0, dtype=np.int64)
        chosen = self._choose(k)
        guard = self._guard
        if guard is not None and guard.active():
            credit = self._credit if self._uses_credit and self.realization == "stride" else None
            chosen, dropped = guard.enforce(chosen, self._slot, k, credit)
            refund(self._credit, dropped)
        elif guard is not None:
            guard.mark(chosen, self._slot)
        # Polls a realization could not place (no URL due yet) carry over to later slots,
        # never more than one slot's worth, and never beyond ceil(C) polls in a slot.
        self._budget = min(self._budget - chosen.size, float(most))
        self._selected_rows = chosen
        self._selected_sorted = None
        selected: IdArray = self._ids[chosen]
        self._selected_ids = selected
        return selected.copy()

    def allowed(self, ids: ArrayLike) -> IdArray:
        """Those of ``ids`` watched and that the guard would let be added to this slot's
        selection (``add_to_selection``), without marking them: for a caller choosing one
        of several candidates (a gained site's probe among the site's URLs)."""
        out, _ = self._allowed_rows(ids)
        return out

    def add_to_selection(self, ids: ArrayLike) -> IdArray:
        """Polls the caller adds to this slot's selection (a site just gained, a URL whose
        sitemap says it changed): those of ``ids`` watched and that the guard lets be
        polled in this slot (not paused, not within their upper bound's gap), marked as
        selected in it, so that the next selections count their bounds from it. Returns
        them."""
        out, rows = self._allowed_rows(ids)
        if self._guard is not None:
            self._guard.mark(rows, self._slot)
        return out

    def _allowed_rows(self, ids: ArrayLike) -> tuple[IdArray, NDArray[np.intp]]:
        """The watched ids of ``ids`` the guard lets be polled in this slot, and their rows."""
        extra = as_id_array(ids, check_repeats=False)
        pos = self._positions(extra, strict=False)
        watched = pos >= 0
        extra, rows = extra[watched], pos[watched].astype(np.intp)
        guard = self._guard
        if guard is None or not rows.size:
            return extra, rows
        allowed = guard.may_poll(rows, self._slot)
        return extra[allowed], rows[allowed]

    def feedback(
        self, ids: ArrayLike, hits: ArrayLike, changed_ago: ArrayLike | None = None
    ) -> None:
        """Outcomes of this slot's successful polls: ``hits[j]`` is True if URL ``ids[j]``
        changed since its previous poll. Failed polls are simply left out. ``changed_ago``
        (optional, one per id): slots since the polled version's last change, as the
        page's believed ``Last-Modified`` says (NaN: unknown); a scheduler that learns
        from hits and misses alone ignores it."""
        polled = as_id_array(ids, check_repeats=False)
        # feedback for exactly the selection (the common case) has distinct ids already
        if not (
            self._selected_rows is not None
            and polled.size == self._selected_ids.size
            and np.array_equal(polled, self._selected_ids)
        ):
            _check_repeats(polled, "ids")
        outcome = np.asarray(hits)
        if outcome.shape != polled.shape:
            raise ValueError("ids and hits must have the same length")
        if outcome.size and outcome.dtype != np.bool_ and not np.all(np.isin(outcome, (0, 1))):
            raise ValueError("hits must be booleans")
        outcome = outcome.astype(bool)
        ago = None if changed_ago is None else _check_ages(changed_ago, polled.size)
        pos = self._selected_positions(polled)
        if pos is None:
            pos = self._positions(polled, strict=False)
        unknown = pos < 0
        if np.any(unknown):
            stray = [i for i in polled[unknown].tolist() if i not in self._removed_since_select]
            if stray:
                raise ValueError(f"feedback for ids that are not watched: {stray[:5]}")
            pos, outcome = pos[~unknown], outcome[~unknown]
            ago = None if ago is None else ago[~unknown]
        if pos.size:
            pos = pos.astype(np.intp)
            self._dirty[pos] = True
            across = None if self._guard is None else self._guard.succeed(pos)
            if across is not None and ago is not None:
                across &= ~np.isfinite(ago)  # a believed Last-Modified dates the change
            if across is not None and across.any():
                # The first good answer after failed polls (or a pause) compares the page
                # across all of them: a change in that gap, which may be hundreds of slots,
                # says little of how often the page changes, and counted as one change in
                # the whole gap it halved the learned rate of a page back from an outage
                # (and its polls with it). Not learned: the next interval starts here.
                self._restart_intervals(pos[across])
                keep = ~across
                pos, outcome = pos[keep], outcome[keep]
                ago = None if ago is None else ago[keep]
            if not pos.size:
                return
            if ago is None:
                self._learn(pos, outcome)
            else:
                self._learn_changed(pos, outcome, ago)

    def first_polls(self, ids: ArrayLike, changed_ago: ArrayLike) -> None:
        """URLs polled for the first time (their baseline: nothing to compare with, so no
        hit or miss), with the slots since the version they showed last changed (NaN:
        unknown), as the page's believed ``Last-Modified`` says. A scheduler that learns
        from hits and misses alone ignores it; ids no longer watched are skipped."""
        polled = as_id_array(ids)
        ago = _check_ages(changed_ago, polled.size)
        known = np.isfinite(ago)
        if not known.any():
            return
        polled, ago = polled[known], ago[known]
        pos = self._positions(polled, strict=False)
        watched = pos >= 0
        if watched.any():
            self._learn_first(pos[watched].astype(np.intp), ago[watched])

    # ----- constraints: host caps, bounds, pause, failures (not saved in state()) --------

    def set_groups(self, ids: ArrayLike, groups: ArrayLike) -> None:
        """Put URLs in host groups: one integer label >= 0 per id (-1: no group)."""
        pos = self._positions(as_id_array(ids), strict=True)
        self._guarded().set_groups(pos, groups)
        self._constraints_changed()

    def set_group_caps(self, caps: Mapping[int, float | None]) -> None:
        """Cap host groups at some polls per slot (label -> cap; None removes a cap). A
        slot never polls more than ``ceil(cap)`` URLs of a group, and over time at most
        ``cap`` per slot on average."""
        self._guarded().set_caps(caps)
        self._constraints_changed()

    def set_bounds(
        self, ids: ArrayLike, lower: ArrayLike | None = None, upper: ArrayLike | None = None
    ) -> None:
        """Per-URL bounds in polls per slot, each in [0, 1] (None keeps the current one):
        at least ``lower`` (a poll at least every ``floor(1 / lower)`` slots) and at most
        ``upper`` (never two polls closer than ``ceil(1 / upper)`` slots; 0 never)."""
        pos = self._positions(as_id_array(ids), strict=True)
        self._guarded().set_bounds(pos, lower, upper)
        self._constraints_changed()

    def pause(self, ids: ArrayLike) -> None:
        """Stop polling URLs without forgetting anything about them."""
        pos = self._positions(as_id_array(ids), strict=True)
        self._guarded().set_paused(pos, True)
        self._constraints_changed()

    def resume(self, ids: ArrayLike) -> None:
        """Poll paused URLs again, with their bounds and learning as they were."""
        pos = self._positions(as_id_array(ids), strict=True)
        self._guarded().set_paused(pos, False)
        self._constraints_changed()

    def report_failures(self, ids: ArrayLike, kinds: FailureKind | Sequence[FailureKind]) -> None:
        """Failed polls of this slot: ``transient`` (timeout, 5xx, 429, refused),
        ``permanent`` (404, unknown host) or ``gone`` (410); see ``classify_failure``.
        Consecutive failures back a URL's frequency off exponentially to a floor; ``gone``
        or repeated ``permanent`` failures retire it (then only probed now and then); a
        successful poll revives it. What the scheduler learned is never touched. Ids no
        longer watched are ignored."""
        failed = as_id_array(ids)
        kind_list = [kinds] * failed.size if isinstance(kinds, str) else list(kinds)
        if len(kind_list) != failed.size:
            raise ValueError("ids and kinds must have the same length")
        bad = [k for k in kind_list if k not in FAILURE_KINDS]
        if bad:
            raise ValueError(f"unknown failure kind {bad[0]!r}: choose one of {FAILURE_KINDS}")
        pos = self._positions(failed, strict=False)
        watched = pos >= 0
        if not watched.any():
            return
        pos = pos[watched].astype(np.intp)
        kind_list = [k for k, ok in zip(kind_list, watched.tolist(), strict=True) if ok]
        guard = self._guarded()
        guard.fail(pos, kind_list, self._share_of(pos))
        self._constraints_changed()

    def revive(self, ids: ArrayLike, *, answered: bool = False) -> None:
        """End the failure streaks of URLs and bring retired ones back at once. Their next
        good answer is not learned from (it compares the page across the failed polls:
        see ``feedback``), unless ``answered``: they have just given a good answer that
        has no feedback (a first one, a baseline), and the next is compared with it."""
        pos = self._positions(as_id_array(ids), strict=True)
        self._guarded().revive(pos, answered=answered)
        if answered:
            self._dirty[pos] = True
            self._restart_intervals(pos)
        self._constraints_changed()

    def set_probe(self, polls_per_slot: float) -> None:
        """How often a retired URL is polled as a probe, in polls per slot (in (0, 1]; the
        default 0.001 is one probe every 1,000 slots)."""
        if not 0 < polls_per_slot <= 1:
            raise ValueError(f"probe must be polls per slot in (0, 1], got {polls_per_slot!r}")
        self._probe = float(polls_per_slot)
        if self._guard is not None and self._guard.probe != self._probe:
            self._guard.set_probe(self._probe)
            self._constraints_changed()

    def set_failure_floor(self, polls_per_slot: float) -> None:
        """The floor of the failure back-off, in polls per slot (in (0, 1]; the default
        0.001: a URL that keeps timing out is still polled about every 1,000 slots)."""
        if not 0 < polls_per_slot <= 1:
            raise ValueError(
                f"failure floor must be polls per slot in (0, 1], got {polls_per_slot!r}"
            )
        self._failure_floor = float(polls_per_slot)
        if self._guard is not None and self._guard.floor != self._failure_floor:
            self._guard.set_floor(self._failure_floor)
            self._constraints_changed()

    def failing(self) -> tuple[IdArray, NDArray[np.int32], BoolArray]:
        """The URLs with failures: ids, consecutive failures and whether retired."""
        if self._guard is None:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32), np.empty(0, bool)
        rows, streak, retired = self._guard.failing_rows()
        return self._ids[rows], streak, retired

    def selections(self) -> tuple[IdArray, NDArray[np.int32]]:
        """(ids, slots): the slot in which each URL the guard keeps a record of (a bound,
        a pause, a failure streak) was last selected. Not part of ``state()``: a scheduler
        rebuilt from this one's state is given them with ``keep_selections``."""
        guard = self._guard
        if guard is None or not guard.rows.size:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
        return self._ids[guard.rows].copy(), guard.last.copy()

    def keep_selections(self, ids: ArrayLike, slots: ArrayLike) -> None:
        """The slots in which some URLs were last selected by a scheduler this one replaces
        (``selections``): a URL's upper bound counts its gap from the later of that and its
        last poll known here. Without them a rebuilt scheduler's guard counts from the last
        poll the scheduler learned from, and a URL selected since without feedback (a
        first poll, a failure, a poll still in flight) could be polled again within its
        bound. Ids not watched now are kept for when they are."""
        new_ids = as_id_array(ids)
        new_slots = np.asarray(slots, dtype=np.int32).reshape(-1)
        if new_ids.size != new_slots.size:
            raise ValueError("ids and slots must have the same length")
        if not new_ids.size:
            return
        all_ids = np.concatenate([self._kept_selections[0], new_ids])
        all_slots = np.concatenate([self._kept_selections[1], new_slots])
        order = np.lexsort((-all_slots.astype(np.int64), all_ids))  # by id, latest first
        all_ids, all_slots = all_ids[order], all_slots[order]
        first = np.ones(all_ids.size, dtype=bool)
        first[1:] = all_ids[1:] != all_ids[:-1]
        self._kept_selections = (all_ids[first], all_slots[first])
        if self._guard is not None:
            pos = self._positions(new_ids, strict=False)
            watched = pos >= 0
            self._guard.remember(pos[watched].astype(np.intp), new_slots[watched])

    def bounds(self) -> tuple[IdArray, FloatArray, FloatArray]:
        """Every URL's id and the bounds in force (polls per slot): pause, failure back-off
        and retirement folded in."""
        if self._guard is None:
            n = self._ids.size
            return self._ids.copy(), np.zeros(n), np.ones(n)
        limits = self._guard.limits()
        return self._ids.copy(), limits.lower.copy(), limits.upper.copy()

    def cap_status(self) -> dict[int, tuple[float, float]]:
        """Per capped group: (cap, polls per slot the scheduler plans for it). The cap
        binds where the plan reaches it."""
        if self._guard is None or self._ids.size == 0:
            return {}
        labels, cap, load = self._guard.cap_load(self.planned())
        return {
            int(label): (float(c), float(v))
            for label, c, v in zip(labels.tolist(), cap.tolist(), load.tolist(), strict=True)
        }

    def planned(self) -> FloatArray:
        """Polls per slot each URL is planned to get (in id order): the wanted frequencies
        scaled to the capacity and, when constraints are set, fitted to them."""
        x = np.asarray(self._wanted(), dtype=np.float64)
        shares = poll_shares(x, float(x.sum()), self.capacity)
        return self._fitted(shares)

    def wanted_total(self) -> float:
        """sum(x) over the watched URLs: the knapsack's fill (0 when none is watched)."""
        return self._wanted_total() if self._ids.size else 0.0

    def importances(self) -> tuple[IdArray, FloatArray]:
        """Every watched URL's id and importance (``add``, ``set_importance``)."""
        return self._ids.copy(), self._importance.copy()

    def frequencies(self) -> tuple[IdArray, FloatArray]:
        """Every watched URL's id and wanted polls per slot x_i."""
        return self._ids.copy(), np.asarray(self._wanted(), dtype=np.float64).copy()

    def state(self) -> SchedulerState:
        """All that resumes this scheduler: the scalars, the ids and every per-URL array
        (aligned with ``ids``; see ``SchedulerState``)."""
        rows = {f: getattr(self, "_" + f).copy() for f in self._all_url_fields() if f != "dirty"}
        return self._make_state(self._ids.copy(), self._with_rate(rows, self._ids.size))

    def _make_state(self, ids: IdArray, rows: dict[str, NDArray[Any]]) -> SchedulerState:
        return SchedulerState(
            scheduler=self.name,
            params=json.dumps(self.params(), sort_keys=True),
            rng=json.dumps(self._rng.bit_generator.state),
            budget=self._budget,
            slot=self._slot,
            ids=ids,
            rows=rows,
            extra={field: getattr(self, "_" + field) for field in self._scalar_fields},
        )

    def take_delta(self) -> SchedulerState:
        """What changed since the last call, for incremental persistence: the learning rows
        (``url_*`` arrays, no realization credit and no derived caches) of the URLs added or
        given feedback since then, and every scalar. Merging the deltas of a run row by row
        (a later row replaces an earlier one; rows of removed ids dropped) gives a state that
        ``from_state`` accepts: it resumes the learning exactly, with fresh stride phases."""
        changed = np.flatnonzero(self._dirty)
        self._dirty[:] = False
        rows = {f: getattr(self, "_" + f)[changed] for f in self._persistent_url_fields()}
        return self._make_state(self._ids[changed], self._with_rate(rows, changed.size))

    def persistent_fields(self) -> tuple[str, ...]:
        """The ``url_*`` keys that ``take_delta()`` carries."""
        saved = self._persistent_url_fields()
        if "rate" not in saved:
            saved = (saved[0], "rate", *saved[1:])
        return tuple(URL_PREFIX + f for f in saved)

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Scheduler:
        """Rebuild a scheduler saved by ``state()`` (or merged from ``take_delta()``); a
        ``SchedulerState`` or its flat mapping form."""
        st = SchedulerState.from_mapping(state)
        obj = cls(**json.loads(st.params))
        ids = as_id_array(st.ids, "state ids")
        if ids.size > 1 and np.any(np.diff(ids) <= 0):
            raise ValueError("corrupt scheduler state: ids are not strictly increasing")
        obj._ids = ids.copy()
        optional = {"credit", "dirty", *obj._derived_fields, *obj._added_fields}
        for field in obj._all_url_fields():
            saved = st.rows.get(field)
            if saved is None and field in optional:
                dtype = getattr(obj, "_" + field).dtype
                fill = obj._rng.random(ids.size) if field == "credit" else np.zeros(ids.size)
                setattr(obj, "_" + field, fill.astype(dtype))
                continue
            if saved is None:
                raise ValueError(f"corrupt scheduler state: {URL_PREFIX + field} is missing")
            arr = np.asarray(saved).copy()
            if arr.shape != ids.shape:
                raise ValueError(f"corrupt scheduler state: {URL_PREFIX}{field} does not match ids")
            setattr(obj, "_" + field, arr.astype(getattr(obj, "_" + field).dtype, copy=False))
        for field in obj._scalar_fields:
            if field not in st.extra:
                raise ValueError(f"corrupt scheduler state: {field} is missing")
            setattr(obj, "_" + field, st.extra[field])
        obj._budget = st.budget
        obj._slot = st.slot
        obj._rng.bit_generator.state = json.loads(st.rng)
        obj._after_restore()
        return obj

    # ----- for subclasses ---------------------------------------------------------------

    @abstractmethod
    def _initial_values(
        self, count: int, importance: FloatArray, rates: FloatArray
    ) -> dict[str, NDArray[Any]]:
        """Initial values of the subclass's per-URL fields for ``count`` new URLs."""

    @abstractmethod
    def _wanted(self) -> FloatArray:
        """The wanted frequency x_i of every URL, in id order."""

    @abstractmethod
    def _learn(self, pos: IndexArray, hits: BoolArray) -> None:
        """Apply one slot's outcomes; ``pos`` are row positions, distinct."""

    def _learn_changed(self, pos: IndexArray, hits: BoolArray, ago: FloatArray) -> None:
        """``_learn`` with each poll's slots since its version's last change (NaN:
        unknown); a scheduler that does not use them learns the hits and misses alone."""
        self._learn(pos, hits)

    def _learn_first(self, pos: IndexArray, ago: FloatArray) -> None:
        """Learn from first polls' version ages (finite, >= 0; rows distinct): see
        ``first_polls``. Nothing by default."""

    def _restart_intervals(self, pos: IndexArray) -> None:
        """Good answers in this slot that are not learned from (the first after failed
        polls: see ``feedback``): a scheduler that measures the interval between a URL's
        polls starts the next one here. Nothing by default."""

    def _wanted_total(self) -> float:
        """sum(x); subclasses that keep it incrementally override this."""
        return float(np.sum(self._wanted()))

    def _choose(self, k: int) -> IndexArray:
        """Row positions of this slot's k polls, by the configured realization."""
        x = self._wanted()
        if self.realization == "sampling":
            return sampling_pick(self._fitted(x), k, self._rng)
        shares = poll_shares(x, self._wanted_total(), self.capacity)
        return stride_pick(self._credit, self._fitted(shares), k)

    def _fitted(self, shares: FloatArray) -> FloatArray:
        """Poll shares fitted to the caps and bounds in force (unchanged without any)."""
        guard = self._guard
        if guard is None or self._solves_constraints or not guard.active():
            return shares
        return guard.project(shares, self.capacity, self._slot)

    def _guarded(self) -> Guard:
        if self._guard is None:
            self._guard = Guard(
                self._ids.size,
                self._slot,
                probe=self._probe,
                floor=self._failure_floor,
                seen=self._last_selected,
            )
        return self._guard

    def _last_selected(self, rows: IndexArray) -> NDArray[np.int32] | None:
        """The slot some rows entering the guard's table were last polled or selected in:
        the later of the scheduler's record and the selections kept from a scheduler this
        one replaced (None: unknown, see ``_last_polled``)."""
        last = self._last_polled(rows)
        kept_ids, kept_slots = self._kept_selections
        if last is None or not kept_ids.size:
            return last
        ids = self._ids[rows]
        at = np.minimum(np.searchsorted(kept_ids, ids), kept_ids.size - 1)
        hit = kept_ids[at] == ids
        if hit.any():
            last = np.array(last, dtype=np.int32)
            last[hit] = np.maximum(last[hit], kept_slots[at[hit]])
        return last

    def _last_polled(self, rows: IndexArray) -> NDArray[np.int32] | None:
        """The slot of some rows' last poll, for schedulers that keep it (None: unknown;
        the guard then counts a newly bounded URL's gap from the latest slot)."""
        return None

    def _share_of(self, pos: IndexArray) -> FloatArray:
        """Polls per slot of some rows under the current plan."""
        return self.planned()[pos]

    def _constraints_changed(self) -> None:
        """Hook: caps, bounds, pause or failures changed (re-plan the allocation)."""

    def _after_add(self) -> None:
        """Hook: rows were inserted."""

    def _before_remove(self, keep: BoolArray) -> None:
        """Hook: rows where ``keep`` is False are about to be deleted."""

    def _after_remove(self) -> None:
        """Hook: rows were deleted."""

    def _after_restore(self) -> None:
        """Hook: rebuild derived values after from_state()."""

    # ----- helpers ----------------------------------------------------------------------

    def _all_url_fields(self) -> tuple[str, ...]:
        # Only an oracle keeps the true change probabilities: for the others they would be
        # 8 bytes per URL of NaN (saved states still carry the field, see _with_rate).
        if self.needs_rates:
            return ("importance", "rate", "credit", "dirty", *self._url_fields)
        return ("importance", "credit", "dirty", *self._url_fields)

    def _with_rate(self, rows: dict[str, NDArray[Any]], count: int) -> dict[str, NDArray[Any]]:
        """Saved rows with the ``rate`` field in its place (NaN for a scheduler that does
        not keep it): the saved format is the same for every scheduler."""
        if "rate" in rows:
            return rows
        out = {"importance": rows.pop("importance"), "rate": np.full(count, np.nan)}
        out.update(rows)
        return out

    def _persistent_url_fields(self) -> tuple[str, ...]:
        skip = {"credit", "dirty", *self._derived_fields}
        return tuple(f for f in self._all_url_fields() if f not in skip)

    def _touch(self, pos: IndexArray) -> None:
        """Mark rows changed outside ``feedback`` (for ``take_delta``)."""
        self._dirty[pos] = True

    def _selected_positions(self, ids: IdArray) -> IndexArray | None:
        """Row positions of ids if all were in the last selection (else None); the same
        answer as ``_positions``, found among the selected rows only."""
        rows = self._selected_rows
        if rows is None or ids.size == 0 or rows.size == 0:
            return None
        # the common case: feedback for exactly the selection, in its order
        if ids.size == self._selected_ids.size and np.array_equal(ids, self._selected_ids):
            return rows.astype(np.intp, copy=False)
        if self._selected_sorted is None:
            self._selected_sorted = np.sort(rows)
        rows = self._selected_sorted
        chosen_ids = self._ids[rows]  # ascending, as rows are
        at = np.searchsorted(chosen_ids, ids)
        if np.any(at >= chosen_ids.size):
            return None
        if not np.array_equal(chosen_ids[at], ids):
            return None
        return rows[at].astype(np.intp, copy=False)

    def _positions(self, ids: IdArray, *, strict: bool = True) -> IndexArray:
        """Row positions of ids (-1 where not watched, or ValueError when strict)."""
        if ids.size == 0:
            return np.empty(0, dtype=np.intp)
        # Sorted queries walk the id array in order: about twice as fast on large arrays.
        order = np.argsort(ids, kind="stable")
        pos = np.empty(ids.size, dtype=np.intp)
        pos[order] = np.searchsorted(self._ids, ids[order])
        inside = pos < self._ids.size
        found = np.zeros(ids.size, dtype=bool)
        found[inside] = self._ids[pos[inside]] == ids[inside]
        if strict and not found.all():
            raise ValueError(f"ids not watched: {ids[~found][:5].tolist()}")
        pos[~found] = -1
        return pos


def _check_ages(values: ArrayLike, count: int) -> FloatArray:
    """Slots since a version's last change, one per poll: >= 0, or NaN (unknown)."""
    ago = np.asarray(values, dtype=np.float64)
    if ago.ndim == 0:
        ago = ago.reshape(1)
    if ago.shape != (count,):
        raise ValueError("changed_ago must have one value per id")
    if np.any(ago < 0) or np.any(np.isinf(ago)):
        raise ValueError("changed_ago must be >= 0 and finite, or NaN (unknown)")
    return ago


def _check_capacity(capacity: float) -> float:
    try:
        value = float(capacity)
    except (TypeError, ValueError):
        raise ValueError(f"capacity must be a number, got {capacity!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"capacity must be a positive number of polls per slot, got {capacity!r}")
    return value


def _check_unit_interval(
    values: ArrayLike | None, count: int, what: str, *, default: float
) -> FloatArray:
    if values is None:
        return np.full(count, default)
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(count, float(arr))
    if arr.shape != (count,):
        raise ValueError(f"{what} must have one value per id")
    if not np.all(np.isfinite(arr)) or np.any((arr <= 0) | (arr > 1)):
        raise ValueError(f"{what} must be finite numbers in (0, 1]")
    return arr


def _check_probabilities(values: ArrayLike, count: int) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(count, float(arr))
    if arr.shape != (count,):
        raise ValueError("rates must have one value per id")
    if not np.all(np.isfinite(arr)) or np.any((arr < 0) | (arr > 1)):
        raise ValueError("rates must be change probabilities per slot, finite and in [0, 1]")
    return arr
