"""Start-up steps that wait for the database instead of ending the process.

A database restart refuses connections for tens of seconds, and an orchestrator starts a
crawler's processes and its PostgreSQL in no particular order. Once running, every step of
a slot already waits for its database (a failed commit is kept and retried, a failed read
leaves the slot out). A process that cannot reach the database at start-up must do the
same: exit there, and a worker of a cluster stays gone (nothing restarts it under a plain
``crawler run``) while the others carry its share. So each start-up step that reads or
writes the database (the service lock, migrations, the settings, registering, loading)
is retried while the database is unavailable (``StoreUnavailable``: refused, dropped,
timed out), with an exponential back-off up to ``MAX_WAIT_S``, each wait logged with what
is waited for. Only unavailability waits: any other error (a lock held by another service,
a bad schema) ends the start as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from crawler.store import StoreUnavailable

log = logging.getLogger("crawler.service")

T = TypeVar("T")

#: the first wait after a failed try, doubled after each until ``MAX_WAIT_S``
FIRST_WAIT_S = 0.5
MAX_WAIT_S = 5.0


async def waiting_for_database(
    what: str,
    step: Callable[[], Awaitable[T]],
    give_up: asyncio.Event | None = None,
    *,
    first_wait_s: float = FIRST_WAIT_S,
    max_wait_s: float = MAX_WAIT_S,
) -> T:
    """``await step()``, tried again while it raises ``StoreUnavailable``; ``what`` names
    the step in the log. When ``give_up`` is set (the process was told to stop) during a
    wait, the last error is raised."""
    wait = first_wait_s
    tries = 0
    while True:
        try:
            result = await step()
        except StoreUnavailable as exc:
            tries += 1
            log.warning(
                "start-up waits for the database to %s (try %d failed: %s); next try in %.3g s",
                what,
                tries,
                exc,
                wait,
            )
            if give_up is None:
                await asyncio.sleep(wait)
            else:
                try:
                    await asyncio.wait_for(give_up.wait(), wait)
                except TimeoutError:
                    pass
                else:
                    raise
            wait = min(max_wait_s, 2 * wait)
            continue
        if tries:
            log.info("start-up: the database answered; %s done after %d failed tries", what, tries)
        return result


def in_thread(call: Callable[[], T]) -> Callable[[], Awaitable[T]]:
    """A blocking store call as a step for ``waiting_for_database`` (run in a thread)."""

    async def step() -> T:
        return await asyncio.to_thread(call)

    return step
