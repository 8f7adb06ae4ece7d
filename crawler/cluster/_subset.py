"""Subset sum: which of an overloaded worker's sites stay (the largest total that fits).

Exact for up to ``EXACT_MAX`` sites by meet in the middle: the subset sums of each half
(2^(n/2) each, built by doubling), one sort, and for every left sum the largest right sum
that still fits (a binary search). 32 sites cost two 65,536-sum halves, about a
millisecond; beyond that the cost doubles with every two more sites, so larger sets take
the standard greedy approximation: sites in decreasing weight, each kept if it still
fits. Its gap to the capacity is provably below the lightest site left out (each one left
out was heavier than the room at its turn, and the room only shrinks), and a worker with
that many sites has mostly light ones.

Keeping the largest total that fits is the same as moving the least weight off the
worker: the stability goal of the re-pack.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from crawler.cluster._types import TOLERANCE, BoolArray, FloatArray, weights_array

#: up to this many items the answer is exact (meet in the middle)
EXACT_MAX = 32


def _all_sums(w: FloatArray) -> FloatArray:
    """Sums of all 2^k subsets; bit j of the index says whether item j is in."""
    sums = np.zeros(1)
    for value in w.tolist():
        sums = np.concatenate([sums, sums + value])
    return sums


def subset_sum(weights: ArrayLike, capacity: float) -> BoolArray:
    """A mask of the items to keep: the largest total weight that is at most ``capacity``.

    Exact for at most ``EXACT_MAX`` items, greedy beyond (see the module docstring)."""
    w = weights_array(weights)
    if not np.isfinite(capacity) or capacity < 0:
        raise ValueError("capacity must be finite and non-negative")
    n = w.size
    limit = capacity + TOLERANCE
    if w.sum() <= limit:
        return np.ones(n, dtype=np.bool_)
    if n > EXACT_MAX:
        return greedy_subset(w, capacity)
    half = n // 2
    left, right = _all_sums(w[:half]), _all_sums(w[half:])
    order = np.argsort(right, kind="stable")
    right_sorted = right[order]
    fits = left <= limit
    left_idx = np.flatnonzero(fits)
    pos = np.searchsorted(right_sorted, limit - left[left_idx], side="right") - 1
    # pos >= 0 always: the empty right subset (sum 0) fits with every fitting left sum
    totals = left[left_idx] + right_sorted[pos]
    best = int(np.argmax(totals))
    lmask, rmask = int(left_idx[best]), int(order[pos[best]])
    keep = np.zeros(n, dtype=np.bool_)
    for j in range(half):
        keep[j] = bool(lmask >> j & 1)
    for j in range(n - half):
        keep[half + j] = bool(rmask >> j & 1)
    return keep


def greedy_subset(weights: ArrayLike, capacity: float) -> BoolArray:
    """Greedy: items in decreasing weight, each kept if it still fits.

    Done in runs, not item by item: in the sorted order, find the first item that fits
    the room (a binary search), keep the longest run from it that fits (a binary search
    in the prefix sums), and repeat after the item that ended the run. The result is the
    item-by-item greedy's; a worker with 10,000 sites takes a handful of runs."""
    w = weights_array(weights)
    n = w.size
    keep_sorted = np.zeros(n, dtype=np.bool_)
    order = np.argsort(-w, kind="stable")
    ws = w[order]
    ascending = ws[::-1]
    prefix = np.concatenate([[0.0], np.cumsum(ws)])
    room = capacity + TOLERANCE
    at = 0
    while at < n:
        # ws is decreasing: the items that fit are the last searchsorted(...) ones
        first = max(at, n - int(np.searchsorted(ascending, room, side="right")))
        if first >= n:
            break
        end = int(np.searchsorted(prefix, prefix[first] + room, side="right")) - 1
        end = max(end, first + 1)  # ws[first] <= room: at least that one
        keep_sorted[first:end] = True
        room -= float(prefix[end] - prefix[first])
        at = end
    keep = np.zeros(n, dtype=np.bool_)
    keep[order] = keep_sorted
    return keep
