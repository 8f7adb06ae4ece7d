"""A coordinator round longer than the worker timeout still commits (PostgreSQL).

The coordinator's lock session is ended by the server once idle for a worker timeout (a
paused coordinator must lose the role). A round that takes longer than that, as at a
large size, must not lose it midway: another worker would take the lock, name itself in
cluster_state, and the slow round's write be refused; every successor's round would then
fail the same way. The round here is made slow on purpose (its read of the sites waits
three worker timeouts) while a second coordinator keeps trying for the lock.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from crawler.service._coordinator import Coordinator
from crawler.store import NewUrl, Store
from tests.service.conftest import service_settings

TIMEOUT = 1.0


@pytest.fixture
def db_backend() -> str:
    return "postgresql"


@pytest.mark.slow
def test_a_round_longer_than_the_worker_timeout_still_commits(
    store: Store, database_url: str
) -> None:
    store.add_urls([NewUrl(f"http://s{k}.test/p{i}") for k in range(4) for i in range(3)])
    settings = service_settings(
        database_url, cluster=True, capacity=4.0, heartbeat_s=0.2, worker_timeout_s=TIMEOUT
    )
    slow_store, other_store = Store(database_url), Store(database_url)
    a_id = store.cluster.register_worker(4.0, name="a")
    b_id = store.cluster.register_worker(4.0, name="b")
    real = slow_store.cluster.site_url_counts

    def slow_counts() -> Any:
        time.sleep(3 * TIMEOUT)  # a round at a size where reading the sites takes long
        return real()

    slow_store.cluster.site_url_counts = slow_counts  # type: ignore[method-assign]
    a = Coordinator(settings, slow_store, a_id)
    b = Coordinator(settings, other_store, b_id)
    done = threading.Event()
    b_took: list[bool] = []

    def contend() -> None:  # the other worker tries for the role all along
        while not done.is_set():
            b_took.append(b.tick() is not None)
            done.wait(0.2)

    try:
        contender = threading.Thread(target=contend, daemon=True)
        results: list[Any] = []
        began = time.monotonic()
        slow = threading.Thread(target=lambda: results.append(a.tick()), daemon=True)
        slow.start()
        deadline = time.monotonic() + 10
        while not a.is_coordinator and time.monotonic() < deadline:  # a holds the lock
            time.sleep(0.01)
        contender.start()  # then b tries for it all along a's round
        slow.join(60)
        took = time.monotonic() - began
        done.set()
        contender.join(10)
        result = results[0] if results else None
        print(f"\nslow round: {took:.2f} s (worker timeout {TIMEOUT:g} s), committed: "
              f"{result is not None}; the other took the role in {sum(b_took)} of "
              f"{len(b_took)} tries")  # fmt: skip
        assert took > 2 * TIMEOUT
        assert result is not None, "the slow round's write was refused"
        assert a.is_coordinator and not any(b_took)
        state = store.cluster.cluster_state()
        assert state is not None and state.coordinator == a_id
        assert {lease.worker_id for lease in store.cluster.leases()} == {a_id, b_id}
    finally:
        done.set()
        a.stop()
        b.stop()
        slow_store.close()
        other_store.close()
