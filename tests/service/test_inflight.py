"""The answer streams of polls that outlive their slot (``crawler.service._inflight``), read
from a scripted poller: what lands, what is carried, what a watch-list change cuts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence

from crawler.service._inflight import InFlight
from crawler.store import UrlRecord
from crawler.workers import PollAnswer, PollJob, deferred_answer


def _record(url_id: int, host: str) -> UrlRecord:
    return UrlRecord(url_id, f"http://{host}/{url_id}", host, None, None, None, None, None, ())


def _answer(job: PollJob, outcome: str) -> PollAnswer:
    """An answer with ``outcome`` ("running": the placeholder of a carried poll)."""
    return deferred_answer(job, "timeout")._replace(outcome=outcome, deferred=None)


class Scripted:
    """Answers each job "running" at once, then for good when ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def poll_chunks(
        self, jobs: Sequence[PollJob], deadline: float | None = None, linger: float | None = None
    ) -> AsyncGenerator[Sequence[PollAnswer], None]:
        yield [_answer(j, "running") for j in jobs]
        await self.release.wait()
        yield [_answer(j, "error") for j in jobs]


async def test_a_watch_list_change_cuts_only_the_carried_polls_of_urls_it_removed() -> None:
    poller = Scripted()
    inflight = InFlight(poller, linger_s=10.0, grace_s=1.0)
    records = {1: _record(1, "a.example"), 2: _record(2, "b.example")}
    jobs = [
        PollJob(r.id, r.url, r.host, None, None, None, (), None, None) for r in records.values()
    ]
    stream = inflight.start(jobs, records, deadline=0.0)
    arrival = await inflight.next(1.0, None)
    assert arrival is not None and stream.take(arrival[1]) == []  # both carried
    inflight.keep(stream)
    assert inflight.url_ids() == {1, 2}

    # URL 2 left the watch list: its poll is cut (its host counted), URL 1's goes on
    assert inflight.drop(lambda url_id: url_id != 2) == ["b.example"]
    assert inflight.url_ids() == {1}
    assert inflight.hosts() == {"a.example": 1}

    poller.release.set()
    arrival = await inflight.next(1.0, None)
    assert arrival is not None
    landed = arrival[0].take(arrival[1])
    assert [a.url_id for a in landed] == [1], "a cut poll's answer must not land"
    inflight.landed()
    assert not inflight.carrying
    await inflight.aclose()


class Silent:
    """Never answers (a poller stuck past its deadline); records when it is closed."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()

    async def poll_chunks(
        self, jobs: Sequence[PollJob], deadline: float | None = None, linger: float | None = None
    ) -> AsyncGenerator[Sequence[PollAnswer], None]:
        try:
            await asyncio.Event().wait()
            yield []
        finally:
            self.closed.set()


async def test_poll_until_ends_at_the_stop_and_leaves_the_unanswered_to_cut() -> None:
    poller = Silent()
    inflight = InFlight(poller, linger_s=None, grace_s=60.0)
    jobs = [_job(1, "a.example"), _job(2, "b.example")]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    stream = inflight.start(jobs, {}, deadline=loop.time() + 60.0)
    loop.call_later(0.05, stop.set)
    started = loop.time()
    got = [a async for a in inflight.poll_until(stream, loop.time() + 60.0, stop)]
    assert not got and loop.time() - started < 5.0  # the stop, not the deadline, ended it
    assert not stream.settled and [j.url_id for j in stream.unanswered()] == [1, 2]
    await inflight.close(stream)
    assert poller.closed.is_set()  # closing the stream cut the poller's batch


async def test_poll_until_gives_a_poller_past_its_deadline_only_the_grace() -> None:
    inflight = InFlight(Silent(), linger_s=None, grace_s=0.1)
    loop = asyncio.get_running_loop()
    stream = inflight.start([_job(1, "a.example")], {}, deadline=loop.time())
    started = loop.time()
    got = [a async for a in inflight.poll_until(stream, loop.time(), None)]
    assert not got and 0.05 < loop.time() - started < 5.0
    await inflight.close(stream)


def _job(url_id: int, host: str) -> PollJob:
    return PollJob(url_id, f"http://{host}/{url_id}", host, None, None, None, (), None, None)
