"""Turning wanted frequencies into the URLs of one slot (docs/schedulers.md).

Both realizations aim to poll URL i with long-run frequency y_i = min(1, lam * x_i), where
lam is chosen so that sum(y) = C: the whole capacity is used even while sum(x) < C, and
no URL is asked for more than one poll per slot.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
#: stride credits: float64, or float32 where a scheduler saves the memory
CreditArray = NDArray[np.float64] | NDArray[np.float32]
IndexArray = NDArray[np.intp]

REALIZATIONS = ("stride", "sampling")


def poll_shares(x: FloatArray, total: float, capacity: float) -> FloatArray:
    """y_i = min(1, lam x_i) with sum(y) = min(C, number of URLs with x_i > 0)."""
    if x.size == 0 or total <= 0:
        return np.zeros_like(x)
    lam = capacity / total
    if lam * float(x.max()) <= 1.0:
        return x * lam
    # Water-fill: cap the largest at 1 and spread the rest over the others.
    capped = np.zeros(x.size, dtype=bool)
    for _ in range(64):
        new_capped = lam * x >= 1.0
        if np.array_equal(new_capped, capped):
            break
        capped = new_capped
        rest = float(x[~capped].sum())
        room = capacity - float(capped.sum())
        if rest <= 0 or room <= 0:
            break
        lam = room / rest
    return np.minimum(1.0, lam * x)


def top_k(values: FloatArray, k: int) -> IndexArray:
    """Indices of the k largest values, in no particular order."""
    if k <= 0:
        return np.empty(0, dtype=np.intp)
    if k >= values.size:
        return np.arange(values.size, dtype=np.intp)
    return np.argpartition(values, values.size - k)[values.size - k :].astype(np.intp)


def stride_pick(credit: CreditArray, shares: FloatArray, k: int) -> IndexArray:
    """Add this slot's shares to the credits; take the k largest credits >= 1, pay 1 each.

    ``credit`` is updated in place.
    """
    credit += shares
    # Only the due URLs (credit >= 1) compete: ranking those few instead of all n credits
    # is the same choice, several times cheaper at a million URLs.
    due = np.flatnonzero(credit >= 1.0)
    if due.size > k:
        due = due[np.argpartition(credit[due], due.size - k)[due.size - k :]]
    chosen = due.astype(np.intp, copy=False)
    credit[chosen] -= 1.0
    return chosen


def sampling_pick(x: FloatArray, k: int, rng: np.random.Generator) -> IndexArray:
    """Draw k distinct indices with probability proportional to x (the paper's sampler)."""
    positive = int(np.count_nonzero(x > 0))
    k = min(k, positive)
    if k <= 0:
        return np.empty(0, dtype=np.intp)
    if k == 1:
        cumulative = np.cumsum(x)
        target = rng.random() * cumulative[-1]
        index = int(np.searchsorted(cumulative, target, side="right"))
        return np.array([min(index, x.size - 1)], dtype=np.intp)
    # Exponential race (Efraimidis-Spirakis): the k smallest E_i / x_i are a weighted
    # sample without replacement.
    with np.errstate(divide="ignore"):
        keys = rng.standard_exponential(x.size) / x
    return top_k(-keys, k)
