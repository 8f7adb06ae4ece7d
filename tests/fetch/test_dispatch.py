"""HostDispatcher: per-host order and width, a bound on runners, delays waited on timers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable

import pytest
from aiohttp import web

from crawler.fetch import Fetcher, FetchRequest, HostDispatcher


class Recorder:
    """A ``work`` that records starts and concurrency, each item taking ``seconds``."""

    def __init__(self, seconds: float = 0.01) -> None:
        self.seconds = seconds
        self.started: dict[str, list[int]] = defaultdict(list)
        self.start_times: dict[tuple[str, int], float] = {}
        self.active: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.total = 0
        self.peak_total = 0

    async def __call__(self, item: tuple[str, int]) -> None:
        host, n = item
        self.started[host].append(n)
        self.start_times[item] = time.monotonic()
        self.active[host] += 1
        self.total += 1
        self.peak[host] = max(self.peak[host], self.active[host])
        self.peak_total = max(self.peak_total, self.total)
        await asyncio.sleep(self.seconds)
        self.active[host] -= 1
        self.total -= 1


async def drained(dispatch: HostDispatcher[tuple[str, int]], timeout: float = 5.0) -> None:
    await asyncio.wait_for(dispatch.join(), timeout)
    assert dispatch.pending == 0


async def test_each_host_in_order_within_its_width() -> None:
    work = Recorder()
    dispatch = HostDispatcher(work, width=2, runners=10)
    items = [(host, (host, n)) for n in range(12) for host in ("a", "b", "c")]
    dispatch.submit(items)
    await drained(dispatch)
    for host in "abc":
        assert work.started[host] == list(range(12))
        assert work.peak[host] == 2
    assert work.peak_total == 6  # 3 hosts x width 2, under the 10 runners


async def test_items_submitted_ahead_go_before_a_hosts_queue() -> None:
    """Discovery's few polls go before the re-polls a host has queued (in their own order),
    not before what is in flight, and other hosts' queues are left as they were."""
    work = Recorder()
    dispatch = HostDispatcher(work, width=1, runners=10)
    dispatch.submit([("a", ("a", n)) for n in range(4)] + [("b", ("b", 0))])
    await asyncio.sleep(0.003)  # a's first item is in flight
    dispatch.submit([("a", ("a", 9)), ("a", ("a", 8)), ("c", ("c", 7))], ahead=True)
    await drained(dispatch)
    assert work.started["a"] == [0, 9, 8, 1, 2, 3]
    assert work.started["b"] == [0] and work.started["c"] == [7]


async def test_runners_bound_what_is_in_flight() -> None:
    work = Recorder()
    dispatch = HostDispatcher(work, width=5, runners=3)
    dispatch.submit([(host, (host, n)) for host in "abcde" for n in range(6)])
    await drained(dispatch)
    assert work.peak_total == 3
    assert sum(len(v) for v in work.started.values()) == 30


async def test_items_submitted_while_running_are_served() -> None:
    work = Recorder(seconds=0.005)
    dispatch = HostDispatcher(work, width=1, runners=2)
    dispatch.submit([("a", ("a", 0)), ("a", ("a", 1))])
    await asyncio.sleep(0.002)
    dispatch.submit([("a", ("a", 2)), ("b", ("b", 0))])
    await drained(dispatch)
    await asyncio.sleep(0)  # the runners see an empty queue and end
    dispatch.submit([("a", ("a", 3))])
    await drained(dispatch)
    assert work.started == {"a": [0, 1, 2, 3], "b": [0]}
    assert work.peak["a"] == 1


async def test_a_delayed_host_is_parked_not_waited_for() -> None:
    """One runner: the delayed host's items start after its delay, the other host's at once."""
    work = Recorder(seconds=0.0)
    delay_until = {"slow": time.monotonic() + 0.15}
    dispatch = HostDispatcher(work, width=1, runners=1, next_start=lambda h: delay_until.get(h, 0))
    began = time.monotonic()
    dispatch.submit([("slow", ("slow", 0)), ("fast", ("fast", 0)), ("fast", ("fast", 1))])
    await drained(dispatch)
    assert work.started == {"slow": [0], "fast": [0, 1]}
    fast_done = max(work.start_times["fast", n] for n in work.started["fast"])
    assert fast_done - began < 0.1  # not behind the parked host
    slow_start = work.start_times["slow", 0]
    assert slow_start >= delay_until["slow"]


async def test_a_failing_item_is_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    done: list[int] = []

    async def work(n: int) -> None:
        if n == 1:
            raise RuntimeError("boom")
        done.append(n)

    dispatch = HostDispatcher(work, width=1, runners=1)
    with caplog.at_level(logging.ERROR, logger="crawler.fetch"):
        dispatch.submit([("a", n) for n in range(4)])
        await asyncio.wait_for(dispatch.join(), 5)
    assert dispatch.pending == 0 and done == [0, 2, 3]
    assert "a dispatched item failed" in caplog.text and "boom" in caplog.text


