"""Polling schedulers: pure Python and NumPy, no I/O (contract: docs/schedulers.md).

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

__all__ = [
    "Scheduler",
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
