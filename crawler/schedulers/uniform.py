"""Uniform: round-robin over all URLs, C polls per slot (the papers' baseline)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from crawler.schedulers._base import BoolArray, FloatArray, IndexArray, Scheduler


class Uniform(Scheduler):
    """Polls every URL equally often, in a fixed cyclic order (by id)."""

    name: ClassVar[str] = "uniform"
    _uses_credit: ClassVar[bool] = False
    _scalar_fields: ClassVar[tuple[str, ...]] = ("cursor",)

    def __init__(
        self, capacity: float, *, seed: int | None = None, realization: str = "stride"
    ) -> None:
        super().__init__(capacity, seed=seed, realization=realization)
        self._cursor = 0

    def _initial_values(
        self, count: int, importance: FloatArray, rates: FloatArray
    ) -> dict[str, NDArray[Any]]:
        return {}

    def _wanted(self) -> FloatArray:
        n = self._ids.size
        return np.full(n, min(1.0, self.capacity / n) if n else 0.0)

    def _choose(self, k: int) -> IndexArray:
        n = self._ids.size
        start = self._cursor % n
        self._cursor = (start + k) % n
        return ((start + np.arange(k)) % n).astype(np.intp)

    def _learn(self, pos: IndexArray, hits: BoolArray) -> None:
        """Uniform does not learn."""