async def test_close_cancels_runners_and_timers() -> None:
    started = asyncio.Event()
    cancelled: list[int] = []

    async def work(n: int) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(n)
            raise

    dispatch = HostDispatcher(
        work, width=1, runners=2, next_start=lambda h: time.monotonic() + 60 if h == "z" else 0
    )
    dispatch.submit([("a", 1), ("a", 2), ("z", 3)])
    await asyncio.wait_for(started.wait(), 5)
    dispatch.close()
    await asyncio.wait_for(dispatch.join(), 5)  # the item in flight is cancelled, then done
    assert cancelled == [1] and dispatch.pending == 0


def test_width_and_runners_must_be_positive() -> None:
    async def work(n: int) -> None:
        return None

    with pytest.raises(ValueError, match="at least 1"):
        HostDispatcher(work, width=0, runners=1)
    with pytest.raises(ValueError, match="at least 1"):
        HostDispatcher(work, width=1, runners=0)


async def test_the_fetchers_dispatcher_keeps_host_delays(
    make_fetcher: Callable[..., Fetcher],
) -> None:
    """Real fetches on loopback: a host with a delay gets its requests spaced by it, while the
    runners fetch another host (another loopback address) meanwhile.

    The spacing is what the fetcher can promise: no request reaches the server before the
    delay has passed since the fetcher began the host's previous one. The gaps between the
    server's own arrival times also carry each request's time in transit, which a busy
    machine stretches unevenly: they fell under 0.04 s for a 0.05 s delay with six test
    processes on two cores (2026-11-27)."""
    delay = 0.05
    starts: dict[str, list[float]] = defaultdict(list)  # when the server saw each request
    began: dict[str, list[float]] = defaultdict(list)  # when the fetcher was given each

    async def page(request: web.Request) -> web.Response:
        starts[request.host.split(":")[0]].append(time.monotonic())
        return web.Response(text="x")

    app = web.Application()
    app.router.add_get("/p/{n}", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    first = web.TCPSite(runner, "127.0.0.1", 0)
    await first.start()
    port = runner.addresses[0][1]
    await web.TCPSite(runner, "127.0.0.2", port).start()
    urls = [f"http://127.0.0.{1 if n < 4 else 2}:{port}/p/{n}" for n in range(8)]
    results: list[str] = []
    try:
        async with make_fetcher(
            per_host_concurrency=1, per_host_min_delay_s=delay, allowed_networks=("127.0.0.0/8",)
        ) as fetcher:

            async def work(n: int) -> None:
                began[f"127.0.0.{1 if n < 4 else 2}"].append(time.monotonic())
                results.append((await fetcher.fetch(FetchRequest(n, urls[n]))).outcome)

            dispatch = fetcher.dispatcher(work)
            assert dispatch.runners == fetcher.config.total_concurrency and dispatch.width == 1
            dispatch.submit((fetcher.gate_key(url), n) for n, url in enumerate(urls))
            await asyncio.wait_for(dispatch.join(), 10)
    finally:
        await runner.cleanup()
    assert results == ["ok"] * 8
    for host in ("127.0.0.1", "127.0.0.2"):
        assert len(starts[host]) == len(began[host]) == 4
        # each request reached the server no sooner than the delay after the previous began
        gaps = [b - a for a, b in zip(began[host], starts[host][1:], strict=False)]
        assert min(gaps) >= delay, (host, gaps)
    # the two hosts were served side by side, not one after the other
    assert starts["127.0.0.2"][0] < starts["127.0.0.1"][-1]


async def test_discard_takes_queued_items_out_and_leaves_the_rest_running() -> None:
    work = Recorder(seconds=0.05)
    delays = {"slow": time.monotonic() + 60.0}  # a host parked behind a long delay
    dispatch = HostDispatcher(work, width=1, runners=4, next_start=lambda h: delays.get(h, 0.0))
    dispatch.submit([(h, (h, n)) for n in range(5) for h in ("a", "slow")])
    await asyncio.sleep(0.01)
    assert work.started["a"] == [0] and not work.started["slow"]
    dropped = dispatch.discard(lambda item: item[1] >= 2)
    assert sorted(dropped) == [("a", 2), ("a", 3), ("a", 4)] + [("slow", n) for n in range(2, 5)]
    dropped_slow = dispatch.discard(lambda item: item[0] == "slow")
    assert sorted(dropped_slow) == [("slow", 0), ("slow", 1)]  # the parked host is gone
    await drained(dispatch)  # does not wait the 60 s of the parked host
    assert work.started["a"] == [0, 1] and not work.started["slow"]
    dispatch.submit([("a", ("a", 9))])  # still usable
    await drained(dispatch)
    assert work.started["a"] == [0, 1, 9]
