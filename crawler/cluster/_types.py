"""Array aliases and input checks shared by the packing modules."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

#: weights within this many polls per slot of a room still fit (float sums drift by ~1e-13)
TOLERANCE = 1e-9


def weights_array(weights: ArrayLike, what: str = "weights") -> FloatArray:
    """A 1-D float array of finite, non-negative values (ValueError otherwise)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1:
        raise ValueError(f"{what} must be a 1-D array")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"{what} must be finite and non-negative")
    return w


def capacities_array(capacities: ArrayLike) -> FloatArray:
    """Worker capacities: a 1-D array of finite, positive polls per slot."""
    c = np.asarray(capacities, dtype=np.float64)
    if c.ndim != 1:
        raise ValueError("capacities must be a 1-D array")
    if not np.all(np.isfinite(c)) or np.any(c <= 0):
        raise ValueError("capacities must be finite and positive")
    return c
