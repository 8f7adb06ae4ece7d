"""Best Fit Decreasing: sites onto workers of given (possibly different) capacities.

Sites are taken largest weight first; each goes to the worker with the least room left
that still fits it. A site that fits nowhere opens a new bin, as the paper on packing
web sites onto crawler nodes does (Yazidi, *Solving the bin packing problem*); a service
with a fixed set of workers cannot open one, so the result says how many more workers of
what capacity the weights need (``Packing.shortfall``) and ``Packing.onto_workers`` puts
the overflowing sites on the workers with the most room, where the overload automaton
resolves it.

Cost: one sort, then per site a binary search in the sorted list of rooms and one pop and
one insert in it (O(B) each, B = bins): O(n log n + n B) with tiny constants for the tens
or hundreds of workers of a cluster. Measured in ``benchmarks/packing_cost.py``.

Quality: BFD never uses more than 11/9 OPT + 6/9 bins (the tight bound for first/best fit
decreasing with equal bins); the tests check it against brute force on small instances.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from crawler.cluster._types import (
    TOLERANCE,
    BoolArray,
    FloatArray,
    IntArray,
    capacities_array,
    weights_array,
)


@dataclass(frozen=True)
class Shortfall:
    """What the workers lack: ``workers`` more of ``capacity`` polls per slot each.

    ``oversized`` sites weigh more than ``capacity`` on their own: each needs a worker of
    at least its weight (``largest`` is the heaviest), since a site is never split."""

    workers: int
    capacity: float
    oversized: int = 0
    largest: float = 0.0

    def message(self) -> str:
        """One sentence for an operator."""
        text = (
            f"the learned weights need {self.workers} more worker(s) of capacity "
            f"{self.capacity:g} polls per slot"
        )
        if self.oversized:
            text += (
                f"; {self.oversized} site(s) alone need more than that (the largest "
                f"{self.largest:g} polls per slot)"
            )
        return text


@dataclass(frozen=True)
class Packing:
    """Sites packed into bins 0..B-1; bins 0..n_workers-1 are the given workers, the
    rest were opened because the sites did not fit."""

    assignment: IntArray
    loads: FloatArray
    capacities: FloatArray
    n_workers: int
    weights: FloatArray

    @property
    def bins_used(self) -> int:
        """Bins holding at least one site (the paper's 'nodes used')."""
        return int(np.unique(self.assignment).size)

    @property
    def opened(self) -> int:
        """Bins opened beyond the given workers."""
        return int(self.loads.size - self.n_workers)

    @property
    def overflow(self) -> BoolArray:
        """Sites that did not fit on the given workers."""
        flags: BoolArray = self.assignment >= self.n_workers
        return flags

    @property
    def shortfall(self) -> Shortfall | None:
        """How many more workers, of what capacity, the sites need (None: they fit)."""
        if self.opened == 0:
            return None
        extra = self.capacities[self.n_workers :]
        base = float(extra.min())
        oversized = extra > base + TOLERANCE
        return Shortfall(
            workers=self.opened,
            capacity=base,
            oversized=int(oversized.sum()),
            largest=float(extra.max()) if oversized.any() else 0.0,
        )

    def onto_workers(self) -> IntArray:
        """The assignment with every overflowing site on a given worker: each goes,
        largest first, to the worker with the most room left (possibly negative). Those
        workers are then overloaded; the overload automaton sheds or shrinks."""
        if self.n_workers == 0:
            raise ValueError("no workers to place the sites on")
        out = self.assignment.copy()
        over = np.flatnonzero(self.overflow)
        if over.size == 0:
            return out
        room = self.capacities[: self.n_workers] - self.loads[: self.n_workers]
        weights = self.weights[over]
        for k in np.argsort(-weights, kind="stable"):
            target = int(np.argmax(room))
            out[over[k]] = target
            room[target] -= weights[k]
        return out


def best_fit_decreasing(
    weights: ArrayLike,
    capacities: ArrayLike,
    *,
    loads: ArrayLike | None = None,
    new_capacity: float | None = None,
) -> Packing:
    """Pack sites of ``weights`` onto workers of ``capacities`` by Best Fit Decreasing.

    ``loads``: what each worker already carries (default 0), for placing a few sites into
    a running assignment. ``new_capacity``: capacity of the bins opened when a site fits
    nowhere (default: the largest given capacity); a site heavier than that opens a bin
    of its own weight. Ties (equal weights, equal rooms) go to the lower index."""
    w = weights_array(weights)
    caps = capacities_array(capacities) if np.size(capacities) else np.zeros(0)
    start = np.zeros(caps.size) if loads is None else weights_array(loads, "loads")
    if start.shape != caps.shape:
        raise ValueError("loads must give one value per worker")
    if new_capacity is None:
        new_capacity = float(caps.max()) if caps.size else float(w.max(initial=1.0)) or 1.0
    if not math.isfinite(new_capacity) or new_capacity <= 0:
        raise ValueError("new_capacity must be a positive number")
    bin_caps: list[float] = caps.tolist()
    bin_loads: list[float] = start.tolist()
    # rooms sorted ascending, with the bin of each; equal rooms keep the lower bin first
    order_bins = sorted(range(caps.size), key=lambda b: (bin_caps[b] - bin_loads[b], b))
    rooms = [bin_caps[b] - bin_loads[b] for b in order_bins]
    ids = list(order_bins)
    assignment = np.empty(w.size, dtype=np.int64)
    order = np.argsort(-w, kind="stable")
    for site, weight in zip(order.tolist(), w[order].tolist(), strict=True):
        j = bisect_left(rooms, weight - TOLERANCE)
        if j < len(rooms):
            b = ids[j]
            room = rooms.pop(j) - weight
            ids.pop(j)
        else:
            b = len(bin_caps)
            cap = max(new_capacity, weight)
            bin_caps.append(cap)
            bin_loads.append(0.0)
            room = cap - weight
        bin_loads[b] += weight
        assignment[site] = b
        k = bisect_left(rooms, room)
        # after equal rooms of lower bins (bisect_left puts it first; step past lower ids)
        while k < len(rooms) and rooms[k] == room and ids[k] < b:
            k += 1
        rooms.insert(k, room)
        ids.insert(k, b)
    return Packing(
        assignment=assignment,
        loads=np.asarray(bin_loads, dtype=np.float64),
        capacities=np.asarray(bin_caps, dtype=np.float64),
        n_workers=int(caps.size),
        weights=w,
    )
