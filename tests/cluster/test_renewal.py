"""The renew deadline a cluster worker fences itself with (crawler/service/_renewal.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from crawler.service._renewal import RenewDeadline
from crawler.settings import Settings


def test_valid_until_the_deadline_from_when_the_renewal_was_sent() -> None:
    renewal = RenewDeadline(0.2)
    assert not renewal.valid()  # never renewed: no poll
    sent = time.monotonic() - 0.15  # a renewal whose answer took 0.15 s
    renewal.renewed(sent)
    assert renewal.valid()
    assert renewal.expires_at() == pytest.approx(sent + 0.2)
    renewal.renewed(sent - 1.0)  # an older renewal answered late moves nothing back
    assert renewal.expires_at() == pytest.approx(sent + 0.2)
    time.sleep(0.1)
    assert not renewal.valid()
    assert renewal.needs_sync and renewal.lapses_total == 1
    renewal.renewed(time.monotonic())
    assert renewal.valid() and renewal.needs_sync  # renewed, but the leases not re-read
    renewal.synced(time.monotonic() - 10.0)  # a read begun before the renewal: not enough
    assert renewal.needs_sync
    renewal.synced(time.monotonic())
    assert not renewal.needs_sync


def test_a_renewal_after_the_deadline_is_a_lapse_even_unobserved() -> None:
    """A paused process wakes with its heartbeat thread renewing at once: the renewal
    after the gap must still make it read its leases again before it polls."""
    renewal = RenewDeadline(0.2)
    renewal.renewed(time.monotonic() - 1.0)  # the last renewal before the pause
    renewal.renewed(time.monotonic())  # renewed on waking, before anyone checked
    assert renewal.valid()
    assert renewal.needs_sync and renewal.lapses_total == 1

    async def cut() -> None:
        await asyncio.wait_for(renewal.lapse(), 0.1)  # a slot in flight is cut at once

    asyncio.run(cut())


def test_lapse_follows_renewals_made_meanwhile() -> None:
    renewal = RenewDeadline(0.2)
    renewal.renewed(time.monotonic())

    async def scenario() -> float:
        began = time.monotonic()
        waiting = asyncio.ensure_future(renewal.lapse())
        await asyncio.sleep(0.15)
        renewal.renewed(time.monotonic())  # renewed in time: the lapse moves on
        await waiting
        return time.monotonic() - began

    took = asyncio.run(scenario())
    assert 0.33 <= took < 1.0
    assert renewal.needs_sync


def test_the_renew_deadline_lies_between_the_heartbeat_and_the_timeout() -> None:
    base = {"database_url": "postgresql://x/y", "cluster": True, "capacity": 4.0}
    settings = Settings(**base, heartbeat_s=2.0)
    assert settings.effective_worker_timeout() == 8.0
    assert settings.effective_renew_deadline() == pytest.approx(16 / 3)
    with pytest.raises(ValueError, match="renew_deadline_s"):
        Settings(**base, heartbeat_s=0.5, worker_timeout_s=2.0, renew_deadline_s=2.0)
    with pytest.raises(ValueError, match="renew_deadline_s"):
        Settings(**base, heartbeat_s=1.0, worker_timeout_s=1.2)


def test_a_renewal_during_the_sync_does_not_undo_it() -> None:
    """A sync after a lapse that takes longer than a heartbeat: the renewal made while it
    reads must not keep the worker from polling (under load, it kept workers away for one
    slot more after a database outage)."""
    renewal = RenewDeadline(1.0)
    renewal.renewed(time.monotonic() - 5.0)
    assert not renewal.valid() and renewal.needs_sync
    renewal.renewed(time.monotonic())  # the first renewal after the lapse
    began = time.monotonic()  # the sync begins
    time.sleep(0.01)
    renewal.renewed(time.monotonic())  # a heartbeat while it reads
    renewal.synced(began)
    assert not renewal.needs_sync and renewal.valid()
