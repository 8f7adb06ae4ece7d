"""A long coordinator round spaces the next: at most a quarter of the time in rounds.

A round reads every site and lease row: at a million sites it takes about a minute, and
rounds run back to back (a heartbeat apart) would keep the database reading without a
pause. After a round the coordinator waits a heartbeat, or three times the round's length
if that is longer.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from crawler.service._coordinator import ROUND_DUTY, Coordinator, pause_after
from crawler.store import NewUrl, Store
from tests.service.conftest import service_settings

ROUND_S = 0.15
HEARTBEAT_S = 0.05


def test_the_pause_after_a_round() -> None:
    assert pause_after(0.01, 2.0) == 2.0  # a short round: the heartbeat's cadence
    assert pause_after(60.0, 2.0) == pytest.approx(180.0)  # a minute's round: 3 minutes
    assert 60.0 / (60.0 + pause_after(60.0, 2.0)) == pytest.approx(ROUND_DUTY)


@pytest.fixture
def db_backend() -> str:
    return "postgresql"


def test_a_slow_round_is_followed_by_a_longer_pause(store: Store, database_url: str) -> None:
    store.add_urls([NewUrl(f"http://s{k}.test/p") for k in range(3)])
    settings = service_settings(
        database_url, cluster=True, capacity=4.0, heartbeat_s=HEARTBEAT_S, worker_timeout_s=1.0
    )
    rounds_store = Store(database_url)
    real = rounds_store.cluster.site_url_counts
    started: list[float] = []

    def slow_counts() -> Any:
        started.append(time.monotonic())
        time.sleep(ROUND_S)  # a round at a size where reading the sites takes long
        return real()

    rounds_store.cluster.site_url_counts = slow_counts  # type: ignore[method-assign]
    worker = rounds_store.cluster.register_worker(4.0, name="a")
    coordinator = Coordinator(settings, rounds_store, worker)
    coordinator.start()
    try:
        time.sleep(4 * ROUND_S / ROUND_DUTY + 0.3)
    finally:
        coordinator.stop()
        rounds_store.close()
    gaps = [b - a for a, b in itertools.pairwise(started)]
    # back to back they would start every ROUND_S + HEARTBEAT_S (0.2 s): 13 rounds
    assert 2 <= len(started) <= 5, started
    assert min(gaps) >= ROUND_S / ROUND_DUTY * 0.9, gaps
