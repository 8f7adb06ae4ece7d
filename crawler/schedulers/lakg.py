"""LAKG, the Learning Automata Knapsack Game (paper 002 §II); CGLA (thesis §5.1) when
importance weights are given.

One automaton per URL with states s in {1..N}; the wanted frequency is x = (s/N)^gamma.
The knapsack is full when sum(x) >= C. Each poll outcome, in a random order within the
slot and against the running sum(x):

- hit, knapsack not full, s < N: s + 1 with probability w (the importance);
- miss, knapsack full, s > 1: s - 1;
- otherwise unchanged.

Exactness: x takes values from a table of integers in units of 2^-36 (``_levels``), so
sum(x) is an exact integer kept incrementally: it never drifts. The per-URL x is
cached as float64 (exact: integers below 2^53 times a power of two).

Speed: within one slot each URL appears at most once, so every outcome's potential change
of sum(x) is computed with NumPy up front; only the scalar race against the threshold is
sequential (a plain Python loop over the outcomes that can move).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from crawler.schedulers._base import BoolArray, FloatArray, IndexArray, Scheduler
from crawler.schedulers._realize import poll_shares, stride_pick

INITS = ("even", "low")
MODES = ("sequential", "thesis")

#: x is stored in units of 2^-UNIT_BITS; sum(x) is exact up to 2^(63 - UNIT_BITS) URLs.
UNIT_BITS = 36
_UNIT = float(2**UNIT_BITS)
_SCALE = 1.0 / _UNIT
MAX_URLS = 2 ** (63 - UNIT_BITS)
#: largest resolution accepted (the level table costs 8 bytes per state)
MAX_N = 2**24
#: auto-N: the lowest frequency (1/N)^gamma is at most (C/n) / AUTO_K
AUTO_K = 32.0
#: auto-N never goes below this (a very coarse automaton learns little)
AUTO_MIN_N = 16
#: auto-N never goes above this (keeps the level table at most 16 MB)
AUTO_MAX_N = 2**21
#: auto-N moves on a geometric grid of this ratio, so that adding URLs one at a time
#: re-maps the states only now and then
AUTO_GRID = 2.0**0.25
#: slots with at most this many outcomes take the plain-Python path
_SMALL = 24

IntArray = NDArray[np.int64]
StateArray = NDArray[np.int32]


def level_table(n_states: int, gamma: float) -> IntArray:
    """x of each state in units of 2^-36: ``table[s]`` for s in 1..N (``table[0]`` = 0).

    Strictly increasing (every move changes sum(x)), ``table[N]`` = 2^36 (x = 1).
    """
    s = np.arange(n_states + 1, dtype=np.float64)
    raw = np.rint((s / n_states) ** gamma * _UNIT).astype(np.int64)
    steps = np.arange(n_states + 1, dtype=np.int64)
    table = np.maximum.accumulate(raw - steps) + steps  # strictly increasing
    table[0] = 0
    table[1:] = np.maximum(table[1:], 1)
    table[n_states] = max(int(table[n_states]), 2**UNIT_BITS)
    return table


def auto_states(n_urls: int, capacity: float, gamma: float, k: float = AUTO_K) -> int:
    """The automatic resolution: the smallest grid N with (1/N)^gamma <= (C/n) / k."""
    if n_urls <= 0:
        return AUTO_MIN_N
    share = min(1.0, capacity / n_urls)
    target = (k / share) ** (1.0 / gamma)
    if target <= AUTO_MIN_N:
        return AUTO_MIN_N
    step = math.ceil(math.log(target) / math.log(AUTO_GRID) - 1e-9)
    return int(min(AUTO_MAX_N, max(AUTO_MIN_N, math.ceil(AUTO_GRID**step - 1e-9))))


class LAKG(Scheduler):
    """Learning Automata Knapsack Game: a race of per-URL automata for the capacity C.

    Parameters: ``N`` states per automaton (None: chosen from n and C, see
    ``auto_states``), ``gamma`` > 0 the shape of x = (s/N)^gamma, ``init`` "even"
    (x close to C/n) or "low" (s = 1), ``mode`` "sequential" (knapsack re-checked after
    every update, docs/schedulers.md) or "thesis" (checked once per slot, full when sum(x) > C).
    """

    name: ClassVar[str] = "lakg"
    _url_fields: ClassVar[tuple[str, ...]] = ("state", "x")
    _scalar_fields: ClassVar[tuple[str, ...]] = ("n_states",)

    def __init__(
        self,
        capacity: float,
        *,
        seed: int | None = None,
        realization: str = "stride",
        N: int | None = None,
        gamma: float = 1.3,
        init: str = "low",
        mode: str = "sequential",
    ) -> None:
        super().__init__(capacity, seed=seed, realization=realization)
        if N is not None:
            if isinstance(N, bool) or not isinstance(N, (int, np.integer)):
                raise ValueError(f"N must be an integer number of states, got {N!r}")
            if not 2 <= int(N) <= MAX_N:
                raise ValueError(f"N must be in [2, {MAX_N}], got {N!r}")
            N = int(N)
        try:
            gamma_value = float(gamma)
        except (TypeError, ValueError):
            raise ValueError(f"gamma must be a positive number, got {gamma!r}") from None
        if not math.isfinite(gamma_value) or gamma_value <= 0:
            raise ValueError(f"gamma must be a positive number, got {gamma!r}")
        if init not in INITS:
            raise ValueError(f"unknown init {init!r}: choose one of {', '.join(INITS)}")
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: choose one of {', '.join(MODES)}")
        self.N = N
        self.gamma = gamma_value
        self.init = init
        self.mode = mode
        self._n_states = N if N is not None else AUTO_MIN_N
        self._levels: IntArray = level_table(self._n_states, self.gamma)
        self._state: StateArray = np.empty(0, dtype=np.int32)
        self._x: FloatArray = np.empty(0, dtype=np.float64)
        self._total = 0  # sum(x) in units of 2^-36, exact

    # ----- public -----------------------------------------------------------------------

    @property
    def n_states(self) -> int:
        """The current resolution N."""
        return self._n_states

    def params(self) -> dict[str, Any]:
        return {
            **super().params(),
            "N": self.N,
            "gamma": self.gamma,
            "init": self.init,
            "mode": self.mode,
        }

    def set_capacity(self, capacity: float) -> None:
        super().set_capacity(capacity)
        if self.N is None:
            self._retune(self.size)

    def states(self) -> StateArray:
        """Every watched URL's automaton state s in 1..N, in id order."""
        return self._state.copy()

    # ----- Scheduler hooks --------------------------------------------------------------

    def _initial_values(
        self, count: int, importance: FloatArray, rates: FloatArray
    ) -> dict[str, NDArray[Any]]:
        n_after = self.size + count
        if n_after > MAX_URLS:
            raise ValueError(f"LAKG watches at most {MAX_URLS} URLs")
        if self.N is None:
            self._retune(n_after)
        if self.init == "low":
            start = 1
        else:
            share = min(1.0, self.capacity / n_after)
            start = math.ceil(self._n_states * share ** (1.0 / self.gamma) - 1e-9)
            start = min(self._n_states, max(1, start))
        state = np.full(count, start, dtype=np.int32)
        return {"state": state, "x": self._levels[state] * _SCALE}

    def _after_add(self) -> None:
        self._recount()

    def _after_remove(self) -> None:
        if self.N is None:
            self._retune(self.size)
        self._recount()

    def _after_restore(self) -> None:
        self._levels = level_table(self._n_states, self.gamma)
        self._state = self._state.astype(np.int32)
        self._x = self._levels[self._state] * np.float64(_SCALE)
        self._recount()

    def _wanted(self) -> FloatArray:
        return self._x

    def _wanted_total(self) -> float:
        return self._total * _SCALE

    def _choose(self, k: int) -> IndexArray:
        if self.realization != "stride":
            return super()._choose(k)
        return stride_pick(self._credit, self._fitted(self._shares()), k)

    def _shares(self) -> FloatArray:
        """poll_shares (y = min(1, lam x), sum(y) = C) solved exactly on the histogram of
        states: x takes only N values, so the water level costs O(N), not passes over n."""
        x = self._x
        total = self._wanted_total()
        if x.size == 0 or total <= 0:
            return np.zeros_like(x)
        lam = self.capacity / total
        if lam * float(x.max()) <= 1.0:
            return x * lam
        if self.capacity >= x.size:
            return np.ones_like(x)
        counts = np.bincount(self._state, minlength=self._n_states + 1)[1:].astype(np.float64)
        value = self._levels[1:] * _SCALE
        below = np.concatenate(([0.0], np.cumsum(counts * value)))  # mass of states < k
        capped = np.concatenate((np.cumsum(counts[::-1])[::-1], [0.0]))  # count of >= k
        with np.errstate(divide="ignore", invalid="ignore"):
            level = (self.capacity - capped) / below
        ok = (below > 0) & (capped < self.capacity)
        ok[1:] &= level[1:] * value < 1.0  # the highest uncapped state stays below 1
        ok[:-1] &= level[:-1] * value >= 1.0  # the lowest capped state reaches 1
        valid = np.flatnonzero(ok)
        if valid.size == 0:  # rounding at a boundary: fall back to the iteration
            return poll_shares(x, total, self.capacity)
        return np.minimum(1.0, x * float(level[valid[0]]))

    def _learn(self, pos: IndexArray, hits: BoolArray) -> None:
        m = pos.size
        order = self._rng.permutation(m)
        coins = self._rng.random(m)
        if m <= _SMALL and self.mode == "sequential":
            self._learn_small(pos, hits, order, coins)
            return
        pos = pos[order]
        hits = hits[order]
        n_states = self._n_states
        levels = self._levels
        s = self._state[pos].astype(np.int64)
        up = hits & (s < n_states) & (coins < self._importance[pos])
        down = ~hits & (s > 1)
        if self.mode == "thesis":
            room = self._total <= math.floor(self.capacity * _UNIT)
            move = up if room else down
            self._apply(pos[move], s[move] + (1 if room else -1))
            return
        cand = np.flatnonzero(up | down)
        if cand.size == 0:
            return
        sc = s[cand]
        new = np.where(up[cand], sc + 1, sc - 1)
        delta = (levels[new] - levels[sc]).tolist()
        # The race: a rise needs room (total < threshold), a fall needs a full knapsack.
        threshold = math.ceil(self.capacity * _UNIT)
        total = self._total
        taken: list[int] = []
        take = taken.append
        for j, d in enumerate(delta):
            if d > 0:
                if total < threshold:
                    total += d
                    take(j)
            elif total >= threshold:
                total += d
                take(j)
        self._total = total
        if taken:
            idx = cand[np.asarray(taken, dtype=np.intp)]
            self._state[pos[idx]] = new[np.asarray(taken, dtype=np.intp)]
            self._x[pos[idx]] = levels[new[np.asarray(taken, dtype=np.intp)]] * _SCALE

    def _learn_small(
        self, pos: IndexArray, hits: BoolArray, order: IndexArray, coins: FloatArray
    ) -> None:
        """``_learn`` for a few outcomes: the same race in plain Python (less overhead)."""
        state, levels, x = self._state, self._levels, self._x
        importance = self._importance
        n_states = self._n_states
        threshold = math.ceil(self.capacity * _UNIT)
        total = self._total
        rows = pos[order].tolist()
        outcome = hits[order].tolist()
        for j, i in enumerate(rows):
            s = int(state[i])
            if outcome[j]:
                if total < threshold and s < n_states and coins[j] < importance[i]:
                    new = s + 1
                else:
                    continue
            elif total >= threshold and s > 1:
                new = s - 1
            else:
                continue
            level = int(levels[new])
            total += level - int(levels[s])
            state[i] = new
            x[i] = level * _SCALE
        self._total = total

    def _learn_reference(self, pos: IndexArray, hits: BoolArray) -> None:
        """The rule one outcome at a time, sum(x) recomputed from scratch each time.

        Slow; same random draws as ``_learn``; for tests."""
        m = pos.size
        order = self._rng.permutation(m)
        coins = self._rng.random(m)
        n_states = self._n_states
        threshold = self.capacity * _UNIT
        frozen = int(self._levels[self._state].sum())  # thesis: tested once per slot
        for j in range(m):
            i = int(pos[order[j]])
            hit = bool(hits[order[j]])
            s = int(self._state[i])
            if self.mode == "thesis":
                full = frozen > threshold
            else:
                full = int(self._levels[self._state].sum()) >= threshold
            if hit and not full and s < n_states and coins[j] < self._importance[i]:
                self._state[i] = s + 1
            elif not hit and full and s > 1:
                self._state[i] = s - 1
            self._x[i] = self._levels[self._state[i]] * _SCALE
        self._recount()

    # ----- internals --------------------------------------------------------------------

    def _apply(self, rows: IndexArray, new_states: IntArray) -> None:
        old = self._levels[self._state[rows]]
        new = self._levels[new_states]
        self._state[rows] = new_states
        self._x[rows] = new * _SCALE
        self._total += int(new.sum() - old.sum())

    def _recount(self) -> None:
        self._total = int(self._levels[self._state].sum())

    def _retune(self, n_urls: int) -> None:
        """Auto-N: move to the grid resolution for n URLs (only if it moved a grid step
        up, or two down) and re-map states so that x is kept as well as possible."""
        target = auto_states(n_urls, self.capacity, self.gamma)
        current = self._n_states
        if target == current or current / AUTO_GRID**1.5 < target < current:
            return
        if self._state.size:
            scaled = np.rint(self._state.astype(np.float64) * (target / current))
            self._state = np.clip(scaled, 1, target).astype(np.int32)
        self._n_states = target
        self._levels = level_table(target, self.gamma)
        self._x = self._levels[self._state] * np.float64(_SCALE)
        self._recount()
