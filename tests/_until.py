"""Waiting, in an async test, for what real processes, servers and clocks make true.

One helper for the tests that watch a running service, a cluster of workers or a crawl
worker reach a state: each had its own copy, with its own timeout and failure message."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable


async def until(
    check: Callable[[], bool | Awaitable[bool]],
    timeout_s: float,
    what: str,
    *,
    every_s: float = 0.1,
    in_thread: bool = False,
) -> None:
    """Return once ``check()`` holds (a plain or a coroutine function), checked every
    ``every_s``; fail naming ``what`` after ``timeout_s``. ``in_thread``: ``check`` blocks
    (a database query) and runs in a thread, off the event loop the service under test runs
    on."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await asyncio.to_thread(check) if in_thread else check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        await asyncio.sleep(every_s)
