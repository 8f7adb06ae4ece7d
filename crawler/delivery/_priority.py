"""Lowering the scheduling priority of the calling thread (Linux: a thread's niceness is
its own, and the threads it starts inherit it), and of a whole process: its own
scheduling group (``own_cpu_group``).

The delivery process runs its event loop, HTTP sends and payload making at the lowest
priority (``delivery_nice``) but its database transactions on one thread started at the
service's priority before: a niced thread that holds SQLite's one write lock waits for
CPU behind every thread of normal priority, and the crawl's slot commit waits for it
(priority inversion; ``_deliverer.py``). Raising a priority again needs privileges, so the
thread that keeps it is started first.

Niceness orders threads within one scheduling group only. Linux puts each session in a
group of its own (autogroup, on by default) and shares the CPU between the groups first:
a niced delivery process in the service's session still had the CPU it used charged to
the service's group, so on a machine other jobs keep busy the crawl's share fell by about
what delivery used, niced or not (``benchmarks/delivery.py``, docs/results.md). On
PostgreSQL the delivery process therefore starts a session of its own and lowers that
group's priority (``/proc/self/autogroup``): then it runs on CPU no other group wants. Not
on SQLite: there its writes share the one write lock with the crawl's commits, and a
group at the lowest priority holding it would make them wait (the inversion above, at
the group's level). Where the service runs in a cgroup of its own (systemd with CPU
accounting), autogroup does not apply and this changes nothing.
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
