"""FPA, the Fixed Partitioning Automaton (thesis §5.2; docs/schedulers.md).

Two classes of fixed size: P1 (``M = floor((1 - f) C)`` URLs, polled every slot) and P2
(the rest, polled round-robin with the remaining ``C - M`` polls per slot; the base class's
budget realizes a fractional remainder). Inside each class a URL has a state 1..N (1
innermost, N the boundary). Per poll outcome (hit = changed since the previous poll):

========  =====  ============  =========================================================
outcome   class  at boundary?  action
========  =====  ============  =========================================================
hit       P1     any           one step inward (floor 1) with probability w_i
hit       P2     no            one step toward the boundary with probability w_i
hit       P2     yes           with probability w_i swap with a P1 URL that missed this slot
miss      P2     any           one step inward (floor 1)
miss      P1     no            one step toward the boundary
miss      P1     yes           swap with a P2 URL that hit this slot
========  =====  ============  =========================================================

Choices where the rules are silent (all documented in the class docstring):

* One ``feedback`` call is one slot's outcomes; all rules read the states as they were
  before that call, and the swaps are made after the single-step moves.
* Swap partners are ranked by their pre-slot state (the boundary first, then the states
  nearest to it), ties broken at random. Swap initiators on both sides are paired with each
  other first (each is at its boundary, so each is the other's first choice); leftover
  initiators take partners from the remaining ranked candidates; a URL swaps at most once
  per slot. Two swapped URLs exchange classes, pre-slot states and round-robin places (the
  URL entering P2 takes the leaving URL's place in the cycle), and skip their own
  single-step move.
* New URLs join P2 at its boundary, appended to the end of the P2 cycle (polled before
  the cycle wraps, i.e. within the current round). Whenever P1 has fewer than ``M``
  members (the first add, a removed P1 URL, a larger capacity) the P2 URLs nearest P2's
  boundary are promoted
  (ties: lowest id, so the initial P1 is the first M ids), entering P1 at its boundary;
  when P1 has too many (smaller capacity) the P1 URLs nearest P1's boundary are demoted
  (ties: lowest id) to P2's boundary at the end of the cycle.
* Each URL keeps a persistent key: P2 URLs are cycled in key order, P1 URLs have negative
  keys. Only swaps (which touch polled URLs) and promotions/demotions change keys, so the
  rows that ``take_delta`` carries are enough to resume exactly.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from crawler.schedulers._base import BoolArray, FloatArray, IdArray, IndexArray, Scheduler

_NEW = np.iinfo(np.int64).min  # key of a URL waiting to be placed in the P2 cycle
_MAX_STATES = int(np.iinfo(np.int16).max)


class FPA(Scheduler):
    """Fixed Partitioning Automaton: learns which M URLs deserve a poll every slot.

    Parameters: ``N`` states per class (default 16, the thesis's), ``f`` in [0, 1] the
    share of the capacity spent round-robin on P2 (default 0.1). Per-URL memory: the
    base's 33 bytes plus a 2-byte state, an 8-byte key (P2: order in the round-robin
    cycle; P1: negative), a 4-byte place and an 8-byte row in one derived index array
    (P1 list or P2 cycle): 55 bytes. ``select`` and ``feedback`` cost O(C log n); add,
    remove and capacity changes O(n log n).
    The ``realization`` parameter is accepted for API uniformity; FPA always polls P1
    plus the next URLs of the P2 cycle.
    """

    name: ClassVar[str] = "fpa"
    _uses_credit: ClassVar[bool] = False
    _url_fields: ClassVar[tuple[str, ...]] = ("level", "rank")
    _scalar_fields: ClassVar[tuple[str, ...]] = ("cursor", "swaps")

    def __init__(
        self,
        capacity: float,
        *,
        seed: int | None = None,
        realization: str = "stride",
        N: int = 16,
        f: float = 0.1,
    ) -> None:
        super().__init__(capacity, seed=seed, realization=realization)
        if (
            isinstance(N, bool)
            or not isinstance(N, (int, np.integer))
            or not (1 <= N <= _MAX_STATES)
        ):
            raise ValueError(f"N must be an integer in [1, {_MAX_STATES}], got {N!r}")
        try:
            share = float(f)
        except (TypeError, ValueError):
            raise ValueError(f"f must be a number in [0, 1], got {f!r}") from None
        if not (0.0 <= share <= 1.0):
            raise ValueError(f"f must be a number in [0, 1], got {f!r}")
        self.N = int(N)
        self.f = share
        self._level: NDArray[np.int16] = np.empty(0, dtype=np.int16)
        self._rank: NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._cursor = 0  # key of the next P2 URL to poll (the first key >= it, cyclically)
        self._swaps = 0
        # derived from _rank (rebuilt after add/remove/restore, patched by swaps)
        self._p1_rows: IndexArray = np.empty(0, dtype=np.intp)
        self._ring_rows: IndexArray = np.empty(0, dtype=np.intp)  # the P2 cycle, by key
        self._place: NDArray[np.int32] = np.empty(0, dtype=np.int32)  # index in either list
        self._next = 0  # index in _ring_rows of the next P2 URL to poll
        #: (ids that entered P1, ids that left P1) in the last feedback call
        self.last_swaps: tuple[IdArray, IdArray] = (
            np.empty(0, dtype=np.int64),
            np.empty(0, dtype=np.int64),
        )

    # ----- public -----------------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        return {**super().params(), "N": self.N, "f": self.f}

    @property
    def p1_size(self) -> int:
        """M: the number of URLs in P1 (polled every slot)."""
        return min(math.floor((1.0 - self.f) * self.capacity + 1e-9), self.size)

    @property
    def swaps(self) -> int:
        """Total number of swaps between P1 and P2 so far."""
        return int(self._swaps)

    def set_capacity(self, capacity: float) -> None:
        super().set_capacity(capacity)
        self._normalize()

    def automaton(self) -> tuple[IdArray, NDArray[np.int8], NDArray[np.int16]]:
        """Every URL's id, class (1 = P1, 2 = P2) and state (1 innermost .. N boundary)."""
        cls = np.where(self._rank < 0, 1, 2).astype(np.int8)
        return self._ids.copy(), cls, self._level.copy()

    # ----- Scheduler hooks --------------------------------------------------------------

    def _initial_values(
        self, count: int, importance: FloatArray, rates: FloatArray
    ) -> dict[str, NDArray[Any]]:
        return {
            "level": np.full(count, self.N, dtype=np.int16),
            "rank": np.full(count, _NEW, dtype=np.int64),
        }

    def _wanted(self) -> FloatArray:
        n = self.size
        x = np.ones(n)
        ring = self._ring_rows.size
        if ring:
            x[self._ring_rows] = min(1.0, max(0.0, self.capacity - self._p1_rows.size) / ring)
        return x

    def _wanted_total(self) -> float:
        ring = self._ring_rows.size
        extra = min(float(ring), max(0.0, self.capacity - self._p1_rows.size))
        return float(self._p1_rows.size) + (extra if ring else 0.0)

    def _choose(self, k: int) -> IndexArray:
        m = min(k, self._p1_rows.size)
        parts = [self._p1_rows[:m]]
        ring = self._ring_rows.size
        k2 = min(k - m, ring)
        if k2 > 0:
            start = self._next % ring
            end = start + k2
            if end <= ring:
                parts.append(self._ring_rows[start:end])
            else:
                parts.append(self._ring_rows[start:])
                parts.append(self._ring_rows[: end - ring])
            self._next = end % ring
            self._cursor = int(self._rank[self._ring_rows[self._next]])
        return np.concatenate(parts) if len(parts) > 1 else parts[0].copy()

    def _learn(self, pos: IndexArray, hits: BoolArray) -> None:
        top = self.N
        before = self._level[pos].astype(np.int64)
        in_p1 = self._rank[pos] < 0
        lucky = self._rng.random(pos.size) < self._importance[pos]
        at_edge = before == top
        after = before.copy()
        inward = np.maximum(before - 1, 1)

        hit1 = hits & in_p1
        hit2 = hits & ~in_p1
        miss1 = ~hits & in_p1
        miss2 = ~hits & ~in_p1
        step_in = (hit1 & lucky) | miss2
        after[step_in] = inward[step_in]
        step_out = (hit2 & ~at_edge & lucky) | (miss1 & ~at_edge)
        after[step_out] = before[step_out] + 1
        self._level[pos] = after.astype(np.int16)

        # Swaps, from the pre-slot states.
        up = np.flatnonzero(hit2 & at_edge & lucky)  # P2 boundary hits that want P1
        down = np.flatnonzero(miss1 & at_edge)  # P1 boundary misses that want P2
        up = up[self._rng.permutation(up.size)]
        down = down[self._rng.permutation(down.size)]
        paired = min(up.size, down.size)
        into = [up[:paired]]  # local indices entering P1
        out = [down[:paired]]  # local indices leaving P1
        if up.size > paired:
            others = np.flatnonzero(miss1 & ~at_edge)
            chosen = self._nearest_edge(others, before, up.size - paired)
            into.append(up[paired : paired + chosen.size])
            out.append(chosen)
        elif down.size > paired:
            taken = np.zeros(pos.size, dtype=bool)
            taken[up] = True
            others = np.flatnonzero(hit2 & ~taken)
            chosen = self._nearest_edge(others, before, down.size - paired)
            out.append(down[paired : paired + chosen.size])
            into.append(chosen)
        a = np.concatenate(into)
        b = np.concatenate(out)
        self.last_swaps = (self._ids[pos[a]], self._ids[pos[b]])
        if a.size:
            self._swap(pos[a], pos[b], before[a], before[b])

    def _after_add(self) -> None:
        self._normalize()

    def _after_remove(self) -> None:
        self._normalize()

    def _after_restore(self) -> None:
        self._cursor = int(self._cursor)
        self._swaps = int(self._swaps)
        self._normalize()

    # ----- internals --------------------------------------------------------------------

    def _nearest_edge(self, candidates: IndexArray, level: NDArray[np.int64], k: int) -> IndexArray:
        """Up to k of ``candidates`` (local indices): highest pre-slot state first, random
        among equal states."""
        if k <= 0 or candidates.size == 0:
            return np.empty(0, dtype=np.intp)
        tie = self._rng.random(candidates.size)
        order = np.lexsort((tie, -level[candidates]))
        return candidates[order[:k]].astype(np.intp)

    def _swap(
        self,
        rows_in: IndexArray,
        rows_out: IndexArray,
        level_in: NDArray[np.int64],
        level_out: NDArray[np.int64],
    ) -> None:
        """P2 rows ``rows_in`` and P1 rows ``rows_out`` trade classes, states and places."""
        rank_in = self._rank[rows_in].copy()  # keys in the P2 cycle
        rank_out = self._rank[rows_out].copy()  # keys of the P1 list
        place_in = self._place[rows_in].copy()
        place_out = self._place[rows_out].copy()
        self._rank[rows_in] = rank_out
        self._rank[rows_out] = rank_in
        self._place[rows_in] = place_out
        self._place[rows_out] = place_in
        self._level[rows_in] = level_out.astype(np.int16)
        self._level[rows_out] = level_in.astype(np.int16)
        self._ring_rows[place_in] = rows_out
        self._p1_rows[place_out] = rows_in
        self._swaps += int(rows_in.size)

    def _most_uncertain(self, mask: BoolArray, count: int) -> IndexArray:
        """Up to ``count`` rows of ``mask``: highest state first, then lowest id."""
        picked: list[IndexArray] = []
        need = count
        for s in range(self.N, 0, -1):
            if need <= 0:
                break
            rows = np.flatnonzero(mask & (self._level == s))[:need]
            picked.append(rows.astype(np.intp))
            need -= rows.size
        return np.concatenate(picked) if picked else np.empty(0, dtype=np.intp)

    def _place_new(self) -> None:
        """Append the rows waiting with rank _NEW to the P2 cycle, at P2's boundary: they
        come after every current key, so they are polled before the cycle wraps."""
        rank = self._rank
        new_rows = np.flatnonzero(rank == _NEW)
        if new_rows.size == 0:
            return
        ring = rank[rank >= 0]
        top = max(int(ring.max()) if ring.size else -1, int(self._cursor) - 1)
        rank[new_rows] = top + 1 + np.arange(new_rows.size, dtype=np.int64)
        self._level[new_rows] = self.N
        self._touch(new_rows)

    def _normalize(self) -> None:
        """Restore the invariants after add/remove/capacity change/restore: place new URLs
        in P2, keep |P1| = M, rebuild the derived index arrays. Only the rows that move
        between classes get new keys (and are marked for ``take_delta``)."""
        self._place_new()
        rank = self._rank
        in_p1 = rank < 0
        have = int(np.count_nonzero(in_p1))
        want = self.p1_size
        if have < want:
            rows = self._most_uncertain(~in_p1, want - have)
            low = min(int(rank[in_p1].min()) if have else 0, 0)
            rank[rows] = low - rows.size + np.arange(rows.size, dtype=np.int64)
            self._level[rows] = self.N
            self._touch(rows)
        elif have > want:
            rows = self._most_uncertain(in_p1, have - want)
            rank[rows] = _NEW
            self._place_new()
        self._rebuild()

    def _rebuild(self) -> None:
        """Derive the P1 list, the P2 cycle (by key), each row's place and the cursor's
        index from the persistent keys."""
        rank = self._rank
        p1 = np.flatnonzero(rank < 0)
        p1 = p1[np.argsort(rank[p1], kind="stable")]
        p2 = np.flatnonzero(rank >= 0)
        keys = rank[p2]
        order = np.argsort(keys, kind="stable")
        p2, keys = p2[order], keys[order]
        self._p1_rows = p1.astype(np.intp)
        self._ring_rows = p2.astype(np.intp)
        self._place = np.empty(rank.size, dtype=np.int32)
        self._place[p1] = np.arange(p1.size, dtype=np.int32)
        self._place[p2] = np.arange(p2.size, dtype=np.int32)
        self._next = int(np.searchsorted(keys, self._cursor)) if keys.size else 0
        if self._next >= keys.size:
            self._next = 0
