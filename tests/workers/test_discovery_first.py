"""Discovery's polls go before a polite host's queued re-polls. Real servers on loopback.

On a host that takes a few polls a slot, the scheduler's re-polls of it fill the slot; a
discovery poll (``want_body``) of the same host sent after them would wait behind all of
them, past the slot's deadline, every slot. It goes before the queued ones instead (not
before one already in flight).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from crawler.detect import ChangeDetector
from crawler.fetch import FetchConfig
from crawler.testsite.hostile import HostileServer
from crawler.workers import CrawlWorkers, InProcessPoller, PollAnswer, Poller, PollJob

DELAY_S = 0.4
CONFIG = FetchConfig(
    user_agent="crawler-tests/1.0",
    timeout_s=5.0,
    per_host_concurrency=1,
    per_host_min_delay_s=DELAY_S,
    allow_private_addresses=True,
    retries=0,
)


def job(url_id: int, server: HostileServer, path: str) -> PollJob:
    return PollJob(
        url_id, server.url(path), f"{server.host}:{server.port}", None, None, None, (), None, None
    )


async def answers_of(poller: Poller, jobs: list[PollJob], deadline: float) -> list[PollAnswer]:
    got: list[PollAnswer] = []
    async for chunk in poller.poll_chunks(jobs, deadline):
        got.extend(chunk)
    return got


@pytest.mark.parametrize("kind", ["crawl-workers", "in-process"])
async def test_a_discovery_poll_goes_before_the_hosts_queued_repolls(kind: str) -> None:
    poller: Poller = (
        CrawlWorkers(1, CONFIG, None, chunk=8)
        if kind == "crawl-workers"
        else InProcessPoller(CONFIG, None, ChangeDetector(workers=0))
    )
    await poller.start()
    try:
        async with HostileServer("127.0.0.1") as host:
            await answers_of(poller, [job(0, host, "/page/0")], time.monotonic() + 5)  # robots
            await asyncio.sleep(DELAY_S)
            repolls = [job(k, host, f"/page/{k}") for k in range(1, 6)]
            found = job(100, host, "/page/100")._replace(want_body=True)
            # room for three requests (0, 0.4 and 0.8 s) before the deadline
            deadline = time.monotonic() + 2.5 * DELAY_S
            slot = asyncio.ensure_future(answers_of(poller, repolls, deadline))
            await asyncio.sleep(0.05)  # the slot's re-polls are queued (the first in flight)
            discovered = await answers_of(poller, [found], deadline)
            slot_answers = {a.url_id: a for a in await slot}
    finally:
        await poller.aclose()
    assert [a.outcome for a in discovered] == ["ok"], discovered
    assert discovered[0].body is not None
    outcomes = [slot_answers[k].outcome for k in range(1, 6)]
    assert outcomes[:2] == ["ok", "ok"] and outcomes[2:] == ["deferred"] * 3, outcomes
