"""Several workers, one crawl: sites packed onto workers (pure algorithms, no I/O).

The coordinator of a cluster decides which worker polls which site. Everything here is a
function of NumPy arrays, for the service to call and the simulator to exercise:

- ``site_weights``: a site's wanted polls per slot, the sum over its URLs;
- ``best_fit_decreasing``: sites onto workers of (possibly different) capacities, and
  the shortfall (how many more workers of what capacity) when they do not fit;
- ``subset_sum``: which sites an overloaded worker keeps;
- ``OverloadAutomata`` and ``shrink_to_fit``: the per-worker overload automaton of the
  paper on packing web sites onto crawler nodes (Yazidi, *Solving the bin packing
  problem*), and its "shrink the most-penalized pages" remedy;
- ``repack``: follow joins, departures and drift, moving the least weight;
- ``shared_multiplier_split``: budgets that keep the global Lagrange optimum across
  workers.

>>> from crawler import cluster
>>> cluster.best_fit_decreasing([5, 4, 3, 3], [8, 8]).assignment.tolist()
[0, 1, 0, 1]
"""

from crawler.cluster._bfd import Packing, Shortfall, best_fit_decreasing
from crawler.cluster._overload import (
    DEFAULT_REGISTER,
    DEFAULT_STATES,
    DEFAULT_THRESHOLD,
    OverloadAutomata,
    penalties,
    record_outcomes,
    shrink_to_fit,
)
from crawler.cluster._partition import Split, partition_value, shared_multiplier_split
from crawler.cluster._repack import UNASSIGNED, Repack, balanced_fill, repack
from crawler.cluster._subset import EXACT_MAX, greedy_subset, subset_sum
from crawler.cluster._types import IntArray
from crawler.cluster._weights import site_weights

__all__ = [
    "DEFAULT_REGISTER",
    "DEFAULT_STATES",
    "DEFAULT_THRESHOLD",
    "EXACT_MAX",
    "UNASSIGNED",
    "IntArray",
    "OverloadAutomata",
    "Packing",
    "Repack",
    "Shortfall",
    "Split",
    "balanced_fill",
    "best_fit_decreasing",
    "greedy_subset",
    "partition_value",
    "penalties",
    "record_outcomes",
    "repack",
    "shared_multiplier_split",
    "shrink_to_fit",
    "site_weights",
    "subset_sum",
]
