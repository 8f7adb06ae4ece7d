"""Adaptive fetch interval, as Nutch (AdaptiveFetchSchedule) and StormCrawler
(AdaptiveScheduler) do it, in slots (docs/schedulers.md, baselines).

Each URL has an interval in slots. Miss (unchanged, HTTP 304 included):
interval *= 1 + inc. Hit: Nutch: interval *= 1 - dec; StormCrawler:
interval <- (1 - dec) interval + dec min_interval. Then clamp to [min_interval, max_interval].
Failed polls (no feedback) leave the interval alone.

Defaults: Nutch inc 0.4, dec 0.2; StormCrawler inc 0.5, dec 0.5. Scale (the crawlers' 60 s
to 90 days does not map to slots): a new URL starts at the round-robin period n/C (n the
number of URLs after the add, at least 1), ``min_interval`` = 1 slot (a URL cannot be polled
more than once per slot) and ``max_interval`` = ``max_factor`` (default 10) times n/C at the
time of each update, unless given in slots.

Selection with a fixed budget: each slot polls the C URLs with the largest overdue ratio
(slots since the last poll) / interval. With ``fill_budget=True`` (default) the whole budget
is used even when fewer than C URLs are due (ratio >= 1): a crawler with a fixed capacity
gains nothing by idling, so the least under-due URLs are polled early. With
``fill_budget=False`` only due URLs are polled (Nutch's generator), possibly fewer than C.
New URLs start with a random phase (ratio uniform in [0, 1)) so that a large batch is spread
over one period instead of being polled in id order. Per slot: one pass over n floats and one
``argpartition``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from crawler.schedulers._base import BoolArray, FloatArray, IndexArray, Scheduler
from crawler.schedulers._realize import top_k

VARIANTS: dict[str, tuple[float, float]] = {"nutch": (0.4, 0.2), "stormcrawler": (0.5, 0.5)}


def _positive(value: Any, what: str, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        out = math.nan
    if not (math.isfinite(out) and out > 0):
        raise ValueError(f"{what} must be a positive number, got {value!r}")
    return out


class AdaptiveInterval(Scheduler):
    """Per-URL adaptive revisit interval; polls the C most overdue URLs each slot."""

    name: ClassVar[str] = "adaptive"
    _uses_credit: ClassVar[bool] = False
    _url_fields: ClassVar[tuple[str, ...]] = ("interval", "last")

    def __init__(
        self,
        capacity: float,
        *,
        seed: int | None = None,
        realization: str = "stride",
        variant: str = "nutch",
        inc: float | None = None,
        dec: float | None = None,
        min_interval: float = 1.0,
        max_interval: float | None = None,
        max_factor: float = 10.0,
        fill_budget: bool = True,
    ) -> None:
        super().__init__(capacity, seed=seed, realization=realization)
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}: choose one of {', '.join(VARIANTS)}")
        default_inc, default_dec = VARIANTS[variant]
        inc_value = default_inc if inc is None else _positive(inc, "inc")
        dec_value = default_dec if dec is None else _positive(dec, "dec")
        assert inc_value is not None and dec_value is not None
        if dec_value >= 1:
            raise ValueError(f"dec must be in (0, 1), got {dec!r}")
        low = _positive(min_interval, "min_interval")
        assert low is not None
        if low < 1:
            raise ValueError(f"min_interval must be at least 1 slot, got {min_interval!r}")
        high = _positive(max_interval, "max_interval", allow_none=True)
        if high is not None and high < low:
            raise ValueError("max_interval must not be below min_interval")
        factor = _positive(max_factor, "max_factor")
        assert factor is not None
        self.variant = variant
        self.inc = inc_value
        self.dec = dec_value
        self.min_interval = low
        self.max_interval = high
        self.max_factor = factor
        self.fill_budget = bool(fill_budget)
        self._interval: FloatArray = np.empty(0, dtype=np.float64)
        self._last: FloatArray = np.empty(0, dtype=np.float64)

    # ----- public -----------------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        return {
            **super().params(),
            "variant": self.variant,
            "inc": self.inc,
            "dec": self.dec,
            "min_interval": self.min_interval,
            "max_interval": self.max_interval,
            "max_factor": self.max_factor,
            "fill_budget": self.fill_budget,
        }

    def interval_bounds(self, n: int | None = None) -> tuple[float, float]:
        """(min, max) interval in slots for n URLs (default: the current number)."""
        if self.max_interval is not None:
            return self.min_interval, self.max_interval
        period = max(1.0, (self.size if n is None else n) / self.capacity)
        return self.min_interval, max(self.min_interval, self.max_factor * period)

    # ----- Scheduler hooks --------------------------------------------------------------

    def _initial_values(
        self, count: int, importance: FloatArray, rates: FloatArray
    ) -> dict[str, NDArray[Any]]:
        n = self.size + count
        low, high = self.interval_bounds(n)
        start = min(max(n / self.capacity, low), high)
        interval = np.full(count, start)
        phase = self._rng.random(count)
        return {"interval": interval, "last": self._slot - phase * interval}

    def _wanted(self) -> FloatArray:
        return np.minimum(1.0, 1.0 / self._interval)

    def _choose(self, k: int) -> IndexArray:
        now = float(self._slot)
        ratio = np.subtract(now, self._last)
        np.divide(ratio, self._interval, out=ratio)
        if self._guard is not None:
            ratio[~self._guard.allowed(self._slot)] = -np.inf  # paused, too soon, failing
        chosen = top_k(ratio, k)
        if self._guard is not None:
            chosen = chosen[ratio[chosen] > -np.inf]
        if not self.fill_budget:
            chosen = chosen[ratio[chosen] >= 1.0]
        self._last[chosen] = now
        self._touch(chosen)
        return chosen

    def _learn(self, pos: IndexArray, hits: BoolArray) -> None:
        low, high = self.interval_bounds()
        interval = self._interval[pos]
        if self.variant == "stormcrawler":
            shorter = (1.0 - self.dec) * interval + self.dec * low
        else:
            shorter = (1.0 - self.dec) * interval
        updated = np.where(hits, shorter, interval * (1.0 + self.inc))
        self._interval[pos] = np.clip(updated, low, high)
