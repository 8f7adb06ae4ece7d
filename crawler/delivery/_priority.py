"""Lowering the scheduling priority of the delivery process: its threads' niceness
(``lower_priority``; Linux: a thread's niceness is its own, and the threads it starts
inherit it) and, on PostgreSQL, its scheduling group's (``own_cpu_group``).

Niceness orders threads within one scheduling group only. Linux puts each session in a
group of its own (autogroup, on by default) and shares the CPU between the groups first:
a niced delivery process in the service's session still had the CPU it used charged to
the service's group, so on a machine other jobs keep busy the crawl's share fell by about
what delivery used, niced or not (``benchmarks/delivery.py``, docs/results.md). On
PostgreSQL the delivery process therefore starts a session of its own and lowers that
group's priority (``/proc/self/autogroup``): then it runs on CPU no other group wants. Not
on SQLite: there its write transactions take the one write lock the crawl's slot commits
need, and a group at the lowest priority waits long for CPU while it holds it (tried: the
slot commits took up to twice as long in the phases with delivery, and delivery cost the
crawl more, docs/results.md). Keeping the deliverer's writes on a thread at the service's
priority (tried too) made the commits wait less, but delivery cost the crawl more in the
runs measured (that thread's CPU is taken at the crawl's priority). Where the service
runs in a cgroup of its own (systemd with CPU accounting), autogroup does not apply and
this changes nothing.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

log = logging.getLogger("crawler.delivery")


def lower_priority(niceness: int) -> None:
    """Add ``niceness`` to the calling thread's priority (threads it starts afterwards
    inherit it); where the system has no ``os.nice``, or refuses, it keeps its own."""
    if niceness <= 0 or not hasattr(os, "nice"):
        return
    try:
        os.nice(niceness)
    except OSError as exc:
        log.warning("delivery: cannot lower its priority (%s)", exc)


#: the kernel accepts one change of a group's niceness per tenth of a second, machine-wide
AUTOGROUP_TRIES = 20


def own_cpu_group(niceness: int) -> bool:
    """Move the calling process to a session, so a scheduling group, of its own, at
    ``niceness``; False where there is no autogroup or the system refuses."""
    group = Path("/proc/self/autogroup")
    if niceness <= 0 or not group.exists():
        return False
    try:
        os.setsid()
    except OSError as exc:
        log.warning("delivery: cannot start a session of its own (%s)", exc)
        return False
    for _ in range(AUTOGROUP_TRIES):
        try:
            group.write_text(str(niceness))
            return True
        except BlockingIOError:  # EAGAIN: another group changed within 0.1 s
            time.sleep(0.1)
        except OSError as exc:
            log.warning("delivery: cannot lower its group's priority (%s)", exc)
            return False
    return False
