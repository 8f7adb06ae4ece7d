"""Change environments: URLs that change at random, and the outcome of polling them.

Every URL i changes in each slot with probability p_i(t), independently. Two models
(docs/simulator.md):

- ``overwrite``: a poll hits iff at least one change happened since that URL's previous
  poll. Simulated exactly in O(polled) per slot: each URL keeps its cumulative
  log-survival ``L_i(t) = sum_{u <= t} ln(1 - p_i(u))`` as a piecewise-linear function
  of t (a base, the slot it was set at and the current slope ln(1 - p_i)), so a poll at
  slot t after one at slot s hits with probability ``1 - exp(L_i(t) - L_i(s))``, even when
  p_i changed in between. A URL never polled counts as polled at slot 0.
- ``disappear``: a poll hits iff a change happened in that very slot: probability p_i(t).

Slots are numbered from 1. ``begin_slot`` starts the next slot (applying a due switch of
the environment first, so the new slot's changes already follow the new p), then
``poll`` returns the hits of that slot's polls.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Literal

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IdArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
Model = Literal["overwrite", "disappear"]
MODELS: tuple[Model, ...] = ("overwrite", "disappear")

#: p is clipped below 1 for the log-survival (ln 0 = -inf would poison the sums)
_P_MAX = 1.0 - 1e-12
_UNIFORM_BLOCK = 1 << 15
#: up to this many polls per slot are answered with Python scalars
_SCALAR_MAX = 8


class Switch(ABC):
    """A rule that changes the environment's p (and maybe the importance) from time to time."""

    @abstractmethod
    def due(self, slot: int, polls: int) -> bool:
        """Whether a change is due at the start of ``slot`` after ``polls`` polls so far."""

    @abstractmethod
    def apply(self, env: Environment, rng: np.random.Generator) -> IdArray:
        """Change ``env`` (through ``env.set_values``); return the ids whose values changed."""

    def describe(self) -> str:
        """One line for tables and JSON."""
        return type(self).__name__


class AdjacentRankSwap(Switch):
    """Paper 002's switching: every ``every`` polls, sample a URL with probability
    proportional to its current p (i.e. a rank from the Zipf distribution) and swap its
    rank with the next (less changing) rank. The last rank has no successor: no swap."""

    def __init__(self, by_rank: FloatArray, every: int) -> None:
        if every <= 0:
            raise ValueError("the switch period must be a positive number of polls")
        self.every = int(every)
        self._by_rank = np.asarray(by_rank, dtype=np.float64)
        self._cumulative = np.cumsum(self._by_rank)
        #: url_at_rank[k] is the id of the URL at rank k + 1
        self.url_at_rank: IdArray = np.arange(self._by_rank.size, dtype=np.int64)
        self._next_at = self.every

    def due(self, slot: int, polls: int) -> bool:
        return polls >= self._next_at

    def apply(self, env: Environment, rng: np.random.Generator) -> IdArray:
        changed: list[int] = []
        while env.polls >= self._next_at:
            self._next_at += self.every
            target = rng.random() * float(self._cumulative[-1])
            rank = int(np.searchsorted(self._cumulative, target, side="right"))
            if rank >= self._by_rank.size - 1:
                continue
            a, b = int(self.url_at_rank[rank]), int(self.url_at_rank[rank + 1])
            self.url_at_rank[rank], self.url_at_rank[rank + 1] = b, a
            env.set_values(
                np.array([a, b], dtype=np.int64),
                np.array([self._by_rank[rank + 1], self._by_rank[rank]]),
            )
            changed.extend((a, b))
        return np.unique(np.array(changed, dtype=np.int64))

    def describe(self) -> str:
        return f"adjacent rank swap every {self.every} polls"


class MirrorSwap(Switch):
    """Thesis §7.3.3: every ``every`` slots URL k trades p and importance with URL n + 1 - k
    (ids 0..n-1: id i with id n - 1 - i)."""

    def __init__(self, every: int) -> None:
        if every <= 0:
            raise ValueError("the switch period must be a positive number of slots")
        self.every = int(every)

    def due(self, slot: int, polls: int) -> bool:
        return slot > 1 and (slot - 1) % self.every == 0

    def apply(self, env: Environment, rng: np.random.Generator) -> IdArray:
        ids = np.arange(env.n, dtype=np.int64)
        importance = None if env.importance is None else env.importance[::-1].copy()
        env.set_values(ids, env.p[::-1].copy(), importance)
        moved: IdArray = ids[ids != ids[::-1]]
        return moved

    def describe(self) -> str:
        return f"mirror swap (URL k <-> URL n+1-k) every {self.every} slots"


