"""Lowering the scheduling priority of the calling thread (Linux: a thread's niceness is
its own, and the threads it starts inherit it).

The delivery process runs its event loop, HTTP sends and payload making at the lowest
priority (``delivery_nice``) but its database transactions on one thread started at the
service's priority before: a niced thread that holds SQLite's one write lock waits for
CPU behind every thread of normal priority, and the crawl's slot commit waits for it
(priority inversion; ``_deliverer.py``). Raising a priority again needs privileges, so the
thread that keeps it is started first.
"""

from __future__ import annotations

import logging
import os

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
