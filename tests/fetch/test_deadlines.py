"""The fetcher's network timeouts on one timer: the same expiry as ``asyncio.timeout``."""

from __future__ import annotations

import asyncio

import pytest

from crawler.fetch._deadlines import Deadlines


async def test_a_timeout_ends_its_block_at_its_time_with_timeout_error() -> None:
    deadlines = Deadlines()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        async with deadlines.at(started + 0.1):
            await asyncio.sleep(5)
    assert 0.09 <= loop.time() - started < 1.0


async def test_only_the_blocks_past_their_time_end_and_in_order() -> None:
    deadlines = Deadlines()
    loop = asyncio.get_running_loop()
    ended: list[tuple[int, str, float]] = []

    async def block(k: int, timeout: float, takes: float) -> None:
        async with deadlines.at(loop.time() + timeout):
            try:
                await asyncio.sleep(takes)
            except asyncio.CancelledError:
                ended.append((k, "cut", loop.time()))
                raise
        ended.append((k, "done", loop.time()))

    started = loop.time()
    tasks = []
    for k, takes in enumerate([1.0, 0.02, 1.0, 0.02, 0.02, 1.0]):
        tasks.append(asyncio.ensure_future(block(k, 0.3, takes)))
        await asyncio.sleep(0.01)  # later starts end later: every one is queued
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert [type(r) for r in results] == [
        TimeoutError, type(None), TimeoutError, type(None), type(None), TimeoutError
    ]  # fmt: skip
    cuts = [(k, at - started) for k, how, at in ended if how == "cut"]
    assert [k for k, _ in cuts] == [0, 2, 5]
    for k, at in cuts:  # each at its own time (started 10 ms apart), not the first one's
        assert 0.3 + 0.01 * k - 0.005 <= at < 0.3 + 0.01 * k + 0.25, (k, at)


async def test_a_timeout_ending_before_the_queued_ones_still_ends_on_time() -> None:
    deadlines = Deadlines()
    loop = asyncio.get_running_loop()

    async def long_one() -> None:
        async with deadlines.at(loop.time() + 10):
            await asyncio.sleep(0.5)

    waiting = asyncio.ensure_future(long_one())
    await asyncio.sleep(0.01)
    started = loop.time()
    with pytest.raises(TimeoutError):  # out of order: a timer of its own
        async with deadlines.at(started + 0.05):
            await asyncio.sleep(5)
    assert loop.time() - started < 0.4
    await waiting  # not cut
    deadlines.close()


async def test_an_ended_block_leaves_its_task_alone() -> None:
    deadlines = Deadlines()
    loop = asyncio.get_running_loop()
    async with deadlines.at(loop.time() + 0.05):
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.15)  # past the time: no cancellation reaches the task
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    deadlines = Deadlines()
    loop = asyncio.get_running_loop()
    entered = asyncio.Event()

    async def block() -> None:
        async with deadlines.at(loop.time() + 0.2):
            entered.set()
            await asyncio.sleep(5)

    task = asyncio.ensure_future(block())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
