"""Compiled loops (numba) of the few passes that bound a slot's cost at a million URLs.

Why loops are written here by hand: NumPy runs each operation as its own pass over its
arrays, and a slot's hot paths chain several over the same rows. The stride step alone was
two passes over all n rows (``credit += step``, then ``flatnonzero(credit >= 1)``), the
guard's credit rule a stable sort of the picks by host, and a polled URL's update about
thirty operations on a slot's 10,000 rows, each gathering from or scattering into a million
rows. numba compiles one loop that does each in a single pass, with the same float32
arithmetic in the same order (so the same picks as the NumPy code it replaced): measured
at a million URLs on 2 cores (``benchmarks/scheduler_speed.py``, docs/results.md).

The kernels are pure functions of arrays (no I/O, no state of their own), compiled on first
use and cached on disk beside this module (numba's ``cache=True``; where that is not
writable numba compiles again in each process). ``nogil``: a service thread running a slot
leaves the event loop's thread free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
from numpy.typing import NDArray

F = TypeVar("F", bound=Callable[..., Any])


def _compiled(function: F) -> F:
    """``function`` compiled by numba (typed as it was: numba's decorator is untyped)."""
    return cast(F, numba.njit(cache=True, nogil=True)(function))


@_compiled
def step_and_due(
    credit: NDArray[np.float32],
    x: NDArray[np.float32],
    factor: np.float32,
    clip: bool,
    group: NDArray[Any],
    held: NDArray[np.bool_],
) -> tuple[NDArray[np.intp], NDArray[np.float32], NDArray[np.intp]]:
    """The stride step: ``credit += x * factor`` (each step at most 1 when ``clip``; NaN
    stays NaN), in float32. Returns the rows whose credit is then >= 1, ascending, split
    by whether their group is ``held`` (index by group; a row of no group, -1, is not
    held; an empty ``held`` holds none): the others with the key of their rank,
    ``credit + x * factor`` (the credit after one more step, unclipped), then the held
    ones."""
    n = credit.size
    free = np.empty(n, dtype=np.intp)
    key = np.empty(n, dtype=np.float32)
    waiting = np.empty(n, dtype=np.intp)
    some_held = held.size > 0
    count = 0
    count_held = 0
    for i in range(n):
        step = x[i] * factor
        value = credit[i] + (np.float32(1.0) if clip and step > 1.0 else step)
        credit[i] = value
        if value >= 1.0:
            g = group[i] if some_held else -1
            if g >= 0 and held[g]:
                waiting[count_held] = i
                count_held += 1
            else:
                free[count] = i
                key[count] = value + step
                count += 1
    return free[:count].copy(), key[:count].copy(), waiting[:count_held].copy()


@_compiled
def within_credit(
    order: NDArray[np.intp],
    group: NDArray[Any],
    credit: NDArray[np.float64],
    limit: int,
) -> NDArray[np.bool_]:
    """Which rows of ``order`` their group's credit lets in: in order, at most
    floor(credit + 1e-9) rows of each group whose credit is not +inf (none where it is NaN;
    a row of no group, -1, or of an uncapped one, credit +inf, always passes), at most
    ``limit`` in all.
    ``credit`` is lowered by the rows kept."""
    keep = np.zeros(order.size, dtype=np.bool_)
    kept = np.zeros(credit.size, dtype=np.int64)
    total = 0
    for j in range(order.size):
        if total >= limit:
            break
        g = group[order[j]]
        if g >= 0 and credit[g] != np.inf:
            if not kept[g] < np.floor(credit[g] + 1e-9):  # NaN credit: none
                continue
            kept[g] += 1
        keep[j] = True
        total += 1
    for g in range(credit.size):
        if kept[g]:
            credit[g] -= kept[g]
    return keep
