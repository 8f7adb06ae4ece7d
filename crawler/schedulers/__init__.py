"""Polling schedulers: pure Python and NumPy, no I/O (CONTRACTS.md section 1).

>>> from crawler import schedulers
>>> s = schedulers.create("lakg", capacity=3, seed=7)
"""

from crawler.schedulers._base import Scheduler, State
from crawler.schedulers._optimum import (
    expected_hits,
    limit,
    optimal_allocation,
    whole_slot_limit,
)
from crawler.schedulers._registry import create, names, restore, scheduler_class
from crawler.schedulers._state import SchedulerState

__all__ = [
    "Scheduler",
    "SchedulerState",
    "State",
    "create",
    "expected_hits",
    "limit",
    "names",
    "optimal_allocation",
    "restore",
    "scheduler_class",
    "whole_slot_limit",
]
