"""Polling schedulers: pure Python and NumPy, no I/O (contract: docs/schedulers.md).

>>> from crawler import schedulers
>>> s = schedulers.create("lakg", capacity=3, seed=7)
"""

from crawler.schedulers._base import FloatArray, IdArray, Scheduler, State
from crawler.schedulers._constrained import (
    constrained_allocation,
    constrained_limit,
    constrained_whole_slot_limit,
    solve_constrained,
)
from crawler.schedulers._guard import FAILURE_KINDS, FailureKind, classify_failure
from crawler.schedulers._limits import Constrained, Limits
from crawler.schedulers._optimum import expected_hits, limit, optimal_allocation, whole_slot_limit
from crawler.schedulers._registry import create, names, restore, scheduler_class
from crawler.schedulers._state import SchedulerState

__all__ = [
    "FAILURE_KINDS",
    "Constrained",
    "FailureKind",
    "FloatArray",
    "IdArray",
    "Limits",
    "Scheduler",
    "SchedulerState",
    "State",
    "classify_failure",
    "constrained_allocation",
    "constrained_limit",
    "constrained_whole_slot_limit",
    "create",
    "expected_hits",
    "limit",
    "names",
    "optimal_allocation",
    "restore",
    "scheduler_class",
    "solve_constrained",
    "whole_slot_limit",
]
