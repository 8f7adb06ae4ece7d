"""Delivery paces itself while other processes keep the machine busy: the rule with clocks a
test sets, then a real delivery process beside real CPU-bound processes."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
from sqlalchemy import insert

from crawler.delivery import DeliveryProcess
from crawler.delivery._pace import MAX_PAUSE_S, CpuPace
from crawler.metrics import CrawlerMetrics
from crawler.settings import load_settings
from crawler.store import DestinationSpec, NewUrl, Store
from crawler.store.models import events
from tests.delivery.conftest import Receiver


class Clocks:
    """The wall clock, the process's CPU and the machine's busy seconds, set by the test."""

    def __init__(self) -> None:
        self.now = 0.0
        self.own = 0.0
        self.machine = 0.0

    def pace(self, share: float = 0.1, busy_above: float = 0.6) -> CpuPace:
        return CpuPace(
            share,
            busy_above,
            window_s=1.0,
            cores=2,
            clock=lambda: self.now,
            own_cpu=lambda: self.own,
            machine_busy=lambda: self.machine,
        )

    def run(self, seconds: float, own: float, others: float) -> None:
        """``seconds`` pass; the process uses ``own`` CPU seconds, the others ``others``."""
        self.now += seconds
        self.own += own
        self.machine += own + others


def test_paced_from_the_start_until_a_window_shows_room() -> None:
    """A delivery process started beside a busy crawl does not run its first window at full
    speed: it is limited until the first measure says the machine has room."""
    c = Clocks()
    pace = c.pace(share=0.1)
    c.run(0.3, own=0.3, others=0.1)
    assert pace.load.limited
    assert pace.pause() == MAX_PAUSE_S  # 0.17 s of CPU over: 1.7 s, paid a second at a time
    c.run(1.0, own=0.0, others=0.2)  # it slept; the machine has room
    assert pace.pause() == 0.0
    assert not pace.load.limited


def test_no_pause_while_the_machine_has_room() -> None:
    c = Clocks()
    pace = c.pace()
    c.run(1.0, own=0.05, others=0.5)  # the first window, under the share
    assert pace.pause() == 0.0
    for _ in range(10):  # the process uses a whole core; the others half a core of two
        c.run(0.5, own=0.5, others=0.25)
        assert pace.pause() == 0.0
    assert not pace.load.limited
    assert pace.load.others == pytest.approx(0.25)


def test_over_its_share_on_a_busy_machine_it_waits_off_its_debt() -> None:
    c = Clocks()
    pace = c.pace(share=0.1)
    c.run(1.0, own=0.2, others=1.6)  # the others: 80 % of two cores
    pause = pace.pause()
    assert pace.load.limited
    # a full window's credit (0.1 s) plus what the second earned (0.1 s), less 0.2 s used
    assert pause == 0.0
    c.run(0.1, own=0.1, others=0.16)
    # 0.1 s of CPU against 0.01 s earned: 0.09 s over, paid back at 0.1 s a second
    assert pace.pause() == pytest.approx(0.9)
    c.run(0.9, own=0.0, others=1.44)  # it slept
    assert pace.pause() == pytest.approx(0.0, abs=1e-9)


def test_the_share_it_keeps_on_a_busy_machine() -> None:
    """Sleeping the pauses it is given, a process that would use a whole core uses its share."""
    c = Clocks()
    pace = c.pace(share=0.1)
    start: tuple[float, float] = (0.0, 0.0)
    for k in range(2_000):
        if k == 100:  # past the first window, measured before the limit applies
            start = (c.now, c.own)
        pause = pace.pause()
        if pause > 0:
            c.run(pause, own=0.0, others=1.6 * pause)
        else:
            c.run(0.02, own=0.02, others=0.032)  # one pass: 20 ms of CPU
    assert (c.own - start[1]) / (c.now - start[0]) == pytest.approx(0.1, rel=0.05)
    assert max(0.0, pace.pause()) <= MAX_PAUSE_S


def test_a_busy_spell_starts_with_a_fresh_budget() -> None:
    c = Clocks()
    pace = c.pace(share=0.1)
    for _ in range(5):  # a quiet machine: the process uses a whole core, no limit
        c.run(1.0, own=1.0, others=0.2)
        assert pace.pause() == 0.0
    c.run(1.0, own=0.05, others=1.8)  # the crawl starts: no debt from the quiet spell
    assert pace.pause() == 0.0
    assert pace.load.limited


def test_share_zero_never_pauses() -> None:
    c = Clocks()
    pace = c.pace(share=0.0)
    c.run(1.0, own=1.0, others=2.0)
    assert pace.pause() == 0.0
    assert not pace.enabled


def test_a_negative_share_is_refused() -> None:
    with pytest.raises(ValueError):
        CpuPace(-0.1, 0.6)


def _burn(stop: Any) -> None:
    while not stop.is_set():
        sum(range(10_000))


@pytest.fixture
def busy_machine() -> Iterator[None]:
    """Every core kept busy by a process at the normal priority."""
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    burners = [ctx.Process(target=_burn, args=(stop,)) for _ in range(os.cpu_count() or 2)]
    for p in burners:
        p.start()
    try:
        yield
    finally:
        stop.set()
        for p in burners:
            p.join(10)
            if p.is_alive():
                p.kill()


def _seed(store: Store, n_urls: int, per_url: int) -> None:
    report = store.add_urls([NewUrl(f"http://127.0.0.1:9/p{k}") for k in range(n_urls)])
    ids = [uid for _, uid in report.added]
    now = datetime.now(UTC)
    rows = [
        {"type": "page.failing", "url_id": uid, "slot": k, "created_at": now, "payload": "{}"}
        for k in range(per_url)
        for uid in ids
    ]
    with store.engine.begin() as conn:
        conn.execute(insert(events), rows)


@pytest.mark.slow
async def test_a_delivery_process_keeps_its_share_on_a_busy_machine(
    tmp_path: Path, receiver: Receiver, busy_machine: None
) -> None:
    """At the service's priority (so that only the pace holds it back), with every core
    kept busy by other processes and a backlog of events, the delivery process uses about
    its ``delivery_busy_share`` of one core, and counts the seconds it waited."""
    url = f"sqlite:///{tmp_path / 'd.db'}"
    with Store(url) as store:
        store.upgrade()
        _seed(store, 50, 200)
        store.outbox.add_destination(DestinationSpec(receiver.url, receiver.secret))
    share = 0.05
    settings = load_settings(
        {
            "database_url": url,
            "delivery_nice": 0,
            "delivery_busy_share": share,
            "delivery_busy_above": 0.5,
            "allow_private_addresses": True,
        }
    )
    metrics = CrawlerMetrics()
    delivery = DeliveryProcess(settings, metrics, exclusive_lock=False)
    delivery.start()
    try:
        assert delivery.wait_ready(120)
        assert delivery.pid is not None
        proc = psutil.Process(delivery.pid)
        deadline = time.monotonic() + 60
        while not receiver.received and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert receiver.received, "nothing delivered"
        cpu0, t0 = sum(proc.cpu_times()[:2]), time.monotonic()
        await asyncio.sleep(6.0)
        cpu1, t1 = sum(proc.cpu_times()[:2]), time.monotonic()
    finally:
        delivery.stop(timeout=60)
    used = (cpu1 - cpu0) / (t1 - t0)
    # its share, a pass's worth of overshoot, and the clock ticks' rounding
    assert used < share + 0.05, f"the delivery process used {used:.2f} of a core"
    paced = [
        s.value
        for m in metrics.registry.collect()
        for s in m.samples
        if s.name == "crawler_delivery_paced_seconds_total"
    ]
    assert paced and paced[0] > 0
