"""What the constrained optimum respects, validated and in dense form (``Limits``), and
what it returns (``Constrained``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
IdArray = NDArray[np.int64]
IndexArray = NDArray[np.intp]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class Constrained:
    """The constrained optimum: ``x`` and what binds.

    ``level``: the global multiplier (0 when the budget does not bind: the caps and upper
    bounds leave part of it unused). ``groups``: the distinct group labels, sorted;
    ``group_level``: each group's own level (0 where its cap cannot bind);
    ``binding``: whether each group's cap binds at the optimum (its URLs are held below
    what the global multiplier alone would give them). ``feasible``: False when the lower
    bounds did not fit in a cap or in the budget (they were then scaled down, see
    ``solve_constrained``)."""

    x: FloatArray
    level: float
    groups: IdArray
    group_level: FloatArray
    binding: BoolArray
    feasible: bool


@dataclass(frozen=True)
class Limits:
    """Host groups with caps and per-URL bounds, validated and in dense form.

    ``group``: per URL the index into ``labels`` (-1: no group); ``cap``: per group the cap
    in polls per slot (inf: none); ``lower``/``upper``: per-URL bounds in polls per slot."""

    group: IndexArray
    labels: IdArray
    cap: FloatArray
    lower: FloatArray
    upper: FloatArray

    @classmethod
    def build(
        cls,
        n: int,
        groups: ArrayLike | None = None,
        caps: Mapping[int, float] | None = None,
        lower: ArrayLike | None = None,
        upper: ArrayLike | None = None,
    ) -> Limits:
        """Check and convert the constraints of n URLs (ValueError when malformed)."""
        if groups is None:
            group = np.full(n, -1, dtype=np.intp)
            labels: IdArray = np.empty(0, dtype=np.int64)
        else:
            raw = np.asarray(groups)
            if raw.shape != (n,) or (raw.size and not np.issubdtype(raw.dtype, np.integer)):
                raise ValueError("groups must be one integer label per URL (-1: no group)")
            raw = raw.astype(np.int64)
            if np.any(raw < -1):
                raise ValueError("group labels must be >= 0 (or -1 for no group)")
            labels = np.unique(raw[raw >= 0])
            group = np.full(n, -1, dtype=np.intp)
            grouped = raw >= 0
            group[grouped] = np.searchsorted(labels, raw[grouped])
        cap = np.full(labels.size, np.inf)
        for label, value in (caps or {}).items():
            v = float(value)
            if not (v > 0) or math.isnan(v):
                raise ValueError(f"the cap of group {label} must be positive, got {value!r}")
            at = int(np.searchsorted(labels, int(label)))
            if at < labels.size and labels[at] == int(label):
                cap[at] = v
        lo = _bound(lower, n, 0.0, "lower")
        hi = _bound(upper, n, 1.0, "upper")
        if np.any(lo > hi):
            raise ValueError("every lower bound must be at most its upper bound")
        return cls(group, labels, cap, lo, hi)

    @property
    def constrained(self) -> bool:
        """Whether anything here can bind (a finite cap, a lower bound > 0 or upper < 1)."""
        return bool(np.isfinite(self.cap).any() or np.any(self.lower > 0) or np.any(self.upper < 1))


def _bound(values: ArrayLike | None, n: int, default: float, what: str) -> FloatArray:
    if values is None:
        return np.full(n, default)
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise ValueError(f"{what} bounds must have one value per URL")
    if not np.all(np.isfinite(arr)) or np.any((arr < 0) | (arr > 1)):
        raise ValueError(f"{what} bounds must be polls per slot in [0, 1]")
    return arr
