"""Fixtures for the service tests: a changing site on 127.0.0.1 and service settings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from crawler.settings import Settings, load_settings
from crawler.testsite import ChangingSite, zipf_rates

#: delivery at the service's priority and unpaced, for the tests that wait seconds for every
#: event (``service_settings`` says why); ``as_env`` gives a ``crawler run``'s form
UNTHROTTLED_DELIVERY: dict[str, Any] = {"delivery_nice": 0, "delivery_busy_share": 0.0}


def as_env(values: dict[str, Any]) -> dict[str, str]:
    """Settings as the ``CRAWLER_*`` variables a ``crawler run`` reads."""
    return {f"CRAWLER_{name.upper()}": str(value) for name, value in values.items()}


def service_settings(database_url: str, **overrides: Any) -> Settings:
    """Settings for a fast local run: loopback allowed, no politeness delay, no metrics, no
    delivery process.

    The delivery process (crawler/delivery), a fork of the crawl workers' fork server,
    imports the store: 1.2-1.9 s of CPU and 2-3 s of wall time per service start on this
    2-core machine at load 11 (2026-11-27), against 0.5 s for the rest of a start with one
    crawl worker. The
    crawl tests have no destinations, so it would only poll an empty outbox; the tests of
    delivery pass ``delivery=True`` (tests/delivery), as does one test of the service's
    start and stop with it (test_service.py). Their delivery neither paces itself
    (``delivery_busy_share`` 0) nor runs at the lowest priority (``delivery_nice`` 0): they
    check that every event arrives within seconds, and on a machine that other jobs keep
    busy the pace would hold it to a twentieth of a core, and nice 19 to what two busy
    loops leave, next to nothing (seen: 166-174 deliveries still pending after 30 s). The
    pace and the niceness have their own tests and benchmark (tests/delivery/test_pace.py,
    test_process.py, benchmarks/delivery.py)."""
    values: dict[str, Any] = {
        "delivery": False,
        **UNTHROTTLED_DELIVERY,
        "database_url": database_url,
        "slot_seconds": 0.05,
        "capacity": 2.0,
        "metrics_port": 0,
        "allow_private_addresses": True,
        "per_host_min_delay_s": 0.0,
        "per_host_concurrency": 8,
        "fetch_timeout_s": 2.0,
        "fetch_retries": 0,
        "normalize_workers": 1,
        "fetch_workers": 1,
        "seed": 3,
    }
    values.update(overrides)
    if "slot_deadline_s" not in overrides:
        # 50 ms slots on a loaded machine: a slot's polls may take up to the fetch timeout,
        # as the default allowed before polls outlived their slot (tests of today's
        # default, the slot's length, pass slot_deadline_s=None)
        values["slot_deadline_s"] = max(values["slot_seconds"], values["fetch_timeout_s"])
    return load_settings(values)


@pytest.fixture
async def site() -> AsyncIterator[ChangingSite]:
    """40 pages changing at Zipf rates, one site tick per 50 ms slot."""
    changing = ChangingSite(zipf_rates(40, 0.6, 1.0), tick_seconds=0.05, page_size=4_000, seed=5)
    await changing.start()
    try:
        yield changing
    finally:
        await changing.stop()


@pytest.fixture
def rates() -> np.ndarray:
    return zipf_rates(40, 0.6, 1.0)