class Environment:
    """n URLs with ids 0..n-1, change probabilities p, optional importance, one model."""

    def __init__(
        self,
        p: FloatArray,
        capacity: float,
        *,
        model: Model = "overwrite",
        importance: FloatArray | None = None,
        switch: Switch | None = None,
        seed: int | np.random.SeedSequence | None = None,
        name: str = "custom",
        groups: IdArray | None = None,
        caps: dict[int, float] | None = None,
    ) -> None:
        pa = np.array(p, dtype=np.float64)
        if pa.ndim != 1 or pa.size == 0:
            raise ValueError("p must be a non-empty 1-D array")
        if not np.all(np.isfinite(pa)) or np.any((pa < 0) | (pa > 1)):
            raise ValueError("change probabilities must be finite and in [0, 1]")
        if model not in MODELS:
            raise ValueError(f"unknown change model {model!r}: choose overwrite or disappear")
        if not math.isfinite(capacity) or capacity <= 0:
            raise ValueError("capacity must be a positive number of polls per slot")
        if importance is not None:
            importance = np.array(importance, dtype=np.float64)
            if importance.shape != pa.shape or np.any((importance <= 0) | (importance > 1)):
                raise ValueError("importance must be one value in (0, 1] per URL")
        if groups is not None:
            groups = np.array(groups, dtype=np.int64)
            if groups.shape != pa.shape or np.any(groups < 0):
                raise ValueError("groups must be one host number >= 0 per URL")
        if caps is not None and (groups is None or any(not c > 0 for c in caps.values())):
            raise ValueError("caps need groups, and every cap must be positive")
        #: each URL's host (None: no hosts) and the hosts' caps in polls per slot
        self.groups: IdArray | None = groups
        self.caps: dict[int, float] | None = None if caps is None else dict(caps)
        self.name = name
        self.capacity = float(capacity)
        self.model: Model = model
        self.p: FloatArray = pa
        self.importance: FloatArray | None = importance
        self.switch = switch
        self._rng = np.random.default_rng(seed)
        self.slot = 0
        self.polls = 0
        #: bumped whenever p or the importance changes (for caches such as the limit)
        self.version = 0
        self._slope = np.log1p(-np.minimum(pa, _P_MAX))
        self._base = np.zeros(pa.size)
        self._since = np.zeros(pa.size)
        self._last = np.zeros(pa.size)
        self._uniform = self._rng.random(_UNIFORM_BLOCK)
        self._used = 0

    @property
    def n(self) -> int:
        """Number of URLs."""
        return int(self.p.size)

    @property
    def ids(self) -> IdArray:
        """The URL ids, 0..n-1."""
        return np.arange(self.p.size, dtype=np.int64)

    def begin_slot(self) -> IdArray | None:
        """Start the next slot; if the environment switched, the ids whose values changed."""
        self.slot += 1
        if self.switch is not None and self.switch.due(self.slot, self.polls):
            return self.switch.apply(self, self._rng)
        return None

    def poll(self, ids: IdArray) -> BoolArray:
        """Poll URLs (distinct ids) in the current slot; True where the poll is a hit."""
        count = ids.size
        self.polls += count
        used = self._used
        if used + count > _UNIFORM_BLOCK:
            self._uniform = self._rng.random(max(_UNIFORM_BLOCK, count))
            used = 0
        self._used = used + count
        if count <= _SCALAR_MAX:
            return self._poll_few(ids.tolist(), used)
        u = self._uniform[used : used + count]
        if self.model == "disappear":
            hits: BoolArray = u < self.p[ids]
            return hits
        now = self._base[ids] + (self.slot - self._since[ids]) * self._slope[ids]
        # miss iff no change since the last poll: probability exp(L(now) - L(last))
        hits = u >= np.exp(now - self._last[ids])
        self._last[ids] = now
        return hits

    def _poll_few(self, ids: list[int], used: int) -> BoolArray:
        """``poll`` for a handful of ids, with Python scalars (NumPy calls cost ~1 µs each)."""
        uniform = self._uniform
        out: list[bool] = []
        if self.model == "disappear":
            p = self.p
            for j, i in enumerate(ids):
                out.append(uniform.item(used + j) < p.item(i))
            return np.array(out, dtype=np.bool_)
        base, since, slope, last, slot = self._base, self._since, self._slope, self._last, self.slot
        for j, i in enumerate(ids):
            now = base.item(i) + (slot - since.item(i)) * slope.item(i)
            out.append(uniform.item(used + j) >= math.exp(now - last.item(i)))
            last[i] = now
        return np.array(out, dtype=np.bool_)

    def set_values(self, ids: IdArray, p: FloatArray, importance: FloatArray | None = None) -> None:
        """Change p (and the importance) of some URLs from the current slot on."""
        boundary = max(self.slot - 1, 0)  # the new values apply from the current slot on
        self._base[ids] += (boundary - self._since[ids]) * self._slope[ids]
        self._since[ids] = boundary
        self.p[ids] = p
        self._slope[ids] = np.log1p(-np.minimum(p, _P_MAX))
        if importance is not None and self.importance is not None:
            self.importance[ids] = importance
        self.version += 1

    def expected_changes(self) -> float:
        """sum_i w_i p_i: the (importance-weighted) changes per slot, thesis §7.2's denominator."""
        if self.importance is None:
            return float(self.p.sum())
        return float(np.dot(self.importance, self.p))
