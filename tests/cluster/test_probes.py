"""A gained site's probe: the most wanted of its URLs that may be polled now.

A worker polls one URL of each site it has just gained in its first slot. The probe goes
through the scheduler's guard (pauses and upper bounds hold across a move), so it must be
chosen among the URLs the guard allows: when the site's most wanted URL is paused or
within its bound's gap, another URL of the site is probed, and a site none of whose URLs
may be polled gets none.
"""

from __future__ import annotations

import numpy as np

from crawler import schedulers
from crawler.service._cluster import _probes


def _scheduler() -> schedulers.Scheduler:
    s = schedulers.create("bayes", capacity=2.0, seed=0)
    s.add(np.arange(1, 7), importance=np.array([0.1, 1.0, 0.1, 0.1, 1.0, 0.1]))
    return s


def test_probe_is_the_most_wanted_url_the_guard_allows() -> None:
    s = _scheduler()
    ids = np.arange(1, 7, dtype=np.int64)
    sites = ["a", "a", "a", "b", "b", "c"]
    s.select()
    wanted = dict(zip(*s.frequencies(), strict=True))
    assert wanted[2] > wanted[1] and wanted[5] > wanted[4]  # each site's most wanted
    assert _probes(s, {"a", "b"}, ids, sites).tolist() == [2, 5]
    s.pause([2, 4, 5])  # site a: another URL; site b: every URL paused
    probes = _probes(s, {"a", "b", "c"}, ids, sites).tolist()
    assert probes[0] in (1, 3) and probes[1:] == [6]
    assert s.add_to_selection(probes).tolist() == probes  # all allowed
