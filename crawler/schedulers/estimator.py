"""Estimator (paper 002 §III.C): poll uniformly to estimate the change rates, then poll
proportionally to the estimates.

Estimation phase: round-robin over all URLs (like ``uniform``), counting per URL the
successful polls, the hits and the slots between successive successful polls. The phase
lasts ``estimation_slots`` slots if given, else until every URL can have been polled about
``estimation_polls_per_url`` times: ``ceil(estimation_polls_per_url * n / C)`` slots, with n
and C as they are at each slot (adding URLs during the phase lengthens it).

Estimate: a URL polled at regular intervals of k slots hits with probability
h = 1 - (1 - p)^k, so p = 1 - (1 - h)^(1/k). With ``polls`` successful polls, ``hits``
hits and ``span`` slots covered by those polls: k = span / polls and h is smoothed as
(hits + 1/2) / (polls + 1) (Krichevsky-Trofimov), so a URL that never (or always) changed
gets a small (or large) but non-degenerate estimate and is never starved for ever. The
estimate saturates when p k >> 1 (every poll hits: at most about ln(2 (polls + 1)) / k), so
with long phase intervals (n/C slots) the fastest URLs are underestimated and look alike.

Then the estimates are frozen and the URLs are polled with x proportional to them (capped at
1 and water-filled to C; stride or sampling realization). URLs without a successful poll
during the phase, and URLs added after it, get the mean of the frozen estimates (they are
not re-estimated). Polls, hits and spans are still counted after the phase (``estimates()``
reports the running values).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from crawler.schedulers._base import BoolArray, FloatArray, IdArray, IndexArray
from crawler.schedulers.oracles import CachedAllocation, proportional_allocation


def rate_estimate(hits: ArrayLike, polls: ArrayLike, span: ArrayLike) -> FloatArray:
    """p_hat = 1 - (1 - h)^(polls / span) with h = (hits + 1/2) / (polls + 1); NaN where
    there was no poll."""
    h_count = np.asarray(hits, dtype=np.float64)
    n_polls = np.asarray(polls, dtype=np.float64)
    slots = np.asarray(span, dtype=np.float64)
    h = (h_count + 0.5) / (n_polls + 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        interval = np.maximum(slots / n_polls, 1.0)
        p = -np.expm1(np.log1p(-h) / interval)
    return np.where(n_polls > 0, p, np.nan)


class Estimator(CachedAllocation):
    """Uniform polling during an estimation phase, then Proportional on the estimated rates."""

    name: ClassVar[str] = "estimator"
    _url_fields: ClassVar[tuple[str, ...]] = ("polls", "hits", "span", "last", "estimate")
    _scalar_fields: ClassVar[tuple[str, ...]] = ("cursor", "phase_end")

    def __init__(
        self,
        capacity: float,
        *,
        seed: int | None = None,
        realization: str = "stride",
        estimation_slots: int | None = None,
        estimation_polls_per_url: float = 10.0,
    ) -> None:
        super().__init__(capacity, seed=seed, realization=realization)
        if estimation_slots is not None and (
            isinstance(estimation_slots, bool)
            or not isinstance(estimation_slots, (int, np.integer))
            or estimation_slots < 0
        ):
            raise ValueError(
                f"estimation_slots must be a non-negative integer, got {estimation_slots!r}"
            )
        try:
            per_url = float(estimation_polls_per_url)
        except (TypeError, ValueError):
            per_url = math.nan
        if not (math.isfinite(per_url) and per_url > 0):
            raise ValueError(
                "estimation_polls_per_url must be a positive number, "
                f"got {estimation_polls_per_url!r}"
            )
        self.estimation_slots = None if estimation_slots is None else int(estimation_slots)
        self.estimation_polls_per_url = per_url
        self._polls: NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._hits: NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._span: NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._last: NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._estimate: FloatArray = np.empty(0, dtype=np.float64)
        self._cursor = 0
        self._phase_end = -1  # the slot at which the estimation phase ended; -1: estimating

    # ----- public -----------------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        return {
            **super().params(),
            "estimation_slots": self.estimation_slots,
            "estimation_polls_per_url": self.estimation_polls_per_url,
        }

    @property
    def estimating(self) -> bool:
        """True during the estimation phase."""
        return int(self._phase_end) < 0

    def phase_length(self) -> int:
        """Slots in the estimation phase (with the current number of URLs and capacity)."""
        if self.estimation_slots is not None:
            return self.estimation_slots
        return math.ceil(self.estimation_polls_per_url * self.size / self.capacity - 1e-9)

    def estimates(self) -> tuple[IdArray, FloatArray]:
        """Every URL's id and its running rate estimate (NaN before its first poll)."""
        return self._ids.copy(), rate_estimate(self._hits, self._polls, self._span)

    # ----- Scheduler hooks --------------------------------------------------------------

    def _initial_values(
        self, count: int, importance: FloatArray, rates: FloatArray
    ) -> dict[str, NDArray[Any]]:
        return {
            "polls": np.zeros(count, dtype=np.int64),
            "hits": np.zeros(count, dtype=np.int64),
            "span": np.zeros(count, dtype=np.int64),
            "last": np.full(count, self._slot, dtype=np.int64),
            "estimate": np.full(count, self._mean_estimate()),
        }

    def _allocation(self) -> FloatArray:
        n = self.size
        if self.estimating:
            return np.full(n, min(1.0, self.capacity / n) if n else 0.0)
        return proportional_allocation(self._estimate, self.capacity)

    def _choose(self, k: int) -> IndexArray:
        if self.estimating and self._slot > self.phase_length():
            self._end_phase()
        if not self.estimating:
            return super()._choose(k)
        n = self._ids.size
        start = int(self._cursor) % n
        self._cursor = (start + k) % n
        return ((start + np.arange(k)) % n).astype(np.intp)

    def _restart_intervals(self, pos: IndexArray) -> None:
        self._last[pos] = self._slot

    def _learn(self, pos: IndexArray, hits: BoolArray) -> None:
        self._polls[pos] += 1
        self._hits[pos] += hits
        self._span[pos] += np.maximum(self._slot - self._last[pos], 1)
        self._last[pos] = self._slot

    # ----- internals --------------------------------------------------------------------

    def _mean_estimate(self) -> float:
        known = self._estimate[np.isfinite(self._estimate)]
        return float(known.mean()) if known.size else math.nan

    def _end_phase(self) -> None:
        """Freeze the estimates; URLs without a poll get their mean."""
        estimate = rate_estimate(self._hits, self._polls, self._span)
        known = np.isfinite(estimate)
        fill = float(estimate[known].mean()) if known.any() else 0.5
        self._estimate = np.where(known, estimate, fill)
        self._touch(np.arange(self._ids.size, dtype=np.intp))
        self._phase_end = int(self._slot)
        self._invalidate()
