"""Oracle baselines that know every URL's true change probability (docs/schedulers.md, baselines).

* ``Proportional``: x_i proportional to p_i, capped at 1 and water-filled to C.
* ``WeightedProportional`` (the thesis's baseline): x_i proportional to w_i p_i, likewise.
* ``Optimal``: the Lagrange solution ``optimal_allocation(p, C, importance)``.

They need ``rates=`` in ``add`` (the base raises a clear ValueError otherwise), never learn,
and are realized by the base's stride or sampling. The allocation is computed lazily and
cached until the URL set or the capacity changes, so a slot costs one stride step.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from crawler.schedulers._base import BoolArray, FloatArray, IndexArray, Scheduler
from crawler.schedulers._fill import constrained_fill, optimum_curve
from crawler.schedulers._optimum import change_rates, optimal_allocation
from crawler.schedulers._realize import poll_shares, sampling_pick, stride_pick


def proportional_allocation(values: FloatArray, capacity: float) -> FloatArray:
    """x_i = min(1, lam v_i) with sum(x) = min(C, number of v_i > 0)."""
    v = np.asarray(values, dtype=np.float64)
    return poll_shares(v, float(v.sum()), capacity)


class CachedAllocation(Scheduler):
    """A scheduler whose frequencies depend only on the URL set and the capacity: it
    computes them on first use and keeps them (and the stride's poll shares) until
    ``add``, ``remove``, ``set_capacity`` or a restore invalidates them."""

    def __init__(
        self, capacity: float, *, seed: int | None = None, realization: str = "stride"
    ) -> None:
        super().__init__(capacity, seed=seed, realization=realization)
        self._x: FloatArray | None = None
        self._shares: FloatArray | None = None

    @abstractmethod
    def _allocation(self) -> FloatArray:
        """The frequencies x of every URL, in id order (computed on demand)."""

    def set_capacity(self, capacity: float) -> None:
        super().set_capacity(capacity)
        self._invalidate()

    def _invalidate(self) -> None:
        self._x = None
        self._shares = None

    def _wanted(self) -> FloatArray:
        if self._x is None or self._x.size != self._ids.size:
            self._x = np.asarray(self._allocation(), dtype=np.float64)
            self._shares = None
        return self._x

    def _wanted_total(self) -> float:
        return float(self._wanted().sum())

    def _choose(self, k: int) -> IndexArray:
        x = self._wanted()
        if self.realization == "sampling":
            return sampling_pick(self._fitted(x), k, self._rng)
        if self._shares is None:
            self._shares = poll_shares(x, float(x.sum()), self.capacity)
        return stride_pick(self._credit, self._fitted(self._shares), k)

    def _after_add(self) -> None:
        self._invalidate()

    def _after_remove(self) -> None:
        self._invalidate()

    def _after_restore(self) -> None:
        self._invalidate()

    def _constraints_changed(self) -> None:
        self._invalidate()


class _Oracle(CachedAllocation):
    needs_rates: ClassVar[bool] = True

    def _initial_values(
        self, count: int, importance: FloatArray, rates: FloatArray
    ) -> dict[str, NDArray[Any]]:
        return {}

    def _learn(self, pos: IndexArray, hits: BoolArray) -> None:
        """Oracles know the rates: nothing to learn."""


class Proportional(_Oracle):
    """x_i proportional to the true change probability p_i (capped at 1, sum C)."""

    name: ClassVar[str] = "proportional"

    def _allocation(self) -> FloatArray:
        return proportional_allocation(self._rate, self.capacity)


class WeightedProportional(_Oracle):
    """x_i proportional to w_i p_i (capped at 1, sum C): the thesis's baseline."""

    name: ClassVar[str] = "weighted_proportional"

    def _allocation(self) -> FloatArray:
        return proportional_allocation(self._importance * self._rate, self.capacity)


class Optimal(_Oracle):
    """The Lagrange optimum of expected (importance-weighted) hits under regular polling."""

    name: ClassVar[str] = "optimal"
    _solves_constraints: ClassVar[bool] = True

    def _allocation(self) -> FloatArray:
        if self._ids.size == 0:
            return np.empty(0, dtype=np.float64)
        guard = self._guard
        if guard is not None and guard.active():
            # The constrained optimum itself (Kolobov et al.): caps and bounds inside it.
            curve, top = optimum_curve(change_rates(self._rate), _weights_or_none(self._importance))
            return constrained_fill(curve, top, self.capacity, guard.limits()).x
        return optimal_allocation(self._rate, self.capacity, self._importance)


def _weights_or_none(w: FloatArray) -> FloatArray | None:
    return None if w.size == 0 or np.all(w == w[0]) else w
