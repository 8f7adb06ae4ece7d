"""The per-worker overload automaton and the two ways out of an overload.

When learned weights drift, a worker's sites can want more polls per slot than it has
(an overload). The paper on packing web sites onto crawler nodes (Yazidi, *Solving the
bin packing problem*) gives every worker a small automaton that picks, on each overload,
between two remedies:

- **move sites**: keep the subset of the worker's sites with the largest weight sum that
  fits (subset sum, ``crawler.cluster._subset``), collect the rest, and re-pack every
  collected site by Best Fit Decreasing at the end of the slot;
- **shrink frequencies**: lower the frequencies of the worker's most-penalized pages
  (the pages with the most misses in a short register of their recent outcomes), one
  automaton state at a time, until the worker fits.

The automaton has states Th..N and starts at Th; it moves with probability (s/N)^2.
After a slot with an overload s goes up by 2 (while s < N - 1), after a slot without one
it goes down by 1 (while s > Th). A low Th makes shrinking the first choice: sites move
only when overloads persist. Decisions use the state at the start of the slot; the
update then uses that slot's outcome. Th and N are not given by the paper: the project's
choice and the simulation behind it are in docs/cluster.md.

The register: the last ``length`` outcomes of a page as bits of an integer (1 = a miss,
newest in bit 0), so the penalty is a popcount.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from crawler.cluster._types import BoolArray, FloatArray, IntArray, weights_array

#: the project's choice (docs/cluster.md, measured on the paper's environments)
DEFAULT_THRESHOLD = 1
DEFAULT_STATES = 32
#: register length L (the paper leaves it open)
DEFAULT_REGISTER = 8
MAX_REGISTER = 16

_POPCOUNT = np.array([bin(v).count("1") for v in range(1 << MAX_REGISTER)], dtype=np.int64)

RegisterArray = NDArray[np.uint16]


class OverloadAutomata:
    """One overload automaton per worker, vectorized over the workers."""

    def __init__(
        self,
        workers: int,
        *,
        threshold: int = DEFAULT_THRESHOLD,
        states: int = DEFAULT_STATES,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        if states < 2:
            raise ValueError(f"the overload automaton needs at least 2 states, got N={states}")
        if not 1 <= threshold <= states:
            raise ValueError(f"the threshold must be in 1..N={states}, got Th={threshold}")
        if workers < 0:
            raise ValueError("the number of workers cannot be negative")
        self.threshold = int(threshold)
        self.states = int(states)
        self.state: IntArray = np.full(workers, self.threshold, dtype=np.int64)
        self._rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)

    @property
    def workers(self) -> int:
        """Number of automata."""
        return int(self.state.size)

    def add(self, count: int = 1) -> None:
        """Automata for ``count`` new workers, at the threshold state."""
        self.state = np.concatenate([self.state, np.full(count, self.threshold, np.int64)])

    def remove(self, workers: ArrayLike) -> None:
        """Drop the automata of some workers (the others keep their order)."""
        self.state = np.delete(self.state, np.asarray(workers, dtype=np.int64))

    def move_probability(self) -> FloatArray:
        """(s / N)^2 for every worker."""
        prob: FloatArray = (self.state / self.states) ** 2
        return prob

    def decide(self, overloaded: ArrayLike) -> BoolArray:
        """For each overloaded worker: True = move sites, False = shrink frequencies.
        Workers that are not overloaded get False."""
        over = self._mask(overloaded)
        draw = self._rng.random(self.state.size)
        move: BoolArray = over & (draw < self.move_probability())
        return move

    def update(self, overloaded: ArrayLike) -> None:
        """The end-of-slot transition: +2 after an overload (while s < N - 1), -1 after a
        slot without one (while s > Th)."""
        over = self._mask(overloaded)
        up = over & (self.state < self.states - 1)
        down = ~over & (self.state > self.threshold)
        self.state[up] += 2
        self.state[down] -= 1

    def _mask(self, overloaded: ArrayLike) -> BoolArray:
        over = np.asarray(overloaded, dtype=np.bool_)
        if over.shape != self.state.shape:
            raise ValueError("one overload flag per worker is needed")
        return over


def record_outcomes(
    register: RegisterArray, pages: ArrayLike, missed: ArrayLike, length: int
) -> None:
    """Push the outcomes of polled ``pages`` into their registers (in place)."""
    if not 1 <= length <= MAX_REGISTER:
        raise ValueError(f"the register length must be in 1..{MAX_REGISTER}")
    ids = np.asarray(pages, dtype=np.int64)
    bits = np.asarray(missed, dtype=np.bool_).astype(np.uint32)
    mask = (1 << length) - 1
    register[ids] = ((register[ids].astype(np.uint32) << 1 | bits) & mask).astype(np.uint16)


def penalties(register: RegisterArray) -> IntArray:
    """Misses among the recorded outcomes of each page."""
    counts: IntArray = _POPCOUNT[register]
    return counts


def shrink_to_fit(
    states: ArrayLike, penalty: ArrayLike, levels: ArrayLike, capacity: float
) -> tuple[IntArray, bool]:
    """Lower the states of the most-penalized pages until sum(levels[state]) <= capacity.

    ``states`` are the automaton states (>= 1) of one worker's pages, ``levels[s]`` the
    frequency of state s (increasing), ``penalty`` the misses in each page's register.
    Rounds: every page above state 1, most penalized first (then the larger frequency,
    then the lower index), steps down one state until the excess is gone; another round
    if one was not enough. Returns the new states and whether they fit (False when even
    every page at state 1 is too much: only moving sites can help then)."""
    s = np.array(states, dtype=np.int64)
    pen = np.asarray(penalty, dtype=np.int64)
    lv = weights_array(levels, "levels")
    if pen.shape != s.shape:
        raise ValueError("one penalty per page is needed")
    if s.size and (s.min() < 1 or s.max() >= lv.size):
        raise ValueError("states must be in 1..len(levels)-1")
    excess = float(lv[s].sum()) - capacity
    while excess > 1e-12:
        live = np.flatnonzero(s > 1)
        if live.size == 0:
            return s, False
        order = live[np.lexsort((live, -lv[s[live]], -pen[live]))]
        saving = lv[s[order]] - lv[s[order] - 1]
        reached = np.cumsum(saving)
        k = int(np.searchsorted(reached, excess - 1e-12))
        chosen = order[: k + 1]
        s[chosen] -= 1
        excess -= float(saving[: k + 1].sum())
    return s, True
