"""From per-slot counts to per-window series and a run's summary.

Per slot the runner records: polls, hits, the value of the hits (sum of w_i over hit URLs;
equal to hits without importance), the limit in force and the expected value of the
slot's changes (sum w_i p_i). Ratio to the limit = value / limit (thesis: weighted hits);
retrieved importance = value / (sum w_i p_i) (thesis §7.2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

LEVELS = (0.90, 0.95)


@dataclass
class SlotRecord:
    """Per-slot measurements of one run (arrays of length slots)."""

    polls: NDArray[np.int32]
    hits: NDArray[np.int32]
    value: FloatArray
    limit: FloatArray
    changes: FloatArray

    @classmethod
    def empty(cls, slots: int) -> SlotRecord:
        """Zeroed arrays for ``slots`` slots."""
        return cls(
            polls=np.zeros(slots, dtype=np.int32),
            hits=np.zeros(slots, dtype=np.int32),
            value=np.zeros(slots),
            limit=np.zeros(slots),
            changes=np.zeros(slots),
        )


def default_window(slots: int) -> int:
    """The window of the series and of the moving average: max(1000, S/200), at most S."""
    return max(1, min(slots, max(1000, slots // 200)))


def window_series(rec: SlotRecord, window: int) -> dict[str, list[float]]:
    """Consecutive windows of ``window`` slots (the last may be shorter)."""
    slots = rec.polls.size
    starts = np.arange(0, slots, window)
    ends = np.minimum(starts + window, slots)

    def total(a: NDArray[np.int32] | FloatArray) -> FloatArray:
        return np.asarray(np.add.reduceat(a.astype(np.float64), starts), dtype=np.float64)

    length = (ends - starts).astype(np.float64)
    polls, hits, value = total(rec.polls), total(rec.hits), total(rec.value)
    limit, changes = total(rec.limit), total(rec.changes)
    return {
        "slot": ends.astype(np.float64).tolist(),
        "hits_per_slot": (hits / length).tolist(),
        "hits_per_poll": _divide(hits, polls).tolist(),
        "retrieved_importance": _divide(value, changes).tolist(),
        "limit": (limit / length).tolist(),
        "ratio": _divide(value, limit).tolist(),
    }


def summarize(rec: SlotRecord, window: int) -> dict[str, float | int | None]:
    """Whole-run and second-half figures, and the slots needed to reach 90% / 95%."""
    slots = rec.polls.size
    half = slots // 2
    second = slice(half, slots)
    ratio = _divide(rec.value, rec.limit)
    out: dict[str, float | int | None] = {
        "final_ratio": float(ratio[second].mean()) if slots else float("nan"),
        "hits_per_slot": float(rec.hits[second].mean()) if slots else float("nan"),
        "hits_per_poll": _ratio(rec.hits[second].sum(), rec.polls[second].sum()),
        "retrieved_importance": _ratio(rec.value[second].sum(), rec.changes[second].sum()),
        "limit": float(rec.limit[second].mean()) if slots else float("nan"),
        "value_per_slot": float(rec.value[second].mean()) if slots else float("nan"),
        "total_polls": int(rec.polls.sum()),
        "total_hits": int(rec.hits.sum()),
        "ratio_whole_run": _ratio(rec.value.sum(), rec.limit.sum()),
    }
    moving = moving_average(ratio, window)
    for level in LEVELS:
        out[f"slots_to_{round(level * 100)}"] = first_reach(moving, level, window)
    return out


def moving_average(values: FloatArray, window: int) -> FloatArray:
    """Trailing mean over ``window`` slots; entry j covers slots j+1..j+window (1-based)."""
    if values.size < window:
        return np.empty(0)
    csum = np.concatenate([[0.0], np.cumsum(values)])
    return np.asarray((csum[window:] - csum[:-window]) / window, dtype=np.float64)


def first_reach(moving: FloatArray, level: float, window: int) -> int | None:
    """The first slot (1-based) whose trailing window average reaches ``level``, or None."""
    above = np.flatnonzero(moving >= level)
    return int(above[0]) + window if above.size else None


def _divide(num: FloatArray, den: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return np.asarray(out, dtype=np.float64)


def _ratio(num: float | np.floating | np.integer, den: float | np.floating | np.integer) -> float:
    return float(num) / float(den) if float(den) > 0 else float("nan")
