"""URL orderings: which frontier URL a forager visits next.

All orderings see the same thing: the frontier of a path (URLs linked from pages visited on it
and not yet visited), each with the *state vector* of its page (the paper's foragers download
every linked page, so a frontier URL's content is known) and its insertion number. The next
URL is the one with the highest value (ties: the earliest inserted).

- :class:`ValueOrdering` is the paper's URL ordering (*Selection in Scale-Free Small World*,
  §3.1.2, Algorithms 3 and 4): ``V(A) = weight . state(A)``; with ``learning`` the weights follow
  TD(0), ``delta = r + gamma V(next) - V(current)``, ``weight += alpha delta state(current)``,
  ``gamma = 0.9``, ``alpha = 0.1``. Without ``learning`` (the weblog-update foragers) the
  weights stay the random ones the forager was born with. Decision: state vectors are scaled to
  unit length by whoever makes them (see ``crawler.discovery._features``), so ``alpha = 0.1``
  is a stable step; with the paper's raw tanh outputs in 50 dimensions the effective step
  ``alpha |state|^2`` could exceed 2 and TD would diverge.
- :class:`BestFirstOrdering` ranks by estimated relevance: the cosine between a page's state
  and the mean state of the pages that earned a reward so far (a topic profile learned from
  the reinforcements; before the first reward, the order of insertion).
- :class:`BreadthFirstOrdering`: first in, first out.
- The topical score of *Focused Crawling using Asynchronous Cellular Learning Automata* is in
  ``crawler.discovery._topical``.
"""

from __future__ import annotations

import random
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

GAMMA = 0.9
ALPHA = 0.1

Vector = NDArray[np.float64]


class Frontier:
    """URLs linked but not visited on the current path, with state vectors and parents."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self.urls: list[str] = []
        self.parents: list[str] = []
        self._index: dict[str, int] = {}
        self._states = np.zeros((16, dimensions))
        self._seq = np.zeros(16, dtype=np.int64)
        self._counter = 0

    def __len__(self) -> int:
        return len(self.urls)

    def __contains__(self, url: object) -> bool:
        return url in self._index

    @property
    def states(self) -> Vector:
        return self._states[: len(self.urls)]

    @property
    def sequence(self) -> NDArray[np.int64]:
        return self._seq[: len(self.urls)]

    def add(self, url: str, state: Vector, parent: str) -> None:
        if url in self._index:
            return
        n = len(self.urls)
        if n == len(self._seq):
            self._states = np.concatenate([self._states, np.zeros_like(self._states)])
            self._seq = np.concatenate([self._seq, np.zeros_like(self._seq)])
        self._states[n] = state
        self._seq[n] = self._counter
        self._counter += 1
        self._index[url] = n
        self.urls.append(url)
        self.parents.append(parent)

    def update_state(self, url: str, state: Vector) -> None:
        """Replace the state of a frontier URL (e.g. once its page has been downloaded)."""
        i = self._index.get(url)
        if i is not None:
            self._states[i] = state

    def pop(self, i: int) -> tuple[str, Vector]:
        """Remove entry i (swapping the last one into its place) and return it."""
        url, state = self.urls[i], self._states[i].copy()
        last = len(self.urls) - 1
        if i != last:
            self._states[i] = self._states[last]
            self._seq[i] = self._seq[last]
            self.urls[i] = self.urls[last]
            self.parents[i] = self.parents[last]
            self._index[self.urls[i]] = i
        self.urls.pop()
        self.parents.pop()
        del self._index[url]
        return url, state

    def clear(self) -> None:
        self.urls.clear()
        self.parents.clear()
        self._index.clear()


class Ordering(Protocol):
    """The part of a forager that ranks its frontier and learns from rewards."""

    def values(self, frontier: Frontier) -> Vector: ...

    def learn(self, current: Vector | None, following: Vector, reward: float) -> None: ...

    def offspring(self, rng: random.Random) -> Ordering: ...


def best_index(values: Vector, sequence: NDArray[np.int64]) -> int:
    """The entry with the highest value; ties go to the earliest inserted."""
    top = float(values.max())
    tied = np.flatnonzero(values >= top)
    return int(tied[np.argmin(sequence[tied])])


def random_weights(rng: random.Random, dimensions: int) -> Vector:
    """A random weight vector, uniform in [-1, 1] per component."""
    return np.array([rng.uniform(-1.0, 1.0) for _ in range(dimensions)])


class ValueOrdering:
    """``V = weight . state``; TD(0) on the weights when ``learning``."""

    def __init__(
        self, weights: Vector, *, learning: bool, gamma: float = GAMMA, alpha: float = ALPHA
    ) -> None:
        self.weights = np.asarray(weights, dtype=np.float64).copy()
        self.learning = learning
        self.gamma = gamma
        self.alpha = alpha

    def value(self, state: Vector) -> float:
        return float(self.weights @ state)

    def values(self, frontier: Frontier) -> Vector:
        return frontier.states @ self.weights

    def td_error(self, current: Vector, following: Vector, reward: float) -> float:
        return reward + self.gamma * self.value(following) - self.value(current)

    def learn(self, current: Vector | None, following: Vector, reward: float) -> None:
        """Algorithm 4 for the step ``current -> following`` that earned ``reward``."""
        if not self.learning or current is None:
            return
        delta = self.td_error(current, following, reward)
        self.weights += self.alpha * delta * current

    def offspring(self, rng: random.Random) -> ValueOrdering:
        """Algorithm 6: a learner's child copies its weights; otherwise new random ones."""
        weights = self.weights if self.learning else random_weights(rng, len(self.weights))
        return ValueOrdering(weights, learning=self.learning, gamma=self.gamma, alpha=self.alpha)


class BestFirstOrdering:
    """Cosine to the mean state of the rewarded pages (insertion order before any reward)."""

    def __init__(self, dimensions: int) -> None:
        self.profile = np.zeros(dimensions)
        self.rewarded = 0

    def values(self, frontier: Frontier) -> Vector:
        if self.rewarded == 0:
            return -frontier.sequence.astype(np.float64)
        states = frontier.states
        norms = np.linalg.norm(states, axis=1) * max(float(np.linalg.norm(self.profile)), 1e-12)
        result: Vector = (states @ self.profile) / np.maximum(norms, 1e-12)
        return result

    def observe_relevant(self, state: Vector) -> None:
        """A page that earned a reward: move the profile's running mean toward it."""
        self.rewarded += 1
        self.profile += (state - self.profile) / self.rewarded

    def learn(self, current: Vector | None, following: Vector, reward: float) -> None:
        return None

    def offspring(self, rng: random.Random) -> BestFirstOrdering:
        child = BestFirstOrdering(len(self.profile))
        child.profile = self.profile.copy()
        child.rewarded = self.rewarded
        return child


class BreadthFirstOrdering:
    """First in, first out."""

    def values(self, frontier: Frontier) -> Vector:
        return -frontier.sequence.astype(np.float64)

    def learn(self, current: Vector | None, following: Vector, reward: float) -> None:
        return None

    def offspring(self, rng: random.Random) -> BreadthFirstOrdering:
        return BreadthFirstOrdering()
