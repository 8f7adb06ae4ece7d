"""A cluster worker's own view of whether its leases still hold: the renew deadline.

The database fences what a worker commits, but nothing there stops a worker that cannot
reach the database from sending requests: its sites move to another worker once its
heartbeat is older than the worker timeout (by the server's clock), and from then on two
workers would poll them. So a worker fences itself, as Kubernetes' leader election does:
it may poll only while its last successful renewal (heartbeat) is younger than a renew
deadline shorter than the lease (``Settings.effective_renew_deadline``).

Decisions:

* **Its own monotonic clock.** The worker never compares its clock with the server's. A
  renewal counts from the moment it was *sent* (``time.monotonic()`` before the heartbeat
  call), not from its answer: the server stamps ``heartbeat_at = now()`` after that
  moment, so the worker's deadline always ends before the server's lease does, by at
  least ``worker timeout - renew deadline``, however long the answer took to come back.
* **Lapsed means re-sync.** A worker whose deadline passed may have lost its sites; when
  it renews again it must read its leases afresh before it polls (``needs_sync``): the
  old ones may belong to another worker by now. A renewal sent after the previous one's
  deadline is a lapse too, even if nobody looked in between (a paused process wakes
  with its heartbeat thread renewing at once).
* **In flight.** ``lapse()`` returns when the deadline passes without a renewal (it
  follows renewals made meanwhile), so a slot in flight is cut there: its queued polls are
  not sent and those in flight are cancelled.
"""

from __future__ import annotations

import asyncio
import threading
import time


class RenewDeadline:
    """When this worker last renewed its leases, and whether it may still poll."""

    def __init__(self, deadline_s: float) -> None:
        if deadline_s <= 0:
            raise ValueError("the renew deadline must be positive")
        self.deadline_s = deadline_s
        self._renewed: float | None = None  # monotonic time the last good renewal was sent
        self._lapsed = False  # passed its deadline since its last sync of the leases
        #: when the first renewal since the lapse was sent (None: none yet): a sync begun
        #: after it ends the lapse, however many renewals come while it reads
        self._since: float | None = None
        self._mutex = threading.Lock()  # renewals come from the heartbeat thread
        self.lapses_total = 0

    def renewed(self, sent_at: float) -> None:
        """A renewal sent at ``sent_at`` (monotonic) succeeded. Sent after the deadline of
        the one before, it ends a lapse that nobody may have looked at yet (a paused
        process: its heartbeat thread renews as it wakes): the leases are read again."""
        with self._mutex:
            old = self._renewed
            if old is not None and sent_at >= old + self.deadline_s and not self._lapsed:
                self._lapsed = True
                self.lapses_total += 1
                self._since = None
            if old is None or sent_at > old:
                self._renewed = sent_at
                if self._lapsed and self._since is None:
                    self._since = sent_at

    def expires_at(self) -> float:
        """The monotonic time polling must stop at unless renewed (-inf: never renewed)."""
        renewed = self._renewed
        return float("-inf") if renewed is None else renewed + self.deadline_s

    def valid(self) -> bool:
        """True while the last renewal is younger than the deadline; notes a lapse."""
        if time.monotonic() < self.expires_at():
            return True
        with self._mutex:
            if not self._lapsed:
                self._lapsed = True
                self.lapses_total += 1
                self._since = None
        return False

    @property
    def needs_sync(self) -> bool:
        """The deadline passed since the leases were last read: read them before polling."""
        return self._lapsed

    def synced(self, read_at: float) -> None:
        """The leases were read by a sync that began at ``read_at`` (monotonic), after the
        first renewal since the lapse and before the deadline: the lapse is over. (Before,
        the sync had to begin after the *last* renewal: one more heartbeat during a sync
        longer than ``heartbeat_s``, as under load, kept the worker from polling for
        another slot.)"""
        with self._mutex:
            since = self._since
            if self._lapsed and since is not None and since <= read_at < self.expires_at():
                self._lapsed = False
                self._since = None

    async def lapse(self) -> None:
        """Return once the deadline passes without a renewal (at once if it has)."""
        while True:
            left = self.expires_at() - time.monotonic()
            if left <= 0 or self._lapsed:
                self.valid()  # notes the lapse
                return
            await asyncio.sleep(left)
