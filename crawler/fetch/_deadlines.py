"""Network timeouts of a fetcher's requests on one timer: ``asyncio.timeout`` without a timer
handle per request.

Each request's attempt runs under a timeout (the fetch's budget left). ``asyncio.timeout``
gives each its own timer handle, pushed on the event loop's heap and cancelled out of it when
the request ends: 4-6 us of CPU per request (measured: ``asyncio.timeout`` entered and left
with 3,000 timers in the heap, Python 3.11), for a timeout that almost never fires. A
fetcher's timeouts mostly come in the order they end, though: a first attempt's budget is the
whole ``timeout_s``, so a later start ends later. ``Deadlines`` keeps those in a queue in that
order, with one timer for the first one still running; a timeout that would end before the
last one queued (a retry's or a redirect hop's, with less budget left) gets its own
``asyncio.timeout``. The expiry is the same as ``asyncio.timeout``'s: at its time the task is
cancelled, and leaving the block turns that cancellation (and no other) into ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from types import TracebackType

#: a timer handle is run once its time is within this of the loop's clock (as asyncio does)
_RESOLUTION = time.get_clock_info("monotonic").resolution


class Deadline:
    """One request's timeout: an async context manager, as ``asyncio.timeout_at(when)``."""

    __slots__ = ("_cancelling", "_deadlines", "_fallback", "_task", "done", "expired", "when")

    def __init__(self, deadlines: Deadlines, when: float) -> None:
        self._deadlines = deadlines
        self.when = when
        self.done = False
        self.expired = False
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        self._fallback: asyncio.Timeout | None = None

    async def __aenter__(self) -> Deadline:
        task = asyncio.current_task()
        if task is None or not self._deadlines.queue(self):  # out of order: a timer of its own
            self._fallback = asyncio.timeout_at(self.when)
            await self._fallback.__aenter__()
            return self
        self._task = task
        self._cancelling = task.cancelling()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.done = True
        if self._fallback is not None:
            await self._fallback.__aexit__(exc_type, exc, tb)
            return
        task, self._task = self._task, None  # (an ended one may wait in the queue a while)
        # an expired one takes its cancellation back; it was the only one: a timeout
        if (
            self.expired
            and task is not None
            and task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc

    def expire(self) -> None:
        """The time is up: cancel the task (``__aexit__`` makes it a ``TimeoutError``)."""
        self.expired = True
        if self._task is not None:
            self._task.cancel()


class Deadlines:
    """The queue of a fetcher's timeouts that end in the order they started, and its timer."""

    def __init__(self) -> None:
        self._queue: deque[Deadline] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def at(self, when: float) -> Deadline:
        """A timeout ending at ``when`` (the event loop's time): ``async with``."""
        return Deadline(self, when)

    def queue(self, deadline: Deadline) -> bool:
        """Queue ``deadline``; False if it ends before the last one queued (not queued)."""
        q = self._queue
        while q and q[0].done:  # (requests end mostly in order: this keeps the queue short)
            q.popleft()
        if q and q[-1].when > deadline.when:
            return False
        q.append(deadline)
        if self._timer is None or self._timer.when() > deadline.when:  # (ended ones went first)
            self._arm(deadline.when)
        return True

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_at(when, self._fire)

    def _fire(self) -> None:
        """Expire the queued timeouts whose time has come; the timer then waits for the next."""
        self._timer = None
        q = self._queue
        now = asyncio.get_running_loop().time()
        while q:
            first = q[0]
            if first.done:
                q.popleft()
            elif first.when < now + _RESOLUTION:
                q.popleft()
                first.expire()
            else:
                self._arm(first.when)
                return

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._queue.clear()
